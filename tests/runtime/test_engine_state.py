"""Step state, transient state, memory namespaces and context, through engine turns."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from runtime import FlowDefinitionError, LogicStep, Routable, Rule, StateValueError, Step, go, tool
from runtime.current import turn_of
from runtime.jsonutil import json_copy
from tests.runtime.helpers import ScriptedFlow, load, make_engine

pytestmark = pytest.mark.anyio


class Chat(Step):
    def get_prompt(self) -> str | None:
        return f"Speak {self.get_context('config.lang') or 'plainly'}."


class ChatFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Chat]


class Stateful(LogicStep):
    async def run_logic(self) -> Routable:
        text = self.get_last_message().content
        if text == "write":
            self.save_state({"a": {"x": 1, "y": 2}, "b": {"k": 1}})
            self.save_state({"a": {"z": 3}, "b": {"m": 2}})
            stamp = self.get_state("_saveOn")
            self.save_state({})
            assert self.get_state("_saveOn") == stamp
            self.save_transient_state({"scratch": {"n": 1}})
            self.save_transient_state({"scratch": {"o": 2}})
            return f"transient={self.get_transient_state('scratch')}"
        if text == "date":
            self.save_state({"when": date(2030, 1, 1)})
        if text == "surrogate":  # bytes decoded with surrogateescape, say
            self.save_state({"note": {"name": b"caf\xe9".decode("utf-8", "surrogateescape")}})
        if text == "surrogate text":
            self.save_state({"note": "\udfff"})
        if text.startswith("deep "):
            value: Any = "x"
            for _ in range(int(text.split()[1])):
                value = [value]
            self.save_state({"deep": value})
        return f"transient={self.get_transient_state()} b.m={self.get_state('b.m')}"


class StateFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Stateful]


async def test_save_state_replaces_the_first_key_and_deep_merges_the_rest() -> None:
    engine, _ = make_engine(StateFlow)
    reply = await engine.run("StateFlow", "write")
    assert reply.success, reply.message
    state = (await load(engine, reply.session_id)).step_record("Stateful").state
    assert state["a"] == {"z": 3}
    assert state["b"] == {"k": 1, "m": 2}
    assert isinstance(state["_saveOn"], str) and state["_saveOn"].endswith("Z")


async def test_transient_state_lives_for_one_turn_only() -> None:
    engine, _ = make_engine(StateFlow)
    first = await engine.run("StateFlow", "write")
    assert first.message == "transient={'n': 1, 'o': 2}"
    doc = await load(engine, first.session_id)
    assert "_transient" not in doc.step_record("Stateful").state
    second = await engine.run("StateFlow", "read", first.session_id)
    assert second.message == "transient={} b.m=2"


async def test_a_lone_surrogate_in_state_fails_the_turn_with_state_value() -> None:
    # It used to fail only when the session was saved, as an internal serialiser error.
    engine, _ = make_engine(StateFlow)
    reply = await engine.run("StateFlow", "surrogate")
    assert (reply.success, reply.error_code) == (False, "state_value")
    assert reply.message == (
        "State of step 'Stateful' must be plain JSON: text with a lone surrogate "
        "(U+DCE9 after 'note\": {\"name\": \"caf'), which no UTF-8 store can hold.")
    reply = await engine.run("StateFlow", "surrogate text")
    assert (reply.success, reply.error_code) == (False, "state_value")
    assert "(U+DFFF after '{\"note\": \"')" in reply.message
    with pytest.raises(StateValueError, match=r"^x must be plain JSON: .*U\+D800 after 'ok'"):
        json_copy("ok\ud800", "x")  # a plain string: the path without json.dumps
    assert json_copy("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"  # a pair is fine


@pytest.mark.parametrize("depth", [300, 5000])
async def test_a_value_nested_too_deeply_fails_the_turn_with_state_value(depth: int) -> None:
    # Both used to fail as internal errors: 300 levels at the session's save (pydantic's
    # serialiser stops near 255), 5000 with a RecursionError.
    engine, _ = make_engine(StateFlow)
    reply = await engine.run("StateFlow", f"deep {depth}")
    assert (reply.success, reply.error_code) == (False, "state_value")
    assert reply.message == (
        "State of step 'Stateful' must be plain JSON: nested deeper than 128 levels.")
    fine = await engine.run("StateFlow", "deep 120")
    assert fine.success, fine.message


async def test_a_non_json_state_value_fails_the_turn_with_state_value() -> None:
    engine, _ = make_engine(StateFlow)
    reply = await engine.run("StateFlow", "date")
    assert reply.success is False
    assert reply.error_code == "state_value"
    assert reply.message.startswith("State of step 'Stateful' must be plain JSON: ")
    doc = await load(engine, reply.session_id)
    assert doc.run_status == "aborted"
    assert doc.error[-1].model_extra == {"error_type": "StateValueError"}


def test_save_state_rejects_non_json_values_directly() -> None:
    flow = StateFlow()
    turn_of(flow).collect_steps()
    turn_of(flow).new_document()
    step = flow.require_step(Stateful)
    with pytest.raises(StateValueError):
        step.save_state({"bad": {1, 2}})
    with pytest.raises(StateValueError):
        step.save_state({"nan": float("nan")})
    assert step.get_state() == {}


@pytest.mark.parametrize("namespace", ["1bad", "", "has space", "constructor", "a" * 129])
def test_invalid_memory_namespaces_are_definition_errors(namespace: str) -> None:
    step = Stateful(StateFlow())
    with pytest.raises(FlowDefinitionError, match="Invalid memory namespace"):
        step.use_memory(namespace)


def test_valid_memory_namespaces_are_accepted() -> None:
    step = Stateful(StateFlow())
    assert step.use_memory("a" * 128).get_memory_space() == "a" * 128
    assert step.use_memory("Shared_ns-2").get_memory_space() == "Shared_ns-2"


class BadNamespaceFlow(ScriptedFlow):
    def define_steps(self) -> list[Step]:
        return [Stateful(self).use_memory("1bad")]


async def test_an_invalid_namespace_in_define_steps_fails_the_turn() -> None:
    engine, _ = make_engine(BadNamespaceFlow)
    reply = await engine.run("BadNamespaceFlow", "hi")
    assert reply.success is False
    assert reply.error_code == "flow_definition"
    assert reply.message.startswith("Invalid memory namespace '1bad'")


class Writer(Step):
    @tool
    def hand_over(self) -> Any:
        """Hand over to Reader, which shares this namespace."""
        return go(Reader)


class Reader(Step):
    pass


class SharedMemoryFlow(ScriptedFlow):
    def define_steps(self) -> list[Step]:
        return [Writer(self).use_memory("shared"), Reader(self).use_memory("shared")]


async def test_steps_selecting_one_namespace_share_its_history() -> None:
    engine, model = make_engine(SharedMemoryFlow, rules=[
        Rule(step="Writer", tools=[("hand_over", {})]), Rule(step="Reader", text="read"),
    ])
    reply = await engine.run("SharedMemoryFlow", "hi")
    assert reply.success, reply.message
    doc = await load(engine, reply.session_id)
    assert set(doc.flow.memory) == {"shared"}
    reader_sees = [m.content for m in model.requests[1].messages]
    assert reader_sees[:3] == ["", "Start", "hi"]
    assert reader_sees[-1] == "Start"


def test_context_is_frozen_once_a_session_is_bound() -> None:
    flow = ChatFlow()
    flow.add_context({"config": {"a": 1}})
    turn_of(flow).collect_steps()
    turn_of(flow).new_document()
    with pytest.raises(FlowDefinitionError, match="frozen"):
        flow.add_context({"late": True})
    assert flow.get_context("config.a") == 1
