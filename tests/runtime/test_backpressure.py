"""Back-pressure: a sink that says it is congested holds the run at its next await point
(a branch start, a model call) instead of having events dropped; sinks without
``congested()`` never hold anything."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import Rule, Step
from runtime.events import Event, EventBus, MemorySink
from tests.runtime.helpers import ScriptedFlow, make_engine

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
        with anyio.fail_after(20):
            while valve.asked < 3:  # the run is polling the congested sink
                await anyio.sleep(0.01)
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

        def handle(self, event: Event) -> None:
            seen.append(event)

    reply = await engine.run("AskFlow", "hi", sinks=[Plain()])
    assert reply.message == "fine"
    assert seen[-1].type == "turn.finished"
