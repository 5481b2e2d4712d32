"""Dashboard sink cost: a remote process's turn time with a DashboardSink on vs off.

The turn is a nested fan-out of about 1,000 branches (``--outer`` branches, each forking
``--inner`` no-op leaves). "Off" runs it with no sink at all (no event is even built); "on"
ships every event to a local HTTP server that accepts and discards (stdlib
``http.server``, in a process of its own, as a dashboard would be). Rounds interleave the
variants, ``gc.collect()`` runs between them, and the ratio is the median of the per-round
ratios (target: at most 1.2x). Also printed: the turn plus the final flush, a
``MemorySink`` (events built and kept), and a sink that discards each event as it comes
(``built``: the cost of building the events alone, the floor under any sink).

    PICOFLOW_DEBUG=0 .venv/bin/python bench/ingest_sink.py [--outer 10] [--inner 100] [--reps 9]

:func:`measure` is the importable part (``bench/ingest.py`` can point it at a real
dashboard with ``url`` and ``token``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratios import ratio, spread

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelSelection,
    ParallelConfig,
    RunStepRequest,
)
from runtime.events import DashboardSink, EventSink, MemorySink

TARGET = 1.2

DISCARD_SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Discard(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *args):
        pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"runs": {}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

server = ThreadingHTTPServer(("127.0.0.1", 0), Discard)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Leaf(LogicStep):
    async def run_logic(self) -> Any:
        return None


class Middle(LogicStep):
    async def run_logic(self) -> Any:
        inner = self.get_context("config.inner")
        await self.run_steps([RunStepRequest(Leaf, key=str(i)) for i in range(inner)])
        return None


class Top(LogicStep):
    async def run_logic(self) -> Any:
        outer = self.get_context("config.outer")
        await self.run_steps([RunStepRequest(Middle, key=str(i)) for i in range(outer)])
        return "ok"


class NestedFan(Flow):
    """Only logic steps: no model is called."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [Top(self), Middle(self), Leaf(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=1_000_000)


class _Discard:
    """A sink that drops every event: what building the events costs, with no sink work."""

    name = "discard"

    def receive(self, event: object) -> None:
        return None


@contextmanager
def discard_server() -> Iterator[str]:
    """A local HTTP server process that answers every POST 200 and keeps nothing."""
    proc = subprocess.Popen([sys.executable, "-c", DISCARD_SERVER], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def one_turn(config: dict[str, int], sinks: list[EventSink]) -> float:
    engine = FlowEngine(flows=[NestedFan], sinks=sinks)
    start = time.perf_counter()
    reply = await engine.run("NestedFan", "go", config=config)
    elapsed = time.perf_counter() - start
    assert reply.success, reply.message
    return elapsed


def measure(url: str, token: str = "bench", *, outer: int = 10, inner: int = 100,
            reps: int = 9) -> dict[str, list[float]]:
    """Seconds per round for each variant: ``off``, ``on`` (the turn), ``on+flush``
    (the turn and the sink's final flush), ``memory`` and ``built``. Two warm-up rounds."""
    config = {"outer": outer, "inner": inner}

    def off() -> tuple[float, float]:
        t = anyio.run(one_turn, config, [])
        return t, t

    def on() -> tuple[float, float]:
        sink = DashboardSink(url, token)
        start = time.perf_counter()
        t = anyio.run(one_turn, config, _sinks(sink))
        assert sink.close(timeout=60), "the sink could not deliver everything"
        assert sink.dropped == 0
        return t, time.perf_counter() - start

    def memory() -> tuple[float, float]:
        t = anyio.run(one_turn, config, _sinks(MemorySink()))
        return t, t

    def built() -> tuple[float, float]:
        t = anyio.run(one_turn, config, _sinks(_Discard()))
        return t, t

    variants: dict[str, Callable[[], tuple[float, float]]] = {
        "off": off, "on": on, "memory": memory, "built": built}
    samples: dict[str, list[float]] = {"off": [], "on": [], "on+flush": [], "memory": [],
                                       "built": []}
    for round_ in range(reps + 2):
        for name, variant in variants.items():
            gc.collect()
            turn, total = variant()
            if round_ >= 2:
                samples[name].append(turn)
                if name == "on":
                    samples["on+flush"].append(total)
    return samples


def _sinks(*sinks: EventSink) -> list[EventSink]:
    return list(sinks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outer", type=int, default=10)
    parser.add_argument("--inner", type=int, default=100)
    parser.add_argument("--reps", type=int, default=9)
    args = parser.parse_args()
    branches = args.outer + args.outer * args.inner
    with discard_server() as url:
        samples = measure(url, outer=args.outer, inner=args.inner, reps=args.reps)
    print(f"nested fan-out, {args.outer} x {args.inner} ({branches} branches), median of "
          f"{args.reps} interleaved rounds")
    for name in ("off", "on", "on+flush", "memory", "built"):
        ms = statistics.median(samples[name]) * 1e3
        print(f"  {name:<9} {ms:8.1f} ms   {ms * 1e3 / branches:7.1f} µs per branch")
    print(f"ratio turn, DashboardSink on / off       {ratio(samples, 'on', 'off'):5.2f}x "
          f"{spread(samples, 'on', 'off')} (target <= {TARGET})")
    print(f"ratio turn + final flush, on / off       {ratio(samples, 'on+flush', 'off'):5.2f}x")
    print(f"ratio turn, MemorySink / off (reference) {ratio(samples, 'memory', 'off'):5.2f}x "
          "(events built and kept)")
    print(f"ratio turn, built / off (the floor)      {ratio(samples, 'built', 'off'):5.2f}x "
          f"{spread(samples, 'built', 'off')} (events built and dropped: any sink pays this)")
    print(f"ratio turn, DashboardSink / built        {ratio(samples, 'on', 'built'):5.2f}x "
          "(what shipping adds)")


if __name__ == "__main__":
    main()
