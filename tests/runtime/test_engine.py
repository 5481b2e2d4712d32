"""The engine: failure replies, sessions, revisions, the per-session lock, state and context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import (
    FlowEngine,
    MemorySessionStore,
    Message,
    Rule,
    SessionDocument,
    SessionStoreError,
    SQLiteSessionStore,
    Step,
    TerminateSessionStep,
    tool,
)
from tests.runtime.helpers import (
    GateModel,
    ScriptedFlow,
    last_texts,
    load,
    make_engine,
    memory,
    until,
)

pytestmark = pytest.mark.anyio


class Chat(Step):
    def get_prompt(self) -> str | None:
        return f"Speak {self.get_context('config.lang') or 'plainly'}."

    @tool
    def finish(self) -> type[Step]:
        """End the conversation."""
        return TerminateSessionStep


class ChatFlow(ScriptedFlow):
    def define_steps(self) -> list[Step | type[Step]]:
        return [Chat, TerminateSessionStep(self).use_memory("temp")]


class OtherFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Chat]


def echo() -> list[Rule]:
    return [
        Rule(last="^bye$", tools=[("finish", {})]),
        Rule(step="TerminateSessionStep", text="Goodbye."),
        Rule(respond=lambda r: f"echo {r.last_message.content if r.last_message else ''}"),
    ]


# -- failure replies -------------------------------------------------------------------------


async def test_an_unknown_flow_fails_with_a_clear_message() -> None:
    engine, _ = make_engine(ChatFlow)
    reply = await engine.run("Nope", "hi")
    assert (reply.success, reply.completed) == (False, True)
    assert reply.message == "Flow 'Nope' is not registered."
    assert reply.error_code == "flow_not_registered"
    assert (reply.session_id, reply.content_type) == ("", "text/plain")


async def test_an_unregistered_model_provider_fails_before_any_session_exists() -> None:
    engine = FlowEngine(flows=[ChatFlow])
    reply = await engine.run("ChatFlow", "hi")
    assert reply.error_code == "flow_definition"
    assert reply.message == "Model provider 'scripted' is not registered (known: none)."


async def test_a_session_of_another_flow_fails_and_stays_untouched() -> None:
    engine, _ = make_engine(ChatFlow, OtherFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi")
    before = await load(engine, first.session_id)
    reply = await engine.run("OtherFlow", "hi", first.session_id)
    assert reply.success is False
    assert reply.error_code == "session_flow_mismatch"
    assert reply.message == (
        f"Session '{first.session_id}' belongs to flow 'ChatFlow', not 'OtherFlow'."
    )
    assert reply.session_id == first.session_id
    assert await load(engine, first.session_id) == before


async def test_a_stored_document_without_cursor_fails_as_an_invariant_error() -> None:
    engine, _ = make_engine(ChatFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi")
    doc = await load(engine, first.session_id)
    doc.flow.current_step = None
    await engine.store.save(doc, doc.revision)
    reply = await engine.run("ChatFlow", "again", first.session_id)
    assert reply.error_code == "session_flow_invariant"
    assert (await load(engine, first.session_id)).revision == doc.revision + 1


class AbortRefusingStore(MemorySessionStore):
    """Fails to save documents marked aborted."""

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        if doc.run_status == "aborted":
            raise SessionStoreError("disk on fire")
        return await super().save(doc, expected_revision)


async def test_a_failed_abort_save_is_reported_after_the_original_error() -> None:
    engine, _ = make_engine(ChatFlow, rules=[Rule(last="^hi$", text="x")],
                            store=AbortRefusingStore())
    first = await engine.run("ChatFlow", "hi")
    reply = await engine.run("ChatFlow", "unscripted", first.session_id)
    assert reply.success is False
    assert reply.error_code == "scripted_model_unmatched"
    assert reply.message.startswith("No scripted rule matches the request of flow 'ChatFlow'")
    assert reply.message.endswith("; failed to persist aborted session: disk on fire")
    assert (await load(engine, first.session_id)).run_status == "running"


class BrokenEntry(Step):
    async def on_enter(self) -> None:
        raise ValueError("enter broke")


class BrokenEntryFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [BrokenEntry]


async def test_a_plain_exception_while_starting_a_session_is_a_failure_reply() -> None:
    engine, model = make_engine(BrokenEntryFlow, rules=echo())
    reply = await engine.run("BrokenEntryFlow", "hi")
    assert (reply.success, reply.error_code) == (False, "internal")
    assert "enter broke" in reply.message
    assert model.requests == []
    doc = await load(engine, reply.session_id)
    assert doc.run_status == "aborted"
    assert doc.error[-1].message == "enter broke"


async def test_an_empty_session_id_starts_a_session_with_a_generated_id() -> None:
    engine, _ = make_engine(ChatFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi", "")
    second = await engine.run("ChatFlow", "hi", "")
    assert (first.success, second.success) == (True, True), second.message
    assert first.session_id != ""
    assert second.session_id not in ("", first.session_id)


# -- revisions and the per-session lock -----------------------------------------------------


async def test_a_concurrent_write_during_a_turn_fails_it_with_session_conflict() -> None:
    gate = GateModel()
    engine, _ = make_engine(ChatFlow, model=gate)
    replies: list[Any] = []

    async def turn() -> None:
        replies.append(await engine.run("ChatFlow", "hi", "s-1"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        await gate.entered.wait()
        intruder = await load(engine, "s-1")
        intruder.flow.context["intruder"] = True
        assert await engine.store.save(intruder, intruder.revision) == intruder.revision + 1
        gate.release.set()

    reply = replies[0]
    assert reply.success is False
    assert reply.error_code == "session_conflict"
    assert reply.message == "Session 's-1' was changed or removed by another request."
    stored = await load(engine, "s-1")
    assert stored.revision == intruder.revision + 1
    assert stored.flow.context == {"intruder": True}
    assert stored.run_status == "running"
    assert all(m.type != "ai" for m in memory(stored, "Chat"))


async def test_a_session_deleted_during_a_turn_is_not_resurrected() -> None:
    gate = GateModel()
    engine, _ = make_engine(ChatFlow, model=gate)
    replies: list[Any] = []

    async def turn() -> None:
        replies.append(await engine.run("ChatFlow", "hi", "s-2"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        await gate.entered.wait()
        assert await engine.store.delete("s-2") is True
        gate.release.set()

    assert replies[0].error_code == "session_conflict"
    assert await engine.store.load("s-2") is None


async def test_turns_of_one_session_run_one_after_the_other_in_arrival_order() -> None:
    gate = GateModel()
    engine, _ = make_engine(ChatFlow, model=gate)
    replies: dict[str, Any] = {}

    async def turn(text: str) -> None:
        replies[text] = await engine.run("ChatFlow", text, "shared")

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "m1")
        await gate.entered.wait()
        for text in ("m2", "m3"):
            tg.start_soon(turn, text)
            await anyio.wait_all_tasks_blocked()
        assert len(gate.requests) == 1
        gate.release.set()

    assert all(r.success for r in replies.values()), replies
    assert last_texts(gate.requests) == ["m1", "m2", "m3"]
    third = [m.content for m in gate.requests[2].messages if m.type in ("human", "ai")]
    assert third == [
        "Start", "m1", "gated answer: m1", "m2", "gated answer: m2", "m3",
    ]
    doc = await load(engine, "shared")
    # create 0, after on_start 1, end of turn 2; each restored turn: its end save
    assert doc.revision == 4
    assert engine._locks == {}


async def test_a_turn_cancelled_while_waiting_for_the_lock_gives_its_place_back() -> None:
    gate = GateModel()
    engine, _ = make_engine(ChatFlow, model=gate)
    replies: list[Any] = []

    async def turn(text: str) -> None:
        replies.append(await engine.run("ChatFlow", text, "locked"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "m1")
        await gate.entered.wait()
        with anyio.move_on_after(0.05):
            await engine.run("ChatFlow", "cancelled", "locked")
        gate.release.set()

    assert [r.success for r in replies] == [True]
    assert engine._locks == {}
    again = await engine.run("ChatFlow", "m2", "locked")
    assert again.success, again.message
    assert last_texts(gate.requests) == ["m1", "m2"]


async def test_turns_of_different_sessions_run_concurrently() -> None:
    gate = GateModel()
    engine, _ = make_engine(ChatFlow, model=gate)

    async with anyio.create_task_group() as tg:
        for sid in ("a", "b"):
            tg.start_soon(engine.run, "ChatFlow", "hi", sid)
        await until(lambda: len(gate.requests) >= 2, "both turns to reach the model")
        gate.release.set()


# -- session lifecycle -----------------------------------------------------------------------


async def test_a_caller_chosen_id_names_a_new_session() -> None:
    engine, _ = make_engine(ChatFlow, rules=echo())
    reply = await engine.run("ChatFlow", "hi", "my-id")
    assert (reply.success, reply.session_id) == (True, "my-id")
    again = await engine.run("ChatFlow", "more", "my-id")
    assert (again.session_id, again.message) == ("my-id", "echo more")


async def test_a_completed_session_gets_a_new_session_on_the_next_message() -> None:
    engine, _ = make_engine(ChatFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi")
    closing = await engine.run("ChatFlow", "bye", first.session_id)
    assert (closing.message, closing.completed) == ("Goodbye.", True)
    assert (await load(engine, first.session_id)).run_status == "completed"
    fresh = await engine.run("ChatFlow", "hello", first.session_id)
    assert fresh.success, fresh.message
    assert fresh.session_id != first.session_id
    assert fresh.completed is False


class ResettingFlow(ChatFlow):
    async def on_restore_session_doc(self, doc: SessionDocument) -> SessionDocument | None:
        return None


async def test_on_restore_session_doc_returning_none_starts_a_new_session() -> None:
    engine, _ = make_engine(ResettingFlow, rules=echo())
    first = await engine.run("ResettingFlow", "hi")
    second = await engine.run("ResettingFlow", "hi", first.session_id)
    assert second.success
    assert second.session_id != first.session_id
    assert (await load(engine, first.session_id)).revision == 2


async def test_a_document_of_an_old_version_starts_a_new_session_by_default() -> None:
    engine, _ = make_engine(ChatFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi")
    doc = await load(engine, first.session_id)
    doc.version = "1.0"
    await engine.store.save(doc, doc.revision)
    second = await engine.run("ChatFlow", "hi", first.session_id)
    assert second.session_id != first.session_id


class MigratingFlow(ChatFlow):
    async def on_restore_session_doc(self, doc: SessionDocument) -> SessionDocument | None:
        doc.flow.context["migrated"] = True
        return doc


async def test_a_restored_document_is_saved_with_the_turns_own_save() -> None:
    engine, _ = make_engine(MigratingFlow, rules=echo())
    first = await engine.run("MigratingFlow", "hi")
    second = await engine.run("MigratingFlow", "again", first.session_id)
    assert second.session_id == first.session_id
    doc = await load(engine, first.session_id)
    assert doc.flow.context["migrated"] is True
    assert doc.revision == 3  # restoring saves nothing: the final save wrote the migration


async def test_config_becomes_context_on_the_first_turn_and_is_ignored_later() -> None:
    engine, model = make_engine(ChatFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi", config={"lang": "English", "n": [1]})
    second = await engine.run("ChatFlow", "hi", first.session_id, config={"lang": "French"})
    assert [r.system_prompt for r in model.requests] == ["Speak English.", "Speak English."]
    doc = await load(engine, second.session_id)
    assert doc.flow.context == {"config": {"lang": "English", "n": [1]}}


async def test_delete_session_removes_the_document() -> None:
    engine, _ = make_engine(ChatFlow, rules=echo())
    first = await engine.run("ChatFlow", "hi", "doomed")
    assert await engine.delete_session("doomed") is True
    assert await engine.store.load("doomed") is None
    assert await engine.delete_session("doomed") is False
    again = await engine.run("ChatFlow", "hi", "doomed")
    assert (again.session_id, again.message) == ("doomed", "echo hi")
    assert first.success


hooks: list[str] = []


class Hooks(Step):
    async def on_start(self) -> Message | None:
        hooks.append("start")
        return await super().on_start()

    async def on_restore(self) -> None:
        hooks.append("restore")


class HooksFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Hooks, Chat]


async def test_on_start_runs_for_new_sessions_and_on_restore_for_restored_ones() -> None:
    hooks.clear()
    engine, _ = make_engine(HooksFlow, rules=echo())
    first = await engine.run("HooksFlow", "one")
    await engine.run("HooksFlow", "two", first.session_id)
    await engine.run("HooksFlow", "three")
    assert hooks == ["start", "restore", "start"]


async def test_a_session_survives_an_engine_restart_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite"
    engine, _ = make_engine(ChatFlow, rules=echo(), store=SQLiteSessionStore(path))
    first = await engine.run("ChatFlow", "one", config={"lang": "Dutch"})
    await engine.close()

    restarted, model = make_engine(ChatFlow, rules=echo(), store=SQLiteSessionStore(path))
    try:
        second = await restarted.run("ChatFlow", "two", first.session_id)
        assert (second.session_id, second.message) == (first.session_id, "echo two")
        assert model.requests[0].system_prompt == "Speak Dutch."
        assert [m.content for m in model.requests[0].messages if m.type == "ai"] == ["echo one"]
        assert (await load(restarted, first.session_id)).revision == 3
    finally:
        await restarted.close()
