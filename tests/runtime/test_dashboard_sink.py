"""DashboardSink against a real local HTTP server that speaks the ingest contract.

The server (``tests/runtime/ingest_server.py``) stores by seq, refuses gaps, answers
scripted failures and can hold its replies; every assertion is on what it stored and the
order and number of requests it saw, never on elapsed time.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelSelection,
    ParallelConfig,
    RunStepRequest,
)
from runtime.engine import dashboard_from_env
from runtime.events import (
    BranchStarted,
    DashboardSink,
    Event,
    EventBus,
    MemorySink,
    TurnFinished,
    TurnStarted,
    dump_event,
    parse_event,
)
from runtime.events import dashboard as dashboard_module
from runtime.events.sinks import event_json
from tests.runtime.helpers import until
from tests.runtime.ingest_server import IngestServer, sinks_for

pytestmark = pytest.mark.anyio

WAITS: list[Callable[[], Awaitable[None]]] = []
"""What the Waiter step awaits (set by a test)."""


class Leaf(LogicStep):
    async def run_logic(self) -> Any:
        return self.parallel_invocation().index


class Fan(LogicStep):
    """Optionally saves state ``saves`` times without awaiting, then forks ``n`` leaves."""

    async def run_logic(self) -> Any:
        for i in range(self.get_context("config.saves") or 0):
            self.save_state({"count": i})
        for wait in WAITS:
            await wait()
        batch = await self.run_steps(
            [RunStepRequest(Leaf, key=str(i)) for i in range(self.get_context("config.n"))])
        return f"{len(batch.fulfilled)} done"


class FanFlow(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [Fan(self), Leaf(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=100_000)


@pytest.fixture
def dumps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sink's calls of event_json, by seq."""
    calls: list[int] = []

    def counting(event: Event) -> bytes:
        calls.append(event.seq)
        return event_json(event)

    monkeypatch.setattr(dashboard_module, "event_json", counting)
    return calls


@pytest.fixture
def server() -> Iterator[IngestServer]:
    with IngestServer() as running:
        yield running


@pytest.fixture
def make_sink(server: IngestServer) -> Iterator[Callable[..., DashboardSink]]:
    with sinks_for(server) as make:
        yield make
    WAITS.clear()


async def fan_turn(sink: DashboardSink, n: int = 20, saves: int = 0,
                   memory: MemorySink | None = None) -> tuple[list[Event], str]:
    memory = memory or MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    reply = await engine.run("FanFlow", "go", config={"n": n, "saves": saves})
    assert reply.success, reply.message
    return memory.events, memory.events[0].run_id


def lines_of(events: list[Event]) -> list[str]:
    return [dump_event(e) for e in events]


async def flush(sink: DashboardSink) -> None:
    assert await anyio.to_thread.run_sync(sink.flush, 10.0)


async def test_batches_many_events_into_few_requests_in_emission_order(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=100, batch_seconds=30.0)
    emitted, run_id = await fan_turn(sink, n=150)
    await flush(sink)
    requests = server.of("ingest")
    assert len(emitted) > 200
    assert len(requests) <= math.ceil(len(emitted) / 100) + 1
    assert all(len(r.lines) <= 100 for r in requests)
    sent = [line for r in requests for line in r.lines]
    assert sent == lines_of(emitted)  # each event serialised as dump_event, in order
    assert [dump_event(parse_event(line)) for line in sent] == sent
    assert server.seqs(run_id) == list(range(len(emitted)))
    assert server.status[run_id] == "finished"
    headers = requests[0].headers
    assert headers["Content-Type"] == "application/x-ndjson"
    assert headers["PicoFlow-Origin-Host"] == socket.gethostname()
    assert headers["PicoFlow-Origin-Pid"] == str(os.getpid())


async def test_a_named_source_travels_in_every_request_and_a_bad_one_is_refused(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    plain, named = make_sink(), make_sink(source="LangGraph")
    await fan_turn(plain, n=2)
    await fan_turn(named, n=2)
    await flush(plain)
    await flush(named)
    sources = [r.headers.get("PicoFlow-Origin-Source") for r in server.of("ingest")]
    assert None in sources and "LangGraph" in sources
    assert set(sources) == {None, "LangGraph"}
    for bad in ("", "x" * 41, "Lang\u00e9", "Lang\nGraph", "Lang\x7fGraph"):
        with pytest.raises(ValueError, match="source"):
            DashboardSink(server.url, server.token, source=bad)


async def test_a_request_stays_under_batch_bytes(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        dumps: list[int]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=30.0, batch_bytes=4000)
    emitted, run_id = await fan_turn(sink, n=60)
    await flush(sink)
    requests = server.of("ingest")
    sizes = [sum(len(line) + 1 for line in r.lines) for r in requests]
    big = max(len(line) + 1 for line in lines_of(emitted))
    assert len(requests) > 3
    assert all(size <= 4000 or len(r.lines) == 1 for size, r in zip(sizes, requests,
                                                                    strict=True))
    assert big > 4000  # the fork's line is larger than the budget: it went alone
    assert [line for r in requests for line in r.lines] == lines_of(emitted)
    assert sorted(dumps) == list(range(len(emitted)))
    assert server.seqs(run_id) == list(range(len(emitted)))


async def test_a_few_events_are_sent_once_the_oldest_is_batch_seconds_old(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=0.05, heartbeat_seconds=3600.0)
    emitted, run_id = await fan_turn(sink, n=3)
    # No flush: the age of the batch alone sends it.
    await until(lambda: len(server.seqs(run_id)) >= len(emitted), "the batch to be sent")
    assert len(server.of("ingest")) < len(emitted)  # batched, not one request per event
    assert server.seqs(run_id) == list(range(len(emitted)))


async def test_events_of_several_runs_share_requests(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(engine.run, "FanFlow", "go", None, {"n": 5})
    await flush(sink)
    runs = {e.run_id for e in memory.events}
    assert len(runs) == 3
    assert len(server.of("ingest")) == 1
    for run_id in runs:
        assert server.seqs(run_id) == [e.seq for e in memory.of_run(run_id)]


async def test_resends_the_same_events_after_a_503_and_a_dropped_connection(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        dumps: list[int]) -> None:
    server.script = [503, "drop", 500, "drop"]
    sink = make_sink(batch_events=50)
    emitted, run_id = await fan_turn(sink, n=30)
    await flush(sink)
    requests = server.of("ingest")
    assert [r.status for r in requests[:5]] == [503, -1, 500, -1, 200]
    assert len({tuple(r.lines) for r in requests[:5]}) == 1  # the same batch, five times
    assert server.seqs(run_id) == list(range(len(emitted)))
    assert [dump_event(e) for e in server.stored[run_id]] == lines_of(emitted)
    assert sink.dropped == 0
    assert sorted(dumps) == list(range(len(emitted)))  # serialised once, resent as is


async def test_a_reply_slower_than_the_timeout_is_retried_and_stored_once(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=30.0, timeout=0.2)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    reply = await engine.run("FanFlow", "go", config={"n": 10})  # buffered: one batch
    with server.holding():
        async with anyio.create_task_group() as tg:
            tg.start_soon(flush, sink)
            # The first request timed out; its resend is here.
            await until(lambda: server.held >= 2, "the resend")
            server.release.set()
    assert reply.success
    # The flush ends with the resend's answer; the timed-out request's handler, released at
    # the same moment, may record it only after that.
    await until(lambda: len(server.of("ingest")) >= 2, "both requests to be recorded")
    run_id = memory.events[0].run_id
    requests = server.of("ingest")
    assert len({tuple(r.lines) for r in requests}) == 1
    assert server.seqs(run_id) == list(range(len(memory.events)))  # no duplicates


async def test_a_refused_connection_is_retried_until_the_dashboard_listens(
        make_sink: Callable[..., DashboardSink]) -> None:
    with socket.socket() as probe:  # a port nobody listens on (yet)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sink = DashboardSink(f"http://127.0.0.1:{port}", "secret", batch_seconds=0.01,
                         backoff=0.01, max_backoff=0.05)
    try:
        memory = MemorySink()
        engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
        assert (await engine.run("FanFlow", "go", config={"n": 5})).success
        assert not await anyio.to_thread.run_sync(sink.flush, 0.3)  # refused: still held
        with IngestServer(port=port) as late:
            await flush(sink)
            run_id = memory.events[0].run_id
            assert late.seqs(run_id) == list(range(len(memory.events)))
    finally:
        sink.close(timeout=5)


async def test_429_is_retried_with_backoff_and_retry_after(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    server.script = [(429, {"Retry-After": "0"}), (429, {"Retry-After": "0.01"}), 429]
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)  # one batch, sent by flush
    emitted, run_id = await fan_turn(sink, n=5)
    await flush(sink)
    assert [r.status for r in server.of("ingest")] == [429, 429, 429, 200]
    assert server.seqs(run_id) == list(range(len(emitted)))


async def test_a_bad_token_is_not_retried_and_warned_about_once(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        caplog: pytest.LogCaptureFixture) -> None:
    sink = make_sink(token="wrong", batch_events=20)
    with caplog.at_level(logging.WARNING, logger="picoflow"):
        await fan_turn(sink, n=10)
        await flush(sink)
        await fan_turn(sink, n=10)
        await flush(sink)
    assert [r.status for r in server.of("ingest")] == [401]
    warnings = [r for r in caplog.records if r.name == "picoflow" and "token" in r.message]
    assert len(warnings) == 1
    assert not server.stored
    assert not sink.congested()


async def test_a_gap_is_resent_from_the_expected_seq_when_the_sink_still_has_it(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        dumps: list[int]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    server.script = [("gap", "", 0)]  # filled in below, once the run id is known

    async def gap_first() -> None:
        server.script = [("gap", memory.events[0].run_id, 0)]

    WAITS.append(gap_first)
    reply = await engine.run("FanFlow", "go", config={"n": 5})
    assert reply.success
    await flush(sink)
    run_id = memory.events[0].run_id
    assert [r.status for r in server.of("ingest")] == [409, 200]
    assert server.seqs(run_id) == list(range(len(memory.events)))
    assert sorted(dumps) == list(range(len(memory.events)))  # the resend reused its lines
    assert not [e for e in server.stored[run_id] if e.type == "sink.overflowed"]


async def test_a_gap_the_sink_cannot_fill_is_reported_as_sink_overflowed(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])

    async def server_forgets() -> None:  # the first events reach it, then it loses them
        await flush(sink)
        with server.lock:
            del server.stored[memory.events[0].run_id][3:]

    WAITS.append(server_forgets)
    reply = await engine.run("FanFlow", "go", config={"n": 5})
    assert reply.success
    await flush(sink)
    run_id = memory.events[0].run_id
    stored = server.stored[run_id]
    overflow = [e for e in stored if e.type == "sink.overflowed"]
    assert len(overflow) == 1
    lost = range(overflow[0].first_seq, overflow[0].last_seq + 1)
    assert overflow[0].sink == "dashboard"
    assert lost.start == 3
    assert sorted([e.seq for e in stored] + list(lost)) == list(range(stored[-1].seq + 1))
    assert server.status[run_id] == "finished"
    assert sink.dropped == len(lost)


async def test_a_refused_line_is_dropped_reported_and_the_rest_delivered(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        caplog: pytest.LogCaptureFixture) -> None:
    server.max_line = 1000  # the fork of 30 branches is larger: 413 names its line
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    with caplog.at_level(logging.WARNING, logger="picoflow"):
        emitted, run_id = await fan_turn(sink, n=30)
        await flush(sink)
    (big,) = [e for e in emitted if len(dump_event(e)) > 1000]
    assert big.type == "barrier.forked"
    assert [r.status for r in server.of("ingest")][:2] == [413, 200]
    stored = server.stored[run_id]
    (overflow,) = [e for e in stored if e.type == "sink.overflowed"]
    assert (overflow.first_seq, overflow.last_seq, overflow.dropped) == (big.seq, big.seq, 1)
    assert [e.seq for e in stored] == [e.seq for e in emitted if e is not big] + [
        overflow.seq]
    assert server.status[run_id] == "finished"
    assert any("413" in r.getMessage() for r in caplog.records if r.name == "picoflow")


async def test_text_no_utf8_can_hold_is_shipped_with_a_replacement_character(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    # A lone surrogate (a flow's own string; a model's "\ud800" escape decodes to one) made
    # the serialiser raise: the event was lost, and the sink with it.
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    memory = MemorySink()
    bus = EventBus([sink, memory], session_id="s1")
    bus.emit(TurnStarted, flow="F", message="hi \udfff")
    bus.emit(BranchStarted, "0", barrier="b0", index=0, key="k\ud800", step="Leaf")
    bus.emit(TurnFinished, success=True, completed=True, message="ok", content_type="text")
    await flush(sink)
    assert bus.sinks == [sink, memory]
    assert server.seqs(bus.run_id) == [0, 1, 2]
    started, branch, _ = server.stored[bus.run_id]
    assert (started.message, branch.key) == ("hi \ufffd", "k\ufffd")
    assert server.status[bus.run_id] == "finished"
    assert sink.dropped == 0


async def test_a_run_whose_ids_no_dashboard_takes_is_not_sent_and_others_are(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        caplog: pytest.LogCaptureFixture) -> None:
    # The engine refuses such ids; a bus used directly does not. A dashboard stored such a
    # run, then answered 500 for each batch after the first.
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    buses = [EventBus([sink], run_id="run 1", session_id="s1"),
             EventBus([sink], run_id="run-2", session_id="s\u00e9ance"),
             EventBus([sink], run_id="run-3", session_id="s3")]
    with caplog.at_level(logging.WARNING, logger="picoflow"):
        for bus in buses:
            bus.emit(TurnStarted, flow="F", message="hi")
            bus.emit(BranchStarted, "0", barrier="b0", index=0, key="k", step="Leaf")
            bus.emit(TurnFinished, success=True, completed=True, message="ok",
                     content_type="text/plain")
        await flush(sink)
    sent = [line for r in server.of("ingest") for line in r.lines]
    assert {parse_event(line).run_id for line in sent} == {"run-3"}
    assert server.seqs("run-3") == [0, 1, 2] and server.status["run-3"] == "finished"
    assert [r.status for r in server.of("ingest")] == [200]
    assert sink.dropped == 6
    warned = [r.getMessage() for r in caplog.records if r.name == "picoflow"]
    assert len(warned) == 2
    assert "'run 1'" in warned[0] and "not ' ' (character 4)" in warned[0]
    assert "'run-2'" in warned[1] and "The session id may hold only" in warned[1]


async def test_a_refused_line_of_a_run_with_a_bad_id_is_not_reported_back_and_forth(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    # The run's first event took the fast path (no turn.started): the dashboard refuses its
    # line, and the sink's report of the loss would carry the same id, refused again.
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    bus = EventBus([sink], run_id="a/b", session_id="s1")
    bus.emit(BranchStarted, "0", barrier="b0", index=0, key="k", step="Leaf")
    await flush(sink)
    bus.emit(BranchStarted, "1", barrier="b0", index=1, key="k1", step="Leaf")
    bus.emit(TurnFinished, success=True, completed=True, message="ok",
             content_type="text/plain")
    await flush(sink)
    assert [r.status for r in server.of("ingest")] == [400]
    assert sink.dropped == 3
    assert server.stored == {}


async def test_a_message_too_large_for_a_line_is_cut_in_its_event_and_the_run_arrives(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    # A turn.started over the ingest's line limit was refused; the events after it were then
    # refused one by one (a new run must begin with turn.started): the whole run was lost.
    sink = make_sink(batch_events=10_000, batch_seconds=30.0)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    message = "go " * 700_000  # 2.1 MB; the server takes lines up to 1 MB
    reply = await engine.run("FanFlow", message, config={"n": 3})
    assert reply.success, reply.message
    await flush(sink)
    run_id = memory.events[0].run_id
    assert server.seqs(run_id) == list(range(len(memory.events)))
    started = server.stored[run_id][0]
    assert started.type == "turn.started" and started.message is not None
    assert started.message == message[:64_000] + "… [2,036,000 more characters]"
    assert server.status[run_id] == "finished"
    assert sink.dropped == 0
    doc = await engine.store.load(reply.session_id)
    assert doc is not None and message in [  # the session keeps it whole
        m.content for space in doc.flow.memory.values() for m in space.messages]


async def test_an_interrupted_run_is_dropped_and_not_sent_again(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=5)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])

    async def interrupt() -> None:
        await flush(sink)
        server.interrupted.add(memory.events[0].run_id)

    WAITS.append(interrupt)
    assert (await engine.run("FanFlow", "go", config={"n": 20})).success
    await flush(sink)
    run_id = memory.events[0].run_id
    refused = [r for r in server.of("ingest") if r.status == 409]
    assert len(refused) == 1
    after = server.of("ingest")[server.of("ingest").index(refused[0]) + 1:]
    assert not any(run_id in line for r in after for line in r.lines)
    WAITS.clear()
    assert (await engine.run("FanFlow", "go", config={"n": 3})).success  # others still go
    await flush(sink)
    other = memory.events[-1].run_id
    assert server.seqs(other) == [e.seq for e in memory.of_run(other)]


async def test_heartbeats_keep_a_running_turn_alive_until_it_finishes(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(heartbeat_seconds=0.02)
    memory = MemorySink()

    async def three_heartbeats() -> None:
        run_id = memory.events[0].run_id
        await until(lambda: server.heartbeats_for(run_id) >= 3, "three heartbeats")

    WAITS.append(three_heartbeats)
    emitted, run_id = await fan_turn(sink, n=3, memory=memory)
    await flush(sink)
    with server.lock:
        log = list(server.requests)
    beats = [i for i, r in enumerate(log) if r.kind == "heartbeat"]
    assert len(beats) >= 3
    assert all(log[i].runs == [run_id] for i in beats)
    finished = next(i for i, r in enumerate(log)
                    if any('"turn.finished"' in line for line in r.lines))
    assert max(beats) < finished  # no heartbeat for a run whose end was handled
    assert server.seqs(run_id) == list(range(len(emitted)))


async def test_a_congested_sink_holds_the_run_instead_of_dropping(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=5, max_buffer=10)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    done: list[bool] = []

    async def turn() -> None:
        reply = await engine.run("FanFlow", "go", config={"n": 40})
        done.append(reply.success)

    with server.holding():
        async with anyio.create_task_group() as tg:
            tg.start_soon(turn)
            await until(lambda: bool(server.held and sink.congested()), "the sink to congest")
            def fulfilled() -> int:
                return sum(1 for e in memory.events if e.type == "branch.fulfilled")

            before = fulfilled()
            for _ in range(10):  # the run gets every chance to go on; it must not
                await anyio.sleep(0.01)
            assert (done, fulfilled()) == ([], before)
            assert before < 40
            assert "turn.finished" not in {e.type for e in memory.events}
            server.release.set()
    await flush(sink)
    assert done == [True]
    run_id = memory.events[0].run_id
    assert server.seqs(run_id) == list(range(len(memory.events)))
    assert not [e for e in memory.events if e.type == "sink.overflowed"]
    assert sink.dropped == 0


async def test_a_dashboard_that_is_down_does_not_hold_the_run_past_outage_seconds(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    server.script = [503] * 100_000
    sink = make_sink(batch_events=5, max_buffer=5, hard_cap=10_000, outage_seconds=0.0)
    with anyio.fail_after(30):  # held, it would wait until the dashboard came back
        emitted, run_id = await fan_turn(sink, n=40)
    assert emitted[-1].type == "turn.finished"
    assert not any(r.status == 200 for r in server.of("ingest"))  # down all along
    server.script.clear()  # back up: everything buffered arrives
    await flush(sink)
    assert server.seqs(run_id) == list(range(len(emitted)))
    assert sink.dropped == 0


async def test_past_the_hard_cap_events_are_dropped_and_reported(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=5, max_buffer=5, hard_cap=20)
    memory = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
    with server.holding():
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run, "FanFlow", "go", None, {"n": 3, "saves": 60})
            await until(lambda: bool(sink.dropped), "a dropped event")
            server.release.set()
    await flush(sink)
    run_id = memory.events[0].run_id
    reported = [e for e in memory.events if e.type == "sink.overflowed"]
    assert len(reported) == 1 and reported[0].sink == "dashboard"
    lost = set(range(reported[0].first_seq, reported[0].last_seq + 1))
    stored = server.seqs(run_id)
    assert len(lost) == sink.dropped
    assert sorted([*stored, *lost]) == [e.seq for e in memory.events]
    assert server.status[run_id] == "finished"


async def test_close_sends_what_is_buffered(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(batch_events=10_000, batch_seconds=3600.0)
    emitted, run_id = await fan_turn(sink, n=5)
    assert server.of("ingest") == []
    assert await anyio.to_thread.run_sync(sink.close, 10.0)
    assert server.seqs(run_id) == list(range(len(emitted)))


async def test_the_engine_attaches_a_sink_from_the_environment(
        server: IngestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dashboard_from_env({"PICOFLOW_DASHBOARD_URL": server.url}) is None
    assert dashboard_from_env({"PICOFLOW_DASHBOARD_URL": server.url,
                               "PICOFLOW_DASHBOARD_TOKEN": ""}) is None
    monkeypatch.setenv("PICOFLOW_DASHBOARD_URL", server.url)
    monkeypatch.delenv("PICOFLOW_DASHBOARD_TOKEN", raising=False)
    assert FlowEngine().dashboard is None
    assert FlowEngine().sinks == []
    monkeypatch.setenv("PICOFLOW_DASHBOARD_TOKEN", server.token)
    engine = FlowEngine(flows=[FanFlow])
    assert isinstance(engine.dashboard, DashboardSink)
    assert engine.sinks == [engine.dashboard]
    reply = await engine.run("FanFlow", "go", config={"n": 4})
    await engine.close()  # flushes
    assert reply.success
    (run_id,) = server.stored
    assert [e.type for e in server.stored[run_id]][-1] == "turn.finished"
    assert server.seqs(run_id) == list(range(len(server.stored[run_id])))


# -- what the sink tells the user ------------------------------------------------------------


def _said(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "picoflow" and r.levelno == logging.WARNING and words in r.getMessage()]


def _unreachable_url() -> tuple[socket.socket, str]:
    """A bound port that does not listen (kept bound: nobody else takes it meanwhile)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    return probe, f"http://127.0.0.1:{probe.getsockname()[1]}"


async def test_a_url_without_a_token_is_warned_about_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from runtime import engine as engine_module
    monkeypatch.setattr(engine_module, "_TOKENLESS_URLS", set())
    monkeypatch.setenv("PICOFLOW_DASHBOARD_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("PICOFLOW_DASHBOARD_TOKEN", raising=False)
    with caplog.at_level(logging.WARNING, logger="picoflow"):
        assert FlowEngine().dashboard is None
        assert FlowEngine().dashboard is None
    (said,) = _said(caplog, "PICOFLOW_DASHBOARD_TOKEN is not")
    assert "http://127.0.0.1:9" in said and "--scope ingest" in said


async def test_a_refused_token_says_what_to_do(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        caplog: pytest.LogCaptureFixture) -> None:
    sink = make_sink(token="wrong")
    with caplog.at_level(logging.WARNING, logger="picoflow"):
        await fan_turn(sink, n=3)
        await flush(sink)
        await fan_turn(sink, n=3)
        await flush(sink)
    (said,) = _said(caplog, "refused the token")
    assert "401" in said and "PICOFLOW_DASHBOARD_TOKEN" in said and "--scope ingest" in said


async def test_an_unreachable_dashboard_is_warned_about_once_and_close_gives_up(
        caplog: pytest.LogCaptureFixture) -> None:
    probe, url = _unreachable_url()
    with probe, caplog.at_level(logging.WARNING, logger="picoflow"):
        sink = DashboardSink(url, "secret", batch_seconds=0.01, backoff=0.01,
                             max_backoff=0.02, close_timeout=0.2)
        memory = MemorySink()
        engine = FlowEngine(flows=[FanFlow], sinks=[sink, memory])
        assert (await engine.run("FanFlow", "go", config={"n": 5})).success
        await until(lambda: sink.failures >= 6, "several failed attempts")
        closed = await anyio.to_thread.run_sync(sink.close)
    assert closed is False
    (down,) = _said(caplog, "cannot be reached")
    assert url in down and "PICOFLOW_DASHBOARD_URL" in down
    (gave_up,) = _said(caplog, "gave up closing")
    assert f"after 0.2s: {len(memory.events)} events were not shipped" in gave_up
    assert "PICOFLOW_DASHBOARD_CLOSE_TIMEOUT" in gave_up
    assert not _said(caplog, "dropped events")  # the close warning is the one that counts


async def test_close_gives_up_after_the_timeout_the_environment_sets(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PICOFLOW_DASHBOARD_CLOSE_TIMEOUT", "0.1")
    probe, url = _unreachable_url()
    with probe:
        sink = dashboard_from_env({"PICOFLOW_DASHBOARD_URL": url,
                                   "PICOFLOW_DASHBOARD_TOKEN": "secret",
                                   "PICOFLOW_DASHBOARD_CLOSE_TIMEOUT": "0.1"})
        assert sink is not None and sink.close_timeout == 0.1
        idle = DashboardSink(url, "secret")
        assert idle.close_timeout == 0.1
        assert idle.close()  # nothing buffered: nothing to give up on
        bus = EventBus([sink], run_id="run-1", session_id="session-1")
        bus.emit(TurnStarted, path="", flow="f", message=None)
        with caplog.at_level(logging.WARNING, logger="picoflow"):
            assert sink.close() is False
    (gave_up,) = _said(caplog, "gave up closing")
    assert "after 0.1s: 1 events were not shipped" in gave_up


def test_the_close_timeout_defaults_to_5_seconds_and_refuses_nonsense() -> None:
    assert dashboard_module.close_timeout_from_env({}) == 5.0
    assert dashboard_module.close_timeout_from_env(
        {"PICOFLOW_DASHBOARD_CLOSE_TIMEOUT": " 2.5 "}) == 2.5
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match="PICOFLOW_DASHBOARD_CLOSE_TIMEOUT"):
            dashboard_module.close_timeout_from_env({"PICOFLOW_DASHBOARD_CLOSE_TIMEOUT": bad})


async def test_dropped_events_are_warned_about_once(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        caplog: pytest.LogCaptureFixture) -> None:
    sink = make_sink(batch_events=5, max_buffer=5, hard_cap=20)
    engine = FlowEngine(flows=[FanFlow], sinks=[sink])
    with caplog.at_level(logging.WARNING, logger="picoflow"), server.holding():
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.run, "FanFlow", "go", None, {"n": 3, "saves": 60})
            await until(lambda: sink.dropped > 1, "dropped events")
            server.release.set()
    await flush(sink)
    (said,) = _said(caplog, "dropped events")
    assert "buffer is full" in said and "hard_cap" in said and "sink.overflowed" in said


# -- the transport: redirects, proxies ---------------------------------------------------


async def test_a_redirect_is_not_followed_and_its_batch_is_reported_lost(
        server: IngestServer, make_sink: Callable[..., DashboardSink],
        caplog: pytest.LogCaptureFixture) -> None:
    server.script = [(307, {"Location": server.url + "/api/ingest"})]
    sink = make_sink(batch_events=50)
    with caplog.at_level(logging.WARNING, logger="picoflow"):
        emitted, run_id = await fan_turn(sink, n=30)
        await flush(sink)
    first, *rest = server.of("ingest")
    # Never resent to where the reply points (nor, with the token, anywhere else).
    assert first.status == 307 and all(r.lines != first.lines for r in rest)
    assert sink.dropped == len(first.lines)
    (refused,) = _said(caplog, "refused a batch (307)")
    assert refused
    lost = [e for e in server.stored[run_id] if e.type == "sink.overflowed"]
    assert [(getattr(e, "first_seq", None), getattr(e, "dropped", None)) for e in lost] == \
        [(0, len(first.lines))]
    assert len(emitted) > len(first.lines)


async def test_the_proxy_the_environment_names_is_used_and_no_proxy_is_honoured(
        server: IngestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    probe, dead = _unreachable_url()
    with probe:
        for name in ("http_proxy", "no_proxy", "all_proxy", "ALL_PROXY"):
            monkeypatch.delenv(name, raising=False)
        # Through the proxy (the server plays it): the dashboard's name need not resolve.
        monkeypatch.setenv("HTTP_PROXY", server.url)
        monkeypatch.setenv("NO_PROXY", "localhost")
        proxied = DashboardSink("http://dashboard.invalid", server.token, batch_seconds=0.01)
        # A host NO_PROXY names is reached directly, past a proxy that does not answer.
        monkeypatch.setenv("HTTP_PROXY", dead)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        direct = DashboardSink(server.url, server.token, batch_seconds=0.01)
        try:
            for sink in (proxied, direct):
                _, run_id = await fan_turn(sink, n=3)
                await flush(sink)
                assert server.seqs(run_id)
        finally:
            proxied.close(timeout=5)
            direct.close(timeout=5)
