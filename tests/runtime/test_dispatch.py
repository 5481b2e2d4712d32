"""Tool dispatch edge cases, driven through real turns of a scripted flow."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from runtime import Rule, Step, ToolCall, ToolSpec, Transition, define_tool, go, tool
from runtime.messages import ai_message, direct_message, human_message, tool_message
from tests.runtime.helpers import ScriptedFlow, load, make_engine, memory, warnings_of

pytestmark = pytest.mark.anyio

UNHANDLED = define_tool("unhandled", "Exposed, but no step method handles it.", x=(int, ...))
LOOKUP = define_tool("lookup", "Look a city up.", city=(str, ...))
ROUTE = define_tool("route", "Legacy routing tool.", where=(str, ...), why=(str, ""))


class Booking(BaseModel):
    hotel: str
    nights: int


room_events: list[str] = []


class Desk(Step):
    def define_tools(self) -> list[ToolSpec]:
        return [UNHANDLED, LOOKUP, ROUTE]

    def use_tools(self) -> list[str]:
        return ["unhandled", "lookup", "route"]

    def _append(self, key: str, value: Any) -> None:
        self.save_state({key: [*(self.get_state(key) or []), value]})

    @tool
    def note(self, text: str) -> None:
        """Write a note."""
        self._append("notes", text)

    @tool
    async def book(self, hotel: str, nights: int) -> None:
        """Book a hotel (async handler)."""
        self._append("bookings", f"{hotel}x{nights}")

    @tool
    def book_model(self, booking: Booking) -> None:
        """Book from a pydantic argument model."""
        self._append("models", type(booking).__name__)

    @tool
    def to_a(self) -> Transition:
        """Go to room A."""
        return go(RoomA)

    @tool
    def to_b(self) -> type[Step]:
        """Go to room B by returning the class."""
        return RoomB

    @tool
    def say_text(self) -> Any:
        """Returns a bare string, which is not a route."""
        return "not a route"

    @tool
    def explode(self) -> None:
        """Raises a plain exception."""
        raise ValueError("boom in handler")

    # Legacy dispatch: undecorated methods named like a use_tools() tool.
    def lookup(self, city: str) -> None:
        self._append("lookups", city if isinstance(city, str) else f"<{type(city).__name__}>")

    def route(self, where: str, why: str) -> None:
        self._append("routes", f"{where}:{why}")


class Room(Step):
    async def on_enter(self) -> None:
        room_events.append(f"enter {self.name}")

    async def on_exit(self) -> None:
        room_events.append(f"exit {self.name}")


class RoomA(Room):
    pass


class RoomB(Room):
    pass


class DispatchFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Desk, RoomA, RoomB]


def desk_rules(*calls: tuple[str, dict[str, Any]], then: str = "done") -> list[Rule]:
    """One response with ``calls`` from Desk, then plain answers."""
    return [Rule(step="Desk", tools=list(calls), times=1), Rule(text=then)]


async def run_desk(*calls: tuple[str, dict[str, Any]]) -> tuple[Any, Any, Any]:
    room_events.clear()
    engine, model = make_engine(DispatchFlow, rules=desk_rules(*calls))
    reply = await engine.run("DispatchFlow", "hi")
    return reply, await load(engine, reply.session_id), model


async def test_calls_in_one_response_are_handled_in_call_order() -> None:
    reply, doc, _ = await run_desk(
        ("note", {"text": "b"}), ("note", {"text": "a"}), ("note", {"text": "c"})
    )
    assert reply.success, reply.message
    assert doc.step_record("Desk").state["notes"] == ["b", "a", "c"]
    tools = [m for m in memory(doc, "Desk") if m.type == "tool"]
    assert [m.tool_call_id for m in tools] == ["call_1", "call_2", "call_3"]
    assert {(m.name, m.status, m.content) for m in tools} == {
        ("note", "success", "input validated")
    }


async def test_the_ai_message_with_tool_calls_precedes_its_tool_messages() -> None:
    reply, doc, model = await run_desk(("note", {"text": "x"}))
    assert reply.message == "done"
    types = [m.type for m in memory(doc, "Desk")]
    assert types == ["system", "human", "human", "ai", "tool", "ai"]
    ai = memory(doc, "Desk")[3]
    assert [c.name for c in ai.tool_calls] == ["note"]
    assert model.requests[1].last_message.tool_call_id == "call_1"


async def test_async_handlers_are_awaited_and_model_handlers_get_the_model() -> None:
    reply, doc, _ = await run_desk(
        ("book", {"hotel": "Ritz", "nights": 2}),
        ("book_model", {"hotel": "Savoy", "nights": 1}),
    )
    assert reply.success, reply.message
    state = doc.step_record("Desk").state
    assert state["bookings"] == ["Ritzx2"]
    assert state["models"] == ["Booking"]


async def test_hallucinated_tool_becomes_warning_and_error_tool_message() -> None:
    reply, doc, model = await run_desk(("ghost", {"any": 1}), ("note", {"text": "kept"}))
    assert reply.success, reply.message
    assert reply.message == "done"
    assert warnings_of(doc) == ["hallucinated tool: ghost"]
    assert doc.warn[0].model_extra == {"step": "Desk"}
    ghost = memory(doc, "Desk")[4]
    assert (ghost.type, ghost.name, ghost.status) == ("tool", "ghost", "error")
    assert ghost.content == "Tool 'ghost' does not exist. Use only the tools you were given."
    assert doc.step_record("Desk").state["notes"] == ["kept"]
    assert len(model.requests) == 2
    assert doc.run_status == "running"


async def test_exposed_tool_without_handler_warns_and_answers_input_validated() -> None:
    reply, doc, model = await run_desk(("unhandled", {"x": 1}))
    assert reply.success, reply.message
    assert warnings_of(doc) == ["missing tool handler: unhandled"]
    last = model.requests[1].last_message
    assert (last.type, last.name, last.status, last.content) == (
        "tool", "unhandled", "success", "input validated"
    )


async def test_invalid_arguments_go_back_to_the_model_and_skip_the_handler() -> None:
    engine, model = make_engine(DispatchFlow, rules=[
        Rule(step="Desk", tools=[("book", {"hotel": "Ritz", "nights": "many"})], times=1),
        Rule(last="^Invalid arguments", tools=[("book", {"hotel": "Ritz", "nights": 3})]),
        Rule(text="booked"),
    ])
    reply = await engine.run("DispatchFlow", "book")
    assert reply.success, reply.message
    assert reply.message == "booked"
    first_error = model.requests[1].last_message
    assert (first_error.type, first_error.status) == ("tool", "error")
    assert first_error.content.startswith("Invalid arguments for tool 'book': nights: ")
    assert "valid integer" in first_error.content
    doc = await load(engine, reply.session_id)
    assert doc.step_record("Desk").state["bookings"] == ["Ritzx3"]
    assert doc.warn == []


async def test_unknown_extra_arguments_are_rejected_before_the_handler() -> None:
    reply, doc, model = await run_desk(("note", {"text": "x", "extra": True}))
    assert reply.success, reply.message
    assert doc.step_record("Desk") is None
    assert "extra: Extra inputs are not permitted" in model.requests[1].last_message.content


async def test_when_two_handlers_route_the_later_call_wins() -> None:
    reply, doc, model = await run_desk(("to_a", {}), ("to_b", {}))
    assert reply.success, reply.message
    assert doc.flow.current_step == "RoomB"
    assert [e.step_name for e in doc.flow.sequence] == ["Desk", "RoomA", "RoomB"]
    assert room_events == ["enter RoomA", "exit RoomA", "enter RoomB"]
    assert [r.step for r in model.requests] == ["Desk", "RoomB"]
    feedback = [m for m in memory(doc, "Desk") if m.type == "tool"]
    assert [m.name for m in feedback] == ["to_a", "to_b"]


async def test_routing_order_follows_the_calls_not_the_handlers() -> None:
    reply, doc, _ = await run_desk(("to_b", {}), ("to_a", {}))
    assert reply.success, reply.message
    assert doc.flow.current_step == "RoomA"


async def test_handler_returning_a_plain_string_fails_the_turn_with_a_clear_message() -> None:
    reply, doc, _ = await run_desk(("say_text", {}))
    assert reply.success is False
    assert reply.error_code == "flow_definition"
    assert reply.message == (
        "A tool handler returned str; return go(...), stay(...), direct(...), a Step class, "
        "or None."
    )
    assert doc.run_status == "aborted"


async def test_handler_raising_aborts_the_session_and_logs_the_error() -> None:
    reply, doc, _ = await run_desk(("explode", {}))
    assert reply.success is False
    assert reply.completed is True
    assert reply.error_code == "internal"
    assert "boom in handler" in reply.message
    assert reply.session_id == doc.id
    assert doc.run_status == "aborted"
    assert [(e.level, e.message) for e in doc.error] == [("error", "boom in handler")]
    assert doc.error[0].model_extra == {"error_type": "ValueError"}


async def test_an_aborted_session_is_not_resumed() -> None:
    room_events.clear()
    engine, _ = make_engine(DispatchFlow, rules=desk_rules(("explode", {})))
    failed = await engine.run("DispatchFlow", "hi")
    again = await engine.run("DispatchFlow", "hello", failed.session_id)
    assert again.success, again.message
    assert again.session_id != failed.session_id


async def test_legacy_method_handler_receives_keyword_arguments() -> None:
    reply, doc, _ = await run_desk(("route", {"where": "north", "why": "sun"}))
    assert reply.success, reply.message
    assert doc.step_record("Desk").state["routes"] == ["north:sun"]


async def test_legacy_method_handler_with_one_field_parameter_receives_the_value() -> None:
    reply, doc, _ = await run_desk(("lookup", {"city": "Oslo"}))
    assert reply.success, reply.message
    assert doc.step_record("Desk").state["lookups"] == ["Oslo"]


async def test_unparseable_arguments_kept_under_raw_go_back_to_the_model() -> None:
    reply, doc, model = await run_desk(("note", {"_raw": "{not json"}))
    assert reply.success, reply.message
    assert doc.step_record("Desk") is None
    error = model.requests[1].last_message
    assert (error.type, error.status) == ("tool", "error")
    assert error.content.startswith("Invalid arguments for tool 'note': they are not a JSON object")


def test_an_attributed_message_carries_one_instant_in_its_id_and_timestamp() -> None:
    call = ToolCall(id="call_1", name="book")
    for message in (human_message("Desk", "hi"), ai_message("Desk", "hello"),
                    direct_message("Desk", "done"),
                    tool_message("Desk", call, "booked", status="success")):
        step, stamp, digits = message.id.split("|")
        assert (step, stamp) == ("Desk", message.timestamp)
        assert len(digits) == 10 and digits.isdigit()
