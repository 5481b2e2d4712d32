"""Tools: definition (schemas), the flow-wide registry and per-step exposure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import BaseModel, Field

from runtime import (
    TERMINATE_SESSION_TOOL,
    FlowDefinitionError,
    Rule,
    Step,
    TerminateSessionStep,
    ToolArgumentsError,
    ToolSpec,
    define_tool,
    tool,
)
from runtime.tools import ToolRegistry, handlers_of
from tests.runtime.helpers import ScriptedFlow, load, make_engine

pytestmark = pytest.mark.anyio


class BookingArgs(BaseModel):
    """Arguments of the booking tool."""

    hotel: str = Field(description="Hotel name")
    nights: int = Field(default=1, ge=1)


LOOKUP = define_tool("lookup", "Look a city up.", city=(str, ...))


def spec_of(step_cls: type[Step], name: str) -> ToolSpec:
    return handlers_of(step_cls)[name].spec


def tool_names(tools: Sequence[Any]) -> set[str]:
    return {t.name for t in tools}


# -- definition ------------------------------------------------------------------------------


class SchemaStep(Step):
    @tool
    def search(self, city: str, nights: int = 2, pets: bool = False) -> None:
        """Search hotels
        in a city.

        Details the model never sees.
        """

    @tool("book_room")
    def book(self, args: BookingArgs) -> None:
        """Book a room."""

    @tool(description="Explicit words.")
    def described(self, note: str) -> None:
        """Docstring that loses."""

    @tool()
    def undocumented(self) -> None:
        pass

    @tool("explicit_args", args=BookingArgs)
    def explicit(self, args: Any) -> None:
        """Uses args=."""


def test_type_hints_and_defaults_become_the_argument_schema() -> None:
    params = spec_of(SchemaStep, "search").schema().parameters
    assert params["type"] == "object"
    assert params["properties"]["city"]["type"] == "string"
    assert params["properties"]["nights"] == {"default": 2, "title": "Nights", "type": "integer"}
    assert params["properties"]["pets"]["default"] is False
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    assert handlers_of(SchemaStep)["search"].pass_model is False


def test_a_class_s_handlers_are_collected_once_read_only_and_a_subclass_has_its_own() -> None:
    class Child(SchemaStep):
        @tool
        def extra(self) -> None:
            """One more."""

    found = handlers_of(SchemaStep)
    assert handlers_of(SchemaStep) is found  # every model call asks: collected once
    with pytest.raises(TypeError):
        found["extra"] = found["search"]  # type: ignore[index]
    assert "extra" not in handlers_of(SchemaStep)
    assert list(handlers_of(Child)) == [*found, "extra"]


def test_pydantic_argument_model_is_the_schema_as_is() -> None:
    spec = spec_of(SchemaStep, "book_room")
    assert spec.args_model is BookingArgs
    assert spec.schema().parameters == BookingArgs.model_json_schema()
    assert handlers_of(SchemaStep)["book_room"].pass_model is True


def test_args_keyword_sets_the_schema_and_passes_the_model() -> None:
    handler = handlers_of(SchemaStep)["explicit_args"]
    assert handler.spec.args_model is BookingArgs
    assert handler.pass_model is True


def test_description_is_the_docstring_first_paragraph_on_one_line() -> None:
    assert spec_of(SchemaStep, "search").description == "Search hotels in a city."


def test_explicit_description_wins_and_no_docstring_falls_back_to_the_name() -> None:
    assert spec_of(SchemaStep, "described").description == "Explicit words."
    assert spec_of(SchemaStep, "undocumented").description == "undocumented"


def test_bare_tool_is_named_after_the_method_and_a_string_names_it() -> None:
    names = set(handlers_of(SchemaStep))
    assert {"search", "book_room", "described", "undocumented", "explicit_args"} <= names
    assert "book" not in names


def test_a_handler_parameter_without_type_hint_is_a_definition_error() -> None:
    with pytest.raises(FlowDefinitionError, match="needs a type hint on parameter 'city'"):

        @tool
        def lookup(self: Any, city) -> None:  # type: ignore[no-untyped-def]
            pass


def test_a_handler_with_var_arguments_is_a_definition_error() -> None:
    with pytest.raises(FlowDefinitionError, match=r"cannot take \*args/\*\*kwargs"):

        @tool
        def lookup(self: Any, **kwargs: str) -> None:
            pass


@pytest.mark.parametrize("name", ["", "has space", "dots.bad", "semi;colon"])
def test_tool_names_must_be_letters_digits_underscore_or_dash(name: str) -> None:
    with pytest.raises(FlowDefinitionError, match="must be non-empty letters"):
        define_tool(name, "bad")
    if name:
        with pytest.raises(FlowDefinitionError):

            @tool(name)
            def handler(self: Any) -> None:
                pass


def test_define_tool_builds_a_strict_schema_from_fields_or_takes_a_model() -> None:
    assert LOOKUP.schema().parameters["required"] == ["city"]
    assert LOOKUP.validate({"city": "Oslo"}).city == "Oslo"  # type: ignore[attr-defined]
    with pytest.raises(ToolArgumentsError):
        LOOKUP.validate({"city": "Oslo", "extra": 1})
    booking = define_tool("book", "Book.", BookingArgs)
    assert booking.args_model is BookingArgs


def test_invalid_arguments_raise_a_message_written_for_the_model() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        spec_of(SchemaStep, "book_room").validate({"nights": 0})
    message = caught.value.message
    assert message.startswith("Invalid arguments for tool 'book_room': ")
    assert "hotel: Field required" in message
    assert "nights: Input should be greater than or equal to 1" in message
    assert message.endswith("Call the tool again with corrected arguments.")
    assert caught.value.extra["tool"] == "book_room"


class Archiver(Step):
    @tool
    def archive(self, json: str, copy: bool = False) -> None:
        """Parameters may shadow pydantic model attributes."""
        self.save_state({"archived": [json, copy]})


class ArchiveFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [Archiver]


async def test_parameters_named_like_model_attributes_keep_their_wire_names() -> None:
    params = spec_of(Archiver, "archive").schema().parameters
    assert set(params["properties"]) == {"json", "copy"}
    assert params["required"] == ["json"]
    engine, _ = make_engine(ArchiveFlow, rules=[
        Rule(tools=[("archive", {"json": "{}", "copy": True})], times=1), Rule(text="ok"),
    ])
    reply = await engine.run("ArchiveFlow", "hi")
    assert reply.success, reply.message
    state = (await load(engine, reply.session_id)).step_record("Archiver").state
    assert state["archived"] == ["{}", True]


# -- the registry ----------------------------------------------------------------------------


def test_registry_rejects_a_different_definition_of_a_known_name() -> None:
    registry = ToolRegistry("MyFlow")
    registry.add([LOOKUP, LOOKUP])
    with pytest.raises(FlowDefinitionError) as caught:
        registry.add([define_tool("lookup", "Another lookup.", city=(str, ...))])
    assert str(caught.value) == "Duplicate tool 'lookup' registered in flow 'MyFlow'."
    assert registry.names() == ["lookup"]


def test_identical_definitions_built_separately_are_one_tool() -> None:
    registry = ToolRegistry("MyFlow")
    registry.add([LOOKUP])
    registry.add([define_tool("lookup", "Look a city up.", city=(str, ...))])
    assert registry.names() == ["lookup"]
    assert registry.require("lookup").schema() == LOOKUP.schema()


def test_one_name_with_another_argument_schema_is_a_duplicate() -> None:
    registry = ToolRegistry("MyFlow")
    registry.add([LOOKUP])
    with pytest.raises(FlowDefinitionError, match=r"^Duplicate tool 'lookup' registered"):
        registry.add([define_tool("lookup", "Look a city up.", city=(int, ...))])


def test_registry_requires_known_names_and_tool_specs() -> None:
    registry = ToolRegistry("MyFlow")
    with pytest.raises(FlowDefinitionError) as caught:
        registry.require("nope")
    assert str(caught.value) == "Tool 'nope' is not defined in flow 'MyFlow'."
    with pytest.raises(FlowDefinitionError, match="must return ToolSpec objects, got dict"):
        registry.add([{"name": "x"}])  # type: ignore[list-item]


class LookupOne(Step):
    @tool
    def lookup(self, city: str) -> None:
        """Look up."""


class LookupTwo(Step):
    @tool
    def lookup(self, city: str) -> None:
        """Look up too."""


class DuplicateFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [LookupOne, LookupTwo]


async def test_two_steps_defining_one_tool_name_fail_the_turn_with_the_duplicate_message() -> None:
    engine, model = make_engine(DuplicateFlow, rules=[Rule(text="never")])
    reply = await engine.run("DuplicateFlow", "hi")
    assert reply.success is False
    assert reply.error_code == "flow_definition"
    assert reply.message == "Duplicate tool 'lookup' registered in flow 'DuplicateFlow'."
    assert model.requests == []


class SharedSpecA(Step):
    def define_tools(self) -> list[ToolSpec]:
        return [LOOKUP]

    def use_tools(self) -> list[str]:
        return ["lookup"]


class SharedSpecB(SharedSpecA):
    pass


class SharedHandlerBase(Step):
    @tool
    def shared(self, value: int) -> None:
        """Shared by inheritance."""


class SharedHandlerA(SharedHandlerBase):
    pass


class SharedHandlerB(SharedHandlerBase):
    pass


class SharedFlow(ScriptedFlow):
    def define_tools(self) -> list[ToolSpec]:
        return [LOOKUP]

    def define_steps(self) -> list[type[Step]]:
        return [SharedSpecA, SharedSpecB, SharedHandlerA, SharedHandlerB]


async def test_one_definition_reached_through_several_steps_is_one_tool() -> None:
    engine, model = make_engine(SharedFlow, rules=[Rule(text="fine")])
    reply = await engine.run("SharedFlow", "hi")
    assert reply.success, reply.message
    assert tool_names(model.requests[0].tools) == {"lookup"}


class UnknownToolStep(Step):
    def use_tools(self) -> list[str]:
        return ["nope"]


class UnknownToolFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [UnknownToolStep]


async def test_use_tools_naming_an_unknown_tool_fails_the_turn_before_any_model_call() -> None:
    engine, model = make_engine(UnknownToolFlow, rules=[Rule(text="never")])
    reply = await engine.run("UnknownToolFlow", "hi")
    assert reply.success is False
    assert reply.error_code == "flow_definition"
    assert reply.message == "Tool 'nope' is not defined in flow 'UnknownToolFlow'."
    assert model.requests == []


# -- exposure --------------------------------------------------------------------------------


class ExposureStep(Step):
    def define_tools(self) -> list[ToolSpec]:
        return [LOOKUP]

    def use_tools(self) -> list[str]:
        return ["lookup"]

    @tool
    def visible(self, x: int) -> None:
        """Offered."""

    @tool(expose=False)
    def hidden(self, x: int) -> None:
        """Registered but not offered."""


class OtherStep(Step):
    @tool
    def elsewhere(self) -> None:
        """Offered by OtherStep only."""


class ExposureFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [ExposureStep, OtherStep]


async def test_request_offers_exactly_the_exposed_tools_of_the_executing_step() -> None:
    engine, model = make_engine(ExposureFlow, rules=[Rule(text="ok")])
    reply = await engine.run("ExposureFlow", "hi")
    assert reply.success, reply.message
    tools = model.requests[0].tools
    assert tool_names(tools) == {"visible", "lookup"}
    assert len(tools) == 2
    by_name = {t.name: t for t in tools}
    assert by_name["lookup"].description == "Look a city up."
    assert by_name["visible"].parameters["required"] == ["x"]


async def test_an_unexposed_handler_called_by_the_model_counts_as_hallucinated() -> None:
    engine, _ = make_engine(ExposureFlow, rules=[
        Rule(tools=[("hidden", {"x": 1})], times=1),
        Rule(text="done"),
    ])
    reply = await engine.run("ExposureFlow", "hi")
    assert reply.success, reply.message
    doc = await load(engine, reply.session_id)
    assert [w.message for w in doc.warn] == ["hallucinated tool: hidden"]


class TerminatingStep(Step):
    def use_tools(self) -> list[str]:
        return [TERMINATE_SESSION_TOOL.name]


class TerminatingFlow(ScriptedFlow):
    def define_steps(self) -> list[Step | type[Step]]:
        return [TerminatingStep, TerminateSessionStep(self).use_memory("temp")]


async def test_terminate_session_is_offered_only_when_listed_and_ends_the_session() -> None:
    engine, model = make_engine(TerminatingFlow, ExposureFlow, rules=[
        Rule(step="TerminatingStep", tools=[("terminate_session", {"prompt": "Say bye."})]),
        Rule(step="TerminateSessionStep", prompt="^Say bye\\.$", text="Goodbye!"),
        Rule(text="plain"),
    ])
    await engine.run("ExposureFlow", "hi")
    assert "terminate_session" not in tool_names(model.requests[0].tools)

    reply = await engine.run("TerminatingFlow", "stop")
    assert reply.success, reply.message
    assert (reply.message, reply.completed) == ("Goodbye!", True)
    assert tool_names(model.requests[1].tools) == {"terminate_session"}
    assert model.requests[2].tools == []
    doc = await load(engine, reply.session_id)
    assert doc.run_status == "completed"
    assert doc.flow.current_step == "TerminateSessionStep"
