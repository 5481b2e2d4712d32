"""Model fan-out benchmark: N model-calling branches against a server that answers late.

One ``run_steps()`` barrier over N branches (``max_concurrency`` C), each one Chat
Completions call through :class:`~runtime.adapters.openai.OpenAICompatibleModel` (the
official ``openai`` SDK), against a local OpenAI-compatible server (asyncio, in a process
of its own) that answers every request after L ms. The ideal wall time is
``ceil(N / C) * L``; printed for each variant, measured in the same run:

  * ``stream``: the adapter as configured by default: a streamed answer (server-sent
    events, usage in the last chunk), assembled from its chunks;
  * ``whole``: the adapter with ``stream=False``: one JSON answer per call;
  * ``no-http``: an in-process model that sleeps L ms and answers, no HTTP at all: the
    engine's own cost for N model-calling branches, the floor of the other two;
  * ``httpx2``: no runtime and no SDK: N streamed POSTs of the same body, C at a time, on
    one bare ``httpx2.AsyncClient`` (the client library the SDK is built on), each answer
    read to its end: what the HTTP client alone costs, the floor of ``stream`` on this
    machine.

The server reports what it saw per run: TCP connections accepted and the most requests it
held at once.

    .venv/bin/python bench/model_fanout.py [--n 1000] [--concurrency 200] [--latency-ms 100]
                                           [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio
from ratios import ratio, spread

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ParallelConfig,
    Routable,
    RunStepRequest,
    Step,
    TokenUsage,
)
from runtime.adapters.openai import OpenAICompatibleModel
from runtime.provider_limits import ProviderLimiter

TIMINGS: list[float] = []
TARGET = 1.3


# -- the server (run as `model_fanout.py --serve LATENCY`) --------------------------------


ANSWER = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}).encode()


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks
                    ) + b"data: [DONE]\n\n"


_CHUNK = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
          "model": "bench"}
STREAMED = _sse(
    {**_CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "o"},
                            "finish_reason": None}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {"content": "k"}, "finish_reason": None}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {**_CHUNK, "choices": [],
     "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}},
)
"""The same answer streamed: three chunks, then the usage (stream_options.include_usage)."""


def serve(latency: float) -> None:
    """Answer every chat completion ``latency`` seconds after its request arrived.

    An ``asyncio.Protocol`` with timer callbacks rather than streams: the server shares
    this 2-core machine with the client, and what is measured is the client against a
    provider that answers after ``latency``, not the server's own queueing.
    """
    stats = {"connections": 0, "requests": 0, "current": 0, "max_concurrent": 0}

    class Chat(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self.transport = transport
            self.buffer = b""
            stats["connections"] += 1

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
                head = self.buffer[:end].decode("latin-1")
                lower = head.lower()
                at = lower.find("content-length:")
                length = int(lower[at + 15:].split("\r\n", 1)[0]) if at >= 0 else 0
                if len(self.buffer) < end + 4 + length:
                    return
                body = self.buffer[end + 4:end + 4 + length]
                self.buffer = self.buffer[end + 4 + length:]
                if head.startswith("GET /stats"):
                    self.reply(json.dumps(stats).encode(), counted=False)
                    for key in stats:
                        if key != "current":
                            stats[key] = 0
                    continue
                stats["requests"] += 1
                stats["current"] += 1
                stats["max_concurrent"] = max(stats["max_concurrent"], stats["current"])
                streamed = b'"stream":true' in body or b'"stream": true' in body
                asyncio.get_running_loop().call_later(
                    latency, self.reply, STREAMED if streamed else ANSWER, True,
                    b"text/event-stream" if streamed else b"application/json")

        def reply(self, body: bytes, counted: bool, kind: bytes = b"application/json") -> None:
            if counted:
                stats["current"] -= 1
            if not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\n"
                                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Chat, "127.0.0.1", 0, backlog=4096)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())


@contextmanager
def chat_server(latency: float) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(latency)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


def server_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats", timeout=10) as resp:
        stats: dict[str, int] = json.loads(resp.read())
        return stats


# -- the flow -----------------------------------------------------------------------------


class Ask(Step):
    """One model call."""


class Fan(LogicStep):
    async def run_logic(self) -> Routable:
        n = self.get_context("config.n")
        requests = [RunStepRequest(Ask, key=str(i), user_message="hi") for i in range(n)]
        start = time.perf_counter()
        batch = await self.run_steps(
            requests, max_concurrency=self.get_context("config.concurrency")
        )
        TIMINGS.append(time.perf_counter() - start)
        assert len(batch.fulfilled) == n, batch.rejected[:1]
        return "ok"


class FanFlow(Flow):
    retry_delay = 0.0
    max_model_calls_per_turn = 1_000_000

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="openai", name="bench")

    def define_steps(self) -> list[Any]:
        return [Fan(self), Ask(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=1_000_000)


class Sleeper:
    """A model that answers after ``latency`` seconds, without HTTP."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        await anyio.sleep(self.latency)
        return ModelResponse(content="ok", finish_reason="stop",
                             usage=TokenUsage(input_tokens=12, output_tokens=1,
                                              total_tokens=13))


async def bare_client(url: str, n: int, concurrency: int) -> float:
    """N streamed POSTs, ``concurrency`` at a time, on one bare httpx2 client."""
    import httpx2

    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}],
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    headers = {"Authorization": "Bearer sk-bench", "Content-Type": "application/json"}
    slots = anyio.Semaphore(concurrency)
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx2.AsyncClient(limits=limits, timeout=60) as client:
        async def one() -> None:
            async with slots, client.stream("POST", f"{url}/chat/completions", content=body,
                                            headers=headers) as answer:
                async for _ in answer.aiter_bytes():
                    pass

        start = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(n):
                group.start_soon(one)
        return time.perf_counter() - start


async def fan_out(url: str, variant: str, n: int, concurrency: int, latency: float) -> float:
    if variant == "httpx2":
        return await bare_client(url, n, concurrency)
    TIMINGS.clear()
    model: OpenAICompatibleModel | Sleeper
    if variant == "no-http":
        model = Sleeper(latency)
    else:
        model = OpenAICompatibleModel(url, "sk-bench", limiter=ProviderLimiter(),
                                      stream=variant == "stream")
    engine = FlowEngine(flows=[FanFlow], providers={"openai": model})
    reply = await engine.run("FanFlow", "go", config={"n": n, "concurrency": concurrency})
    assert reply.success, reply.message
    if isinstance(model, OpenAICompatibleModel):
        await model.aclose()
    return TIMINGS[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    n, concurrency, latency = args.n, args.concurrency, args.latency_ms / 1000
    ideal = math.ceil(n / concurrency) * latency
    variants = ("stream", "whole", "no-http", "httpx2")
    samples: dict[str, list[float]] = {v: [] for v in variants}
    seen: dict[str, list[dict[str, int]]] = {v: [] for v in variants}
    with chat_server(latency) as url:
        # Rounds interleave the variants, so drift on a shared machine hits both alike;
        # the first round warms up.
        for round_ in range(args.reps + 1):
            for variant in variants:
                gc.collect()
                elapsed = anyio.run(fan_out, url, variant, n, concurrency, latency)
                stats = server_stats(url)
                if round_:
                    samples[variant].append(elapsed)
                    seen[variant].append(stats)

    print(f"model fan-out: {n} branches, max_concurrency={concurrency}, server answers "
          f"after {args.latency_ms:g} ms; ideal ({n}/{concurrency}) x {args.latency_ms:g} ms"
          f" = {ideal:.3f} s; median of {args.reps} runs")
    samples["ideal"] = [ideal] * args.reps
    for variant in variants:
        wall = statistics.median(samples[variant])
        stats = seen[variant][-1]
        verdict = f" (target <= {TARGET}x)" if variant == "stream" else ""
        seen_by = "" if variant == "no-http" else (
            f"   server: {stats['connections']} connections for {stats['requests']} "
            f"requests, at most {stats['max_concurrent']} at once")
        print(f"  {variant:<7} wall {wall:.3f} s   ideal {ideal:.3f} s   ratio "
              f"{wall / ideal:.2f}x {spread(samples, variant, 'ideal')}{verdict}{seen_by}")
    for top, bottom in (("stream", "whole"), ("stream", "no-http"), ("stream", "httpx2")):
        print(f"  {top} / {bottom} (median of per-round ratios): "
              f"{ratio(samples, top, bottom):.2f}x {spread(samples, top, bottom)}")


if __name__ == "__main__":
    main()
