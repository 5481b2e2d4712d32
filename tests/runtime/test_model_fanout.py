"""The OpenAI-compatible adapter under fan-out, against a real local HTTP server.

What the server observes is the evidence: how many requests it handled at once (past the
40 worker threads a blocking transport would be capped by, never past ``max_in_flight``),
how many TCP connections it accepted (fewer than requests: they are reused). Rate limits
and ``Retry-After`` run on a virtual clock, so nothing here waits for wall time.
"""

from __future__ import annotations

import email.utils
import gc
import shutil
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("openai")

import openai

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    Message,
    ModelError,
    ModelRequest,
    ModelSelection,
    ModelTransportError,
    ParallelConfig,
    Routable,
    RunStepRequest,
    Step,
)
from runtime.adapters.openai import OpenAICompatibleModel
from runtime.provider_limits import (
    ProviderLimiter,
    ProviderLimits,
    provider_identity,
    retry_after_seconds,
    shared_limiter,
)
from tests.runtime.chat_server import ChatServer, Reply, VirtualClock, chat_server, completion
from tests.runtime.helpers import until

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with chat_server() as chat:
        yield chat


def request(params: dict[str, Any] | None = None) -> ModelRequest:
    return ModelRequest(
        selection=ModelSelection(provider="openai", name="gpt-test", params=params or {}),
        messages=[Message(type="human", content="Hi")],
    )


Pool = list[OpenAICompatibleModel]


@pytest.fixture
async def pool() -> AsyncIterator[Pool]:
    """The adapters a test makes, their connections closed in the test's event loop when
    it ends."""
    made: Pool = []
    yield made
    for adapter in made:
        await adapter.aclose()


def model(url: str, pool: Pool, **kwargs: Any) -> OpenAICompatibleModel:
    """An adapter with its own limiter, so no test sees another's."""
    kwargs.setdefault("limiter", ProviderLimiter())
    adapter = OpenAICompatibleModel(url, "sk-test", **kwargs)
    pool.append(adapter)
    return adapter


# -- a flow whose branches call the model -------------------------------------------------


class Ask(Step):
    """One model call."""


class Fan(LogicStep):
    async def run_logic(self) -> Routable:
        n = self.get_context("config.n")
        batch = await self.run_steps(
            [RunStepRequest(Ask, key=str(i), user_message="hi") for i in range(n)],
            max_concurrency=self.get_context("config.max_concurrency"),
        )
        return f"{len(batch.fulfilled)} fulfilled"


class FanFlow(Flow):
    retry_delay = 0.0
    max_model_calls_per_turn = 10_000

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="openai", name="gpt-test")

    def define_steps(self) -> list[Step]:
        return [Fan(self), Ask(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=10_000)


async def fan_out(adapter: OpenAICompatibleModel, n: int, max_concurrency: int | None = None,
                  ) -> str:
    engine = FlowEngine(flows=[FanFlow], providers={"openai": adapter})
    reply = await engine.run("FanFlow", "go", config={"n": n, "max_concurrency": max_concurrency})
    assert reply.success, reply.message
    return reply.message


# -- concurrency and connections ----------------------------------------------------------


async def test_branches_have_more_than_forty_calls_in_flight(pool: Pool) -> None:
    # Every request is held until all 60 are at the server together: a transport capped
    # at 40 worker threads would never get there.
    with chat_server(gate=60) as chat:
        adapter = model(chat.url, pool)
        assert await fan_out(adapter, 60) == "60 fulfilled"
    assert chat.max_concurrent == 60
    assert chat.requests == 60


async def test_max_in_flight_is_never_exceeded(pool: Pool) -> None:
    with chat_server(gate=5) as chat:
        limiter = ProviderLimiter(ProviderLimits(max_in_flight=5))
        adapter = model(chat.url, pool, limiter=limiter)
        assert await fan_out(adapter, 40) == "40 fulfilled"
    assert chat.requests == 40
    assert chat.max_concurrent == 5
    assert limiter.max_in_flight_seen == 5
    assert limiter.in_flight == 0


async def test_connections_are_reused(pool: Pool) -> None:
    with chat_server(gate=4) as chat:
        adapter = model(chat.url, pool,
                        limiter=ProviderLimiter(ProviderLimits(max_in_flight=4)))
        assert await fan_out(adapter, 40) == "40 fulfilled"
    assert chat.requests == 40
    assert chat.connections == 4


async def test_a_fan_out_is_spread_over_connection_pools(pool: Pool) -> None:
    # Past SHARD_CONNECTIONS in flight, calls go to several pools in turn; together they
    # hold every call at once, on as many connections.
    with chat_server(gate=80) as chat:
        adapter = model(chat.url, pool)
        assert await fan_out(adapter, 80) == "80 fulfilled"
    assert chat.max_concurrent == 80
    assert chat.connections == 80
    [clients] = adapter._loops.values()
    assert len(clients.shards) > 1


@pytest.mark.filterwarnings("ignore::ResourceWarning",
                            "ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_finished_event_loop_leaves_no_clients_behind() -> None:
    # A connection refers to its loop; kept after the loop ended, it would keep the loop
    # alive for good. The sockets are left to the garbage collector (hence the warning
    # filter: a finished loop cannot close them politely).
    with chat_server() as chat:
        adapter = OpenAICompatibleModel(chat.url, "sk-test", limiter=ProviderLimiter())

        async def call(close: bool = False) -> int:
            await adapter.invoke(request())
            loops = len(adapter._loops)
            if close:
                await adapter.aclose()
            return loops

        assert anyio.run(call) == 1
        assert anyio.run(call, backend="trio") == 1  # the asyncio loop's clients are gone
        assert anyio.run(call, True) == 1
        assert adapter._loops == {}
        gc.collect()
    assert chat.connections == 3


async def test_a_connection_the_server_dropped_is_replaced(
    server: ChatServer, pool: Pool,
) -> None:
    adapter = model(server.url, pool, stream=False)
    server.replies.append(Reply(body=completion("first"), close=True))
    server.replies.append(Reply(body=completion("second")))
    assert (await adapter.invoke(request())).content == "first"
    assert (await adapter.invoke(request())).content == "second"
    assert server.connections == 2


@pytest.mark.parametrize(("failure", "stream"), [("hang_up", True), ("reset", False)])
async def test_a_request_on_a_reused_connection_the_server_closed_goes_again_on_a_new_one(
    server: ChatServer, pool: Pool, failure: str, stream: bool,
) -> None:
    # A connection the server closed ends in an end of stream or in a reset (timing decides).
    adapter = model(server.url, pool, stream=stream)
    server.replies.append(Reply(body=completion("first")))
    server.replies.append(Reply(**{failure: True}))
    server.replies.append(Reply(body=completion("second")))
    assert (await adapter.invoke(request())).content == "first"
    assert (await adapter.invoke(request())).content == "second"
    assert server.requests == 3
    assert server.connections == 2


@pytest.mark.parametrize("failure", ["reset", "hang_up"])
async def test_a_request_that_failed_on_a_new_connection_is_not_sent_again(
    server: ChatServer, pool: Pool, failure: str,
) -> None:
    # Sent on a connection opened for it, the request reached the server: sending it again
    # could make the call twice.
    adapter = model(server.url, pool)
    server.replies.append(Reply(**{failure: True}))
    server.replies.append(Reply(body=completion("never asked for")))
    with pytest.raises(ModelTransportError, match="connection failed"):
        await adapter.invoke(request())
    assert server.requests == 1


async def test_chunked_reply(server: ChatServer, pool: Pool) -> None:
    server.replies.append(Reply(body=completion("in two chunks"), chunked=True))
    server.replies.append(Reply(body=completion("same connection")))
    adapter = model(server.url, pool, stream=False)
    assert (await adapter.invoke(request())).content == "in two chunks"
    assert (await adapter.invoke(request())).content == "same connection"
    assert server.connections == 1


async def test_cancelling_a_call_gives_its_slot_back(
    server: ChatServer, pool: Pool,
) -> None:
    limiter = ProviderLimiter(ProviderLimits(max_in_flight=1))
    adapter = model(server.url, pool, limiter=limiter)
    server.replies.append(Reply(body=completion("never seen"), hold=True))
    async with anyio.create_task_group() as tg:
        held, queued = anyio.CancelScope(), anyio.CancelScope()
        queued_done = anyio.Event()

        async def call(scope: anyio.CancelScope, done: anyio.Event | None = None) -> None:
            try:
                with scope:
                    await adapter.invoke(request())
            finally:
                if done is not None:
                    done.set()

        tg.start_soon(call, held)
        await until(lambda: server.requests >= 1, "the held request")
        tg.start_soon(call, queued, queued_done)
        await until(lambda: bool(limiter._waiters), "the queued call to wait for a slot")
        assert limiter.in_flight == 1
        queued.cancel()  # waiting for the slot
        with anyio.fail_after(5):
            await queued_done.wait()
        assert (limiter.in_flight, len(limiter._waiters)) == (1, 0)
        held.cancel()  # awaiting the server's answer
    assert limiter.in_flight == 0
    assert (await adapter.invoke(request())).content == "ok"
    assert limiter.in_flight == 0


async def test_https_with_connection_reuse(tmp_path: Path, pool: Pool) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    with chat_server(tls=server_side) as chat:
        async with openai.DefaultAsyncHttpxClient(verify=trusting) as http:
            adapter = model(chat.url, pool, http_client=http)
            for _ in range(3):
                assert (await adapter.invoke(request())).content == "ok"
        # The system's certificate store does not know this certificate: refused.
        untrusted = model(chat.url, pool)
        with pytest.raises(ModelTransportError, match="connection failed"):
            await untrusted.invoke(request())
    assert chat.requests == 3
    assert chat.connections == 1  # reused by the three calls (the refused one never was)


def test_a_limiter_is_shared_by_event_loops_in_other_threads() -> None:
    # A worker process may run turns in several threads, one event loop each: a slot
    # freed in one loop must wake a call waiting in another.
    limiter = ProviderLimiter(ProviderLimits(max_in_flight=1))
    holding, waiting = threading.Event(), threading.Event()
    order: list[str] = []

    async def first() -> None:
        admission = await limiter.acquire()
        order.append("first in")
        holding.set()
        await until(lambda: bool(limiter._waiters), "the second call to wait for a slot")
        order.append("first out")
        admission.release()

    async def second() -> None:
        holding.wait(10)
        admission = await limiter.acquire()
        order.append("second in")
        admission.release()
        waiting.set()

    threads = [threading.Thread(target=anyio.run, args=(first,)),
               threading.Thread(target=anyio.run, args=(second,), kwargs={"backend": "trio"})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert waiting.is_set()
    assert order == ["first in", "first out", "second in"]
    assert limiter.in_flight == 0


# -- Retry-After --------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["seconds", "http-date"])
async def test_429_retry_after_is_waited_out_before_the_retry(
    server: ChatServer, pool: Pool, form: str,
) -> None:
    clock = VirtualClock()
    arrivals: list[float] = []
    server.on_request = lambda body: arrivals.append(clock.now)
    value = "7" if form == "seconds" else email.utils.formatdate(clock.time() + 7, usegmt=True)
    server.replies.append(Reply(429, {"error": {"message": "Rate limit reached"}},
                                headers={"Retry-After": value}))
    server.replies.append(Reply(body=completion("Hello after the pause")))
    adapter = model(server.url, pool, limiter=ProviderLimiter(clock=clock))

    with pytest.raises(ModelTransportError) as info:
        await adapter.invoke(request())
    assert info.value.extra["retry_after"] == 7
    assert (await adapter.invoke(request())).content == "Hello after the pause"
    assert clock.slept == [7.0]
    assert arrivals == [0.0, 7.0]


async def test_the_engine_retries_a_429_after_the_pause(
    server: ChatServer, pool: Pool,
) -> None:
    clock = VirtualClock()
    arrivals: list[float] = []
    server.on_request = lambda body: arrivals.append(clock.now)
    server.replies.append(Reply(429, {"error": {"message": "slow down"}},
                                headers={"Retry-After": "20"}))
    adapter = model(server.url, pool, limiter=ProviderLimiter(clock=clock))
    engine = FlowEngine(flows=[FanFlow], providers={"openai": adapter})
    # Three branches: the first 429 pauses the provider for every branch.
    reply = await engine.run("FanFlow", "go", config={"n": 3, "max_concurrency": 1})
    assert reply.success, reply.message
    assert reply.message == "3 fulfilled"
    assert arrivals == [0.0, 20.0, 20.0, 20.0]


def test_retry_after_forms() -> None:
    clock = VirtualClock()
    assert retry_after_seconds("12", clock) == 12
    assert retry_after_seconds("1.5", clock) == 1.5
    assert retry_after_seconds("-3", clock) == 0
    date = email.utils.formatdate(clock.time() + 90, usegmt=True)
    assert retry_after_seconds(date, clock) == 90
    past = email.utils.formatdate(clock.time() - 90, usegmt=True)
    assert retry_after_seconds(past, clock) == 0
    for junk in (None, "", "soon", "nan", "inf"):
        assert retry_after_seconds(junk, clock) is None


# -- rate limits on a virtual clock -------------------------------------------------------


def windows_hold(points: list[tuple[float, float]], limit: float) -> bool:
    """Whether every 60-second window of (time, amount) points sums to at most ``limit``."""
    return all(sum(a for u, a in points if t - 60 < u <= t) <= limit for t, _ in points)


async def test_requests_per_minute_hold(server: ChatServer, pool: Pool) -> None:
    clock = VirtualClock()
    arrivals: list[float] = []
    limiter = ProviderLimiter(ProviderLimits(requests_per_minute=3), clock=clock)
    adapter = model(server.url, pool, limiter=limiter)

    async def call() -> None:
        await adapter.invoke(request())

    async def admitted() -> None:
        admission = await limiter.acquire()
        arrivals.append(clock.now)
        admission.release()

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(admitted)
    assert len(arrivals) == 10
    assert windows_hold([(t, 1) for t in arrivals], 3)
    assert max(arrivals) == 180  # 3 at 0, 60 and 120; the tenth at 180

    # Through the adapter: ten calls, all answered, the clock three minutes on.
    start = clock.now
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(call)
    assert server.requests == 10
    assert clock.now >= start + 180


async def test_tokens_per_minute_hold() -> None:
    clock = VirtualClock()
    limiter = ProviderLimiter(ProviderLimits(tokens_per_minute=100), clock=clock)
    admitted: list[tuple[float, float]] = []

    async def spend(tokens: int) -> None:
        admission = await limiter.acquire(tokens)
        admitted.append((clock.now, tokens))
        admission.settle(tokens)
        admission.release()

    async with anyio.create_task_group() as tg:
        for tokens in (40, 40, 40, 30, 70, 100, 10, 250):
            tg.start_soon(spend, tokens)
    assert len(admitted) == 8
    # A call bigger than the quota counts as the whole quota: admitted on an empty window.
    assert windows_hold([(t, min(n, 100)) for t, n in admitted], 100)


async def test_reported_usage_replaces_the_estimate(
    server: ChatServer, pool: Pool,
) -> None:
    clock = VirtualClock()
    limiter = ProviderLimiter(ProviderLimits(tokens_per_minute=100), clock=clock)
    adapter = model(server.url, pool, limiter=limiter)
    server.replies.append(Reply(body=completion(usage=(80, 10, 90))))
    await adapter.invoke(request())  # estimated at a few tokens, reported as 90
    await adapter.invoke(request(params={"max_tokens": 20}))  # 90 + ~30 > 100: waits
    assert clock.slept == [60.0]


# -- configuration ------------------------------------------------------------------------


def test_limits_from_the_environment() -> None:
    adapter = OpenAICompatibleModel.from_env({
        "OPENAI_BASE_URL": "http://llm.local:8080/v1",
        "PICOFLOW_MODEL_MAX_IN_FLIGHT": "8",
        "PICOFLOW_MODEL_RPM": "500",
        "PICOFLOW_MODEL_TPM": "0",
    })
    assert adapter.limits == ProviderLimits(max_in_flight=8, requests_per_minute=500)
    assert OpenAICompatibleModel.from_env({}).limits == ProviderLimits()
    with pytest.raises(ModelError, match="PICOFLOW_MODEL_RPM"):
        OpenAICompatibleModel.from_env({"PICOFLOW_MODEL_RPM": "lots"})
    with pytest.raises(ModelError, match="max_in_flight"):
        OpenAICompatibleModel("http://llm.local/v1", max_in_flight=0)


def test_one_limiter_per_provider_with_the_tightest_limits() -> None:
    url = "http://quota.test.invalid/v1"
    a = OpenAICompatibleModel(url, "sk-a", max_in_flight=10, requests_per_minute=100)
    b = OpenAICompatibleModel(url + "/", "sk-a", max_in_flight=4)
    other_key = OpenAICompatibleModel(url, "sk-b", max_in_flight=10)
    shared = a.limiter_for("sk-a")
    assert b.limiter_for("sk-a") is shared
    assert shared.limits == ProviderLimits(max_in_flight=4, requests_per_minute=100)
    assert other_key.limiter_for("sk-b") is not shared
    assert shared_limiter(provider_identity(url, "sk-a"), ProviderLimits()) is shared
    assert "sk-a" not in repr(provider_identity(url, "sk-a"))
