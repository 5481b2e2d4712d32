"""Two turns race on one session: the loser saves nothing.

Two engines share one store, as two worker processes share a database (each engine's
per-session lock is its own, so nothing serialises their turns). Turn A is held inside its
step by a gate while turn B runs from start to end; released, A's save finds B's revision
and A fails with ``session_conflict``. The session's history is B's saves only: none of
A's, no revision A wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    MemorySessionStore,
    ModelSelection,
    RunReply,
    SessionStore,
    SQLiteSessionStore,
    Step,
)
from runtime.events import MemorySink, SessionLoaded, SessionSaved

pytestmark = pytest.mark.anyio

GATES: dict[str, tuple[anyio.Event, anyio.Event]] = {}
"""By message: set when that turn is inside its step, and the one it waits for there."""


class Held(LogicStep):
    """Answers the message; a message with a gate waits at it first."""

    async def run_logic(self) -> str:
        message = self.get_last_message().content
        gate = GATES.get(message)
        if gate is not None:
            entered, release = gate
            entered.set()
            await release.wait()
        return f"done {message}"


class HeldFlow(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Held(self)]


async def race(store: SessionStore) -> None:
    """The race on ``store``; fails the test unless the loser saved nothing."""
    first = await FlowEngine(flows=[HeldFlow], store=store).run("HeldFlow", "first", "s")
    assert first.success, first.message
    stored = await store.load("s")
    assert stored is not None
    start = stored.revision
    GATES.clear()
    GATES["A"] = (anyio.Event(), anyio.Event())
    seen = {name: MemorySink() for name in "AB"}
    engines = {name: FlowEngine(flows=[HeldFlow], store=store, sinks=[seen[name]])
               for name in "AB"}
    replies: dict[str, RunReply] = {}

    async def turn(name: str) -> None:
        replies[name] = await engines[name].run("HeldFlow", name, "s", run_id=name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "A")
        await GATES["A"][0].wait()  # A is in its step, its session loaded
        await turn("B")
        GATES["A"][1].set()

    assert replies["B"].success, replies["B"].message
    assert (replies["A"].success, replies["A"].error_code) == (False, "session_conflict")
    saves = {name: [e for e in sink.events if isinstance(e, SessionSaved)]
             for name, sink in seen.items()}
    assert saves["A"] == [], [(e.reason, e.revision) for e in saves["A"]]
    # B's saves continue the revision both turns loaded, one after another, and are all
    # the session holds.
    loaded = [e.revision for e in seen["B"].events if isinstance(e, SessionLoaded)]
    assert loaded == [start]
    revisions = [e.revision for e in saves["B"]]
    assert revisions == list(range(start + 1, start + 1 + len(revisions))) and revisions
    after = await store.load("s")
    assert after is not None and after.revision == revisions[-1]


StoreFactory = Callable[[Path], SessionStore]
STORES: dict[str, StoreFactory] = {
    "memory": lambda _: MemorySessionStore(),
    "sqlite": lambda folder: SQLiteSessionStore(folder / "sessions.db"),
}


@pytest.mark.parametrize("kind", list(STORES))
async def test_the_turn_that_loses_the_session_race_saves_nothing(
        kind: str, tmp_path: Path) -> None:
    store: Any = STORES[kind](tmp_path)
    try:
        await race(store)
    finally:
        await store.close()
