"""Back-pressure: a sink that says it is congested holds the run at its next await point
(a branch start, a model call) instead of having events dropped; sinks without
``congested()`` never hold anything."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import ParallelConfig, Rule, RunStepRequest, Step
from runtime.events import Event, EventBus, MemorySink
from runtime.pressure import CongestionGate
from tests.runtime.barrier_helpers import (
    BarrierFlowSpec,
    branch_step,
    make_barrier_flow,
    returning,
)
from tests.runtime.helpers import ScriptedFlow, make_engine, until

pytestmark = pytest.mark.anyio


class ValveSink(MemorySink):
    """Keeps events; congested while ``closed``; counts how often it was asked."""

    name = "valve"

    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.asked = 0

    def congested(self) -> bool:
        self.asked += 1
        return self.closed


class Ask(Step):
    def get_prompt(self) -> str:
        return "Answer."


class AskFlow(ScriptedFlow):
    def define_steps(self) -> list[Any]:
        return [Ask(self)]


def test_the_bus_collects_only_the_sinks_that_can_be_congested() -> None:
    valve, plain = ValveSink(), MemorySink()
    assert EventBus([plain]).pressure == ()
    bus = EventBus([plain, valve])
    assert bus.congested() is False
    valve.closed = True
    assert bus.congested() is True


async def test_a_congested_sink_holds_the_model_call_until_it_drains() -> None:
    engine, _ = make_engine(AskFlow, rules=[Rule(step="Ask", text="fine")])
    valve = ValveSink()
    valve.closed = True
    replies: list[str] = []

    async def turn() -> None:
        replies.append((await engine.run("AskFlow", "hi", sinks=[valve])).message)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        await until(lambda: valve.asked >= 3, "the run to poll the congested sink")
        types = [e.type for e in valve.events]
        assert "model.started" not in types and replies == []
        valve.closed = False
    assert replies == ["fine"]
    types = [e.type for e in valve.events]
    assert types.index("model.started") < types.index("turn.finished")


async def test_a_sink_without_congested_still_gets_every_event() -> None:
    engine, _ = make_engine(AskFlow, rules=[Rule(step="Ask", text="fine")])
    seen: list[Event] = []

    class Plain:
        name = "plain"

        def receive(self, event: Event) -> None:
            seen.append(event)

    reply = await engine.run("AskFlow", "hi", sinks=[Plain()])
    assert reply.message == "fine"
    assert seen[-1].type == "turn.finished"


class BacklogSink(MemorySink):
    """Congested while more than ``limit`` events wait; a drainer empties it now and then.
    Counts how often the run asked."""

    name = "backlog"

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.waiting = 0
        self.asked = 0

    def receive(self, event: Event) -> None:
        super().receive(event)
        self.waiting += 1

    def congested(self) -> bool:
        self.asked += 1
        return self.waiting > self.limit


async def test_branches_held_by_a_congested_sink_are_woken_once_each_not_once_per_drain(
        ) -> None:
    # A wide fan-out against a slow store: every drain lets only a few branches refill the
    # backlog. Waking every waiting branch on each drain made each of them look at the sink
    # again every time (quadratic in the width: a 40,000-branch run took minutes).
    width = 600

    async def fan_out(step: Step) -> Any:
        return await step.run_steps([RunStepRequest(Leaf, key=str(i)) for i in range(width)])

    Leaf = branch_step("Leaf", returning("ok"))
    spec = BarrierFlowSpec(fan_out, [Leaf], ParallelConfig(max_invocations=width))
    engine, _ = make_engine(make_barrier_flow(spec))
    sink = BacklogSink(limit=50)
    sink.waiting = sink.limit + 1  # congested from the start: every branch queues
    replies: list[Any] = []

    async def turn() -> None:
        replies.append(await engine.run("BarrierFlow", "go", sinks=[sink]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        while not replies:
            await anyio.sleep(0.02)
            sink.waiting = 0  # the store caught up

    assert replies[0].success and spec.captured.error is None, spec.captured.error
    started = [e for e in sink.events if e.type == "branch.started"]
    assert len(started) == width, sorted({e.type for e in sink.events})
    # Each branch asks at its start at most once more than the poller does per drain.
    assert sink.asked < 3 * width, sink.asked


async def test_branches_waiting_behind_a_cancelled_poller_go_on() -> None:
    gate = CongestionGate(lambda: True)  # never drains
    through: list[str] = []

    async def branch(name: str) -> None:
        await gate.wait()
        through.append(name)

    scopes: list[anyio.CancelScope] = []

    async def poller() -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await branch("poller")

    async with anyio.create_task_group() as tg:
        tg.start_soon(poller)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(branch, "waiter")
        await anyio.wait_all_tasks_blocked()
        assert gate.waiting == 1 and through == []
        scopes[0].cancel()
    # Nobody is left to poll for the waiter, so it goes on rather than wait for ever.
    assert through == ["waiter"]
