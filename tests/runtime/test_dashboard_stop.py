"""A dashboard's Stop reaches a turn shipped by DashboardSink: in an ingest or heartbeat
answer, or on the control long-poll; the engine cancels the turn as a local Stop does.

Against the real local HTTP server of ``tests/runtime/ingest_server.py``; every step that
decides an order waits for what the server saw (gates), never for time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

from runtime import Flow, FlowEngine, LogicStep, ModelSelection
from runtime.current import turn_of
from runtime.events import DashboardSink, MemorySink, TurnCancelled
from tests.runtime.helpers import until
from tests.runtime.ingest_server import IngestServer, sinks_for

pytestmark = pytest.mark.anyio

BEFORE_WAITING: list[Callable[[str], Awaitable[None]]] = []
"""What the step awaits (with its run id) before it waits for its turn's token."""


class AwaitsStop(LogicStep):
    """Waits until its turn is stopped, as code that obeys its token does."""

    async def run_logic(self) -> Any:
        turn = turn_of(self.flow)
        token = turn.turn_cancel
        assert token is not None, "a turn shipped to a dashboard can be stopped from it"
        for hook in BEFORE_WAITING:
            await hook(turn.bus.run_id)
        await token.wait()
        return "stopped"


class StopFlow(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [AwaitsStop(self)]


@pytest.fixture
def server() -> Iterator[IngestServer]:
    with IngestServer() as running:
        yield running


@pytest.fixture
def make_sink(server: IngestServer) -> Iterator[Callable[..., DashboardSink]]:
    with sinks_for(server) as make:
        yield make
    BEFORE_WAITING.clear()


async def flush(sink: DashboardSink) -> None:
    assert await anyio.to_thread.run_sync(sink.flush, 10.0)


async def stopped_turn(sink: DashboardSink) -> tuple[Any, MemorySink]:
    memory = MemorySink()
    engine = FlowEngine(flows=[StopFlow], sinks=[sink, memory])
    reply = await engine.run("StopFlow", "go")
    await flush(sink)
    return reply, memory


def assert_stopped_by(reply: Any, memory: MemorySink, server: IngestServer, by: str) -> None:
    assert (reply.success, reply.error_code) == (False, "turn_cancelled")
    assert reply.message == f"Stopped: stopped from the dashboard by {by}"
    last = memory.events[-1]
    assert isinstance(last, TurnCancelled)
    assert (last.requested_by, last.reason) == (by, f"stopped from the dashboard by {by}")
    run_id = last.run_id
    assert server.seqs(run_id) == [e.seq for e in memory.events]  # the end was shipped too
    assert server.status[run_id] == "cancelled"


async def test_a_stop_in_an_ingest_answer_cancels_the_turn_and_names_who_asked(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(control_seconds=0)

    async def ask(run_id: str) -> None:
        server.request_stop(run_id, "alice")
        await flush(sink)  # the answer to this batch carries the request

    BEFORE_WAITING.append(ask)
    reply, memory = await stopped_turn(sink)
    assert_stopped_by(reply, memory, server, "alice")
    assert server.of("control") == []  # no long-poll was asked for
    assert sink._stop_hooks == {}  # the engine unhooked the ended turn


async def test_a_stop_in_a_heartbeat_answer_cancels_the_turn(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(control_seconds=0, heartbeat_seconds=0.02)

    async def ask(run_id: str) -> None:
        await flush(sink)  # every event so far answered: only heartbeats go out now
        server.request_stop(run_id, "bob")

    BEFORE_WAITING.append(ask)
    reply, memory = await stopped_turn(sink)
    assert_stopped_by(reply, memory, server, "bob")
    beats = [r for r in server.of("heartbeat") if memory.events[0].run_id in r.runs]
    assert beats, "the request came with a heartbeat's answer"


async def test_a_stop_heard_on_the_control_long_poll_cancels_the_turn_at_once(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(control_seconds=30)

    async def ask(run_id: str) -> None:
        await flush(sink)  # every event so far answered: no batch can carry the request
        await until(lambda: server.polls_for(run_id) == 1, "the sink's long-poll")
        server.request_stop(run_id, "carol")

    BEFORE_WAITING.append(ask)
    reply, memory = await stopped_turn(sink)
    assert_stopped_by(reply, memory, server, "carol")
    run_id = memory.events[0].run_id
    polls = [r for r in server.of("control") if run_id in r.runs]
    assert [r.status for r in polls][:1] == [200]
    # No batch answered between the request and the turn's end: the long-poll carried it.
    answered = [r for r in server.of("ingest") if any(run_id in line for line in r.lines)]
    assert any('"turn.cancelled"' in line for line in answered[-1].lines)
    assert server.of("heartbeat") == []


async def test_a_dashboard_without_the_long_poll_is_asked_once_and_stops_still_arrive(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    server.control = False
    # The request comes with the next answer: to the flush's batch, or (when the turn's
    # events were all shipped before it was made, as on a busy machine) to a heartbeat.
    sink = make_sink(heartbeat_seconds=0.02)

    async def ask(run_id: str) -> None:
        await until(lambda: len(server.of("control")) == 1, "the one long-poll")
        server.request_stop(run_id, "dave")
        await flush(sink)

    BEFORE_WAITING.append(ask)
    reply, memory = await stopped_turn(sink)
    assert_stopped_by(reply, memory, server, "dave")
    BEFORE_WAITING.clear()
    BEFORE_WAITING.append(ask)
    reply, memory = await stopped_turn(sink)  # a second turn: no second long-poll
    assert_stopped_by(reply, memory, server, "dave")
    assert [r.status for r in server.of("control")] == [404]


async def test_a_turn_that_is_not_asked_finishes_with_its_hook_removed(
        server: IngestServer, make_sink: Callable[..., DashboardSink]) -> None:
    sink = make_sink(control_seconds=0)
    memory = MemorySink()

    class Quick(LogicStep):
        async def run_logic(self) -> Any:
            return "done"

    class QuickFlow(StopFlow):
        def define_steps(self) -> list[Any]:
            return [Quick(self)]

    engine = FlowEngine(flows=[QuickFlow], sinks=[sink, memory])
    reply = await engine.run("QuickFlow", "go")
    assert reply.success, reply.message
    await flush(sink)
    assert sink._stop_hooks == {}
    # A request that comes after the turn ended finds no hook: nothing is called.
    sink._heard_stops({memory.events[0].run_id: {"status": "running", "last_seq": 1,
                                                 "stop": {"by": "eve", "reason": "late"}}})
