"""Transitions (go, stay, direct): apply order, the cursor, child frames and crossings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime import (
    ExecutionFrameError,
    FlowDefinitionError,
    LogicStep,
    Message,
    Routable,
    Rule,
    Step,
    Transition,
    direct,
    go,
    stay,
    tool,
)
from tests.runtime.helpers import RecordingStore, ScriptedFlow, load, make_engine, memory

pytestmark = pytest.mark.anyio

trail: list[str] = []


class Origin(Step):
    async def on_exit(self) -> None:
        trail.append("exit Origin")

    @tool
    def move(self) -> Transition:
        """Cross to Target with everything a transition can carry."""
        return (
            go(Target)
            .with_state({"x": 1})
            .with_prompt("Target prompt")
            .with_message("carried hello")
            .with_content_type("text/markdown")
            .with_tool_feedback("moving on")
        )

    @tool
    def hold(self, feedback: str = "") -> Transition:
        """Stay here."""
        return stay(feedback or None)

    @tool
    def answer(self, value: Any) -> Transition:
        """Reply directly."""
        return direct(value)

    @tool
    def self_note(self) -> Transition:
        """Go to the current step with a message for itself."""
        return go(Origin).with_message("note to self")

    @tool
    def nowhere(self) -> Transition:
        """Go to a step nobody registered."""
        return go("Nowhere")

    @tool
    async def consult_then_go(self) -> Transition:
        """Ask Child, then cross to Target."""
        answer = await self.run_step(Child, "question")
        return go(Target).with_message(f"child said {answer}")


class Target(Step):
    async def on_enter(self) -> None:
        origin_tools = [m for m in self.flow.get_memory("Origin") if m.type == "tool"]
        trail.append(
            f"enter Target: x={self.get_state('x')} prompt={self.get_state('_prompt')} "
            f"origin_tools={len(origin_tools)}"
        )

    async def on_crossing(self, message: Message | None, prior_step: str | None) -> Message | None:
        text = message.content if message else None
        trail.append(f"crossing {text} from {prior_step}: x={self.get_state('x')}")
        return await super().on_crossing(message, prior_step)


class Child(Step):
    async def on_enter(self) -> None:
        trail.append("enter Child")

    async def on_exit(self) -> None:
        trail.append("exit Child")

    @tool
    def escape(self) -> Transition:
        """Try to move the cursor from a child frame."""
        return go(Target)

    @tool
    async def deeper(self) -> None:
        """Run a grandchild and keep its answer."""
        self.save_state({"grand": await self.run_step(GrandChild, "deeper question")})

    @tool
    def child_direct(self) -> Transition:
        """direct() is a goto of the executing step, so a child may not use it."""
        return direct("from the child")


class GrandChild(Step):
    pass


class TransitionFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Origin, Target, Child, GrandChild]


def origin_calls(*calls: tuple[str, dict[str, Any]]) -> Rule:
    return Rule(step="Origin", tools=list(calls), times=1)


async def run(*rules: Rule, store: RecordingStore | None = None) -> tuple[Any, Any, Any, Any]:
    trail.clear()
    engine, model = make_engine(TransitionFlow, rules=rules, store=store)
    reply = await engine.run("TransitionFlow", "hi")
    return reply, await load(engine, reply.session_id), model, engine


# -- apply order -----------------------------------------------------------------------------


async def test_transition_applies_cursor_then_prompt_state_feedback_then_message() -> None:
    store = RecordingStore()
    reply, doc, model, _ = await run(
        origin_calls(("move", {})), Rule(step="Target", text="target reply"), store=store
    )
    assert reply.success, reply.message
    assert trail == [
        "exit Origin",
        "enter Target: x=None prompt=None origin_tools=0",
        "crossing carried hello from Origin: x=1",
    ]
    assert reply.content_type == "text/markdown"
    assert doc.flow.current_step == "Target"
    assert doc.step_record("Target").state["x"] == 1
    origin_last = memory(doc, "Origin")[-1]
    assert (origin_last.type, origin_last.content) == ("tool", "moving on")
    request = model.requests[-1]
    assert request.step == "Target"
    assert request.system_prompt == "Target prompt"
    assert request.last_message.type == "human"
    assert request.last_message.content == "carried hello"
    assert request.last_message.step_name == "Target"
    assert "carried hello" not in [m.content for m in memory(doc, "Origin")]


async def test_with_message_to_the_calling_step_follows_its_tool_messages() -> None:
    reply, doc, model, _ = await run(
        origin_calls(("self_note", {})), Rule(last="^note to self$", text="noted")
    )
    assert reply.message == "noted"
    assert [m.type for m in memory(doc, "Origin")[-4:]] == ["ai", "tool", "human", "ai"]
    assert trail == []
    assert [r.step for r in model.requests] == ["Origin", "Origin"]


# -- stay and direct -------------------------------------------------------------------------


async def test_stay_keeps_the_step_and_calls_the_model_again_with_the_feedback() -> None:
    store = RecordingStore()
    reply, doc, model, _ = await run(
        origin_calls(("hold", {"feedback": "try again, politely"})),
        Rule(last="^try again, politely$", text="second answer"),
        store=store,
    )
    assert reply.message == "second answer"
    assert trail == []
    assert doc.flow.current_step == "Origin"
    assert [e.step_name for e in doc.flow.sequence] == ["Origin"]
    assert len(model.requests) == 2
    feedback = model.requests[1].last_message
    assert (feedback.type, feedback.status, feedback.content) == (
        "tool", "success", "try again, politely"
    )
    assert len(store.saved) == 2  # after on_start and at the end: no crossing


async def test_stay_without_feedback_answers_input_validated() -> None:
    _, _, model, _ = await run(origin_calls(("hold", {})), Rule(text="ok"))
    assert model.requests[1].last_message.content == "input validated"


async def test_direct_ends_the_turn_without_another_model_call() -> None:
    reply, doc, model, _ = await run(origin_calls(("answer", {"value": "Straight reply"})))
    assert reply.success, reply.message
    assert reply.message == "Straight reply"
    assert len(model.requests) == 1
    assert doc.flow.current_step == "Origin"
    last = memory(doc, "Origin")[-1]
    assert (last.type, last.content, last.is_direct) == ("ai", "Straight reply", True)
    assert memory(doc, "Origin")[-2].type == "tool"


async def test_direct_json_encodes_objects() -> None:
    value = {"hotel": "Ritz", "nights": [1, 2], "ok": True}
    reply, _, _, _ = await run(origin_calls(("answer", {"value": value})))
    assert json.loads(reply.message) == value


async def test_the_first_direct_reply_of_a_response_wins() -> None:
    reply, _, model, _ = await run(
        origin_calls(("answer", {"value": "first"}), ("answer", {"value": "second"}))
    )
    assert reply.message == "first"
    assert len(model.requests) == 1


def test_stay_and_direct_outside_a_tool_handler_raise_execution_frame_error() -> None:
    with pytest.raises(ExecutionFrameError, match=r"^stay\(\) can only be used while a tool"):
        stay("x")
    with pytest.raises(ExecutionFrameError, match=r"^direct\(\) can only be used while a tool"):
        direct("x")


class StayInResponse(Step):
    async def on_response(self, result: Any) -> Routable:
        return stay("not allowed here")


class StayFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [StayInResponse]


async def test_stay_from_on_response_fails_the_turn() -> None:
    engine, _ = make_engine(StayFlow, rules=[Rule(text="answer")])
    reply = await engine.run("StayFlow", "hi")
    assert reply.success is False
    assert reply.error_code == "execution_frame"
    assert reply.message == "stay() can only be used while a tool handler is running."


# -- go targets ------------------------------------------------------------------------------


class NotAStep:
    pass


@pytest.mark.parametrize("target", ["", "   ", NotAStep])
def test_go_rejects_empty_names_and_classes_without_an_id(target: Any) -> None:
    with pytest.raises(FlowDefinitionError, match=r"^go\(\) requires a "):
        go(target)


def test_go_accepts_a_step_class_or_a_trimmed_name() -> None:
    assert go(Target).target == "Target"
    assert go("  Target ").target == "Target"


async def test_go_to_an_unregistered_step_fails_the_turn() -> None:
    reply, doc, _, _ = await run(origin_calls(("nowhere", {})))
    assert reply.success is False
    assert reply.error_code == "flow_definition"
    assert reply.message == "Step 'Nowhere' is not defined in flow 'TransitionFlow'."
    assert doc.run_status == "aborted"
    assert doc.flow.current_step == "Origin"


# -- child frames and the trail --------------------------------------------------------------


async def test_go_from_a_run_step_child_fails_the_turn() -> None:
    reply, doc, _, _ = await run(
        origin_calls(("consult_then_go", {})), Rule(step="Child", tools=[("escape", {})])
    )
    assert reply.success is False
    assert reply.error_code == "execution_frame"
    assert "from a child execution frame" in reply.message
    assert doc.flow.current_step == "Origin"
    assert trail == ["enter Child", "exit Child"]


async def test_child_runs_at_level_two_and_crossings_save_mid_turn() -> None:
    store = RecordingStore()
    reply, doc, model, _ = await run(
        origin_calls(("consult_then_go", {})),
        Rule(step="Child", last="^question$", text="42"),
        Rule(step="Target", last="^child said 42$", text="final"),
        store=store,
    )
    assert reply.success, reply.message
    assert reply.message == "final"
    assert [(e.level, e.step_name) for e in doc.flow.sequence] == [
        (1, "Origin"), (2, "Child"), (1, "Target")
    ]
    assert [r.step for r in model.requests] == ["Origin", "Child", "Target"]
    assert trail[:2] == ["enter Child", "exit Child"]
    # after on_start, at the crossing into Target, at the end of the turn
    assert [d.revision for d in store.saved] == [1, 2, 3]
    assert doc.revision == 3
    crossing = store.saved[1]
    assert crossing.flow.current_step == "Target"
    assert crossing.step_record("Target") is None
    assert memory(crossing, "Origin")[-1].type == "tool"
    assert memory(crossing, "Child")[-1].content == "42"


async def test_grandchildren_run_at_level_three_and_children_never_save() -> None:
    store = RecordingStore()
    reply, doc, _, _ = await run(
        origin_calls(("consult_then_go", {})),
        Rule(step="Child", last="^question$", tools=[("deeper", {})]),
        Rule(step="GrandChild", text="deep answer"),
        Rule(step="Child", last_type="tool", text="child answer"),
        Rule(step="Target", text="final"),
        store=store,
    )
    assert reply.success, reply.message
    assert [(e.level, e.step_name) for e in doc.flow.sequence] == [
        (1, "Origin"), (2, "Child"), (3, "GrandChild"), (1, "Target")
    ]
    assert doc.step_record("Child").state["grand"] == "deep answer"
    assert memory(doc, "Target")[-2].content == "child said child answer"
    assert len(store.saved) == 3


async def test_direct_inside_a_run_step_child_is_a_routing_error() -> None:
    reply, _, _, _ = await run(
        origin_calls(("consult_then_go", {})), Rule(step="Child", tools=[("child_direct", {})])
    )
    assert reply.success is False
    assert reply.error_code == "execution_frame"
    assert reply.message.startswith("Cannot goto 'Child' from a child execution frame.")


# -- crossings -------------------------------------------------------------------------------


async def test_a_new_session_starts_with_a_synthesised_start_message() -> None:
    _, doc, model, _ = await run(Rule(text="hello"))
    assert [m.content for m in model.requests[0].messages] == ["", "Start", "hi"]
    assert memory(doc, "Origin")[1].step_name == "Origin"


class PingA(Step):
    @tool
    def to_b(self) -> type[Step]:
        """Go to B."""
        return PingB


class PingB(Step):
    @tool
    def to_a(self) -> type[Step]:
        """Go back to A."""
        return PingA


class PingFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [PingA, PingB]


async def test_on_crossing_synthesises_start_only_when_the_namespace_is_not_its_own() -> None:
    engine, model = make_engine(PingFlow, rules=[
        Rule(step="PingA", last="^hi$", tools=[("to_b", {})], times=1),
        Rule(step="PingB", last="^Start$", tools=[("to_a", {})], times=1),
        Rule(step="PingA", last_type="tool", text="back in A"),
    ])
    reply = await engine.run("PingFlow", "hi")
    assert reply.message == "back in A"
    assert [(r.step, r.last_message.content) for r in model.requests] == [
        ("PingA", "hi"), ("PingB", "Start"), ("PingA", "input validated")
    ]
    doc = await load(engine, reply.session_id)
    assert [m.content for m in memory(doc, "PingA")].count("Start") == 1


# -- logic steps -----------------------------------------------------------------------------


class Gate(LogicStep):
    async def run_logic(self) -> Routable:
        trail.append(f"gate saw {self.get_last_message().content}")
        if self.get_context("config.open"):
            return go(SecondGate).with_state({"from": "Gate"})
        return "closed"


class SecondGate(LogicStep):
    async def run_logic(self) -> Routable:
        return go(Answerer).with_message("passed both gates")


class Answerer(Step):
    pass


class LogicFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Gate, SecondGate, Answerer]


async def test_logic_step_routing_continues_to_the_next_model_call_in_the_same_turn() -> None:
    trail.clear()
    engine, model = make_engine(LogicFlow, rules=[Rule(step="Answerer", text="answered")])
    reply = await engine.run("LogicFlow", "open up", config={"open": True})
    assert reply.success, reply.message
    assert reply.message == "answered"
    assert trail == ["gate saw open up"]
    assert len(model.requests) == 1
    assert model.requests[0].last_message.content == "passed both gates"
    doc = await load(engine, reply.session_id)
    assert [e.step_name for e in doc.flow.sequence] == ["Gate", "SecondGate", "Answerer"]
    assert doc.step_record("SecondGate").state["from"] == "Gate"


async def test_logic_step_returning_a_string_ends_the_turn_without_a_model_call() -> None:
    trail.clear()
    engine, model = make_engine(LogicFlow, rules=[Rule(text="never")])
    reply = await engine.run("LogicFlow", "knock", config={"open": False})
    assert reply.success, reply.message
    assert reply.message == "closed"
    assert model.requests == []
    doc = await load(engine, reply.session_id)
    assert doc.flow.current_step == "Gate"
    assert [(m.type, m.content) for m in memory(doc, "Gate")[-2:]] == [
        ("human", "knock"), ("ai", "closed")
    ]


class Redirecting(Step):
    async def on_response(self, result: Any) -> Routable:
        return go(Answerer).with_message(f"forwarded: {result}")


class ResponseRouteFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Redirecting, Answerer]


async def test_on_response_returning_a_transition_carries_its_message_to_the_destination() -> None:
    engine, model = make_engine(ResponseRouteFlow, rules=[
        Rule(step="Redirecting", text="draft"),
        Rule(step="Answerer", last="^forwarded: draft$", text="final"),
    ])
    reply = await engine.run("ResponseRouteFlow", "hi")
    assert reply.message == "final"
    assert [r.step for r in model.requests] == ["Redirecting", "Answerer"]
