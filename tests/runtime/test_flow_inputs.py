"""What a flow says about how to start it, and what the engine does with it: the config
schema (validated before any session is touched), example messages, whether a message is
needed, the models a flow brings, and how events name the model that answered."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from runtime import (
    BadRunIdError,
    ConfigValidationError,
    Flow,
    FlowDefinitionError,
    FlowEngine,
    FlowInputError,
    LogicStep,
    MessageRequiredError,
    ModelSelection,
    Routable,
    Rule,
    ScriptedModel,
    Step,
)
from runtime.events import MemorySink

pytestmark = pytest.mark.anyio


class OrderConfig(BaseModel):
    count: int = Field(3, ge=1, le=10)
    size: Literal["small", "large"] = "small"
    gift: bool = False


class Order(LogicStep):
    async def run_logic(self) -> Routable:
        config = self.flow.get_config()
        return f"{config.count} {config.size}{' gift' if config.gift else ''}"


class OrderFlow(Flow):
    """Orders things.

    A second paragraph that start forms do not show.
    """

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Order(self)]

    def config_schema(self) -> type[BaseModel]:
        return OrderConfig

    def example_messages(self) -> list[str]:
        return ["order", "order again"]

    def needs_message(self) -> bool:
        return True


async def test_a_valid_config_is_kept_as_given_and_read_with_defaults() -> None:
    engine = FlowEngine(flows=[OrderFlow])
    reply = await engine.run("OrderFlow", "order", config={"count": "7", "gift": True})
    assert (reply.success, reply.message) == (True, "7 small gift")
    doc = await engine.store.load(reply.session_id)
    assert doc is not None and doc.flow.context == {"config": {"count": 7, "gift": True}}
    reply = await engine.run("OrderFlow", "order")
    assert reply.message == "3 small"


@pytest.mark.parametrize(("config", "fields"), [
    ({"count": 11}, ["count"]),
    ({"count": 0, "size": "huge"}, ["count", "size"]),
    ({"count": "many"}, ["count"]),
])
async def test_a_bad_config_fails_the_request_before_any_session(
    config: dict[str, object], fields: list[str]
) -> None:
    engine = FlowEngine(flows=[OrderFlow])
    with pytest.raises(ConfigValidationError) as caught:
        engine.check_input("OrderFlow", "order", config)
    assert [e["field"] for e in caught.value.extra["errors"]] == fields
    assert caught.value.code == "invalid_config"
    assert all(f"{field}:" in str(caught.value) for field in fields)
    reply = await engine.run("OrderFlow", "order", session_id="s1", config=config)
    assert (reply.success, reply.error_code) == (False, "invalid_config")
    assert await engine.store.load("s1") is None


@pytest.mark.parametrize("message", [None, "", "   \n"])
async def test_a_flow_that_needs_a_message_refuses_a_blank_one(message: str | None) -> None:
    engine = FlowEngine(flows=[OrderFlow])
    with pytest.raises(MessageRequiredError, match="OrderFlow' needs a message"):
        engine.check_input("OrderFlow", message, None)
    reply = await engine.run("OrderFlow", message, session_id="s2")
    assert (reply.success, reply.error_code) == (False, "message_required")
    assert await engine.store.load("s2") is None


async def test_a_message_with_a_lone_surrogate_is_refused_before_any_session() -> None:
    # Undecodable bytes on a command line arrive so (surrogateescape); the session's save
    # used to fail on it, as an internal serialiser error, after the step had run.
    engine = FlowEngine(flows=[OrderFlow], sinks=[memory := MemorySink()])
    message = b"order caf\xe9".decode("utf-8", "surrogateescape")
    with pytest.raises(FlowInputError, match=r"U\+DCE9 after 'order caf'"):
        engine.check_input("OrderFlow", message, None)
    reply = await engine.run("OrderFlow", message, session_id="s3")
    assert (reply.success, reply.error_code) == (False, "invalid_input")
    assert reply.message == (
        "The message to flow 'OrderFlow' has text with a lone surrogate (U+DCE9 after "
        "'order caf'), which no UTF-8 store can hold.")
    assert await engine.store.load("s3") is None
    assert [e.type for e in memory.events] == ["turn.started", "turn.failed"]


async def test_an_id_longer_than_a_dashboard_stores_is_refused_before_any_event() -> None:
    # Every event carries both ids; a dashboard's ingest refused each line of such a run,
    # and the web app's store holds 64 characters.
    engine = FlowEngine(flows=[OrderFlow], sinks=[memory := MemorySink()])
    reply = await engine.run("OrderFlow", "order", session_id="s" * 65)
    assert (reply.success, reply.error_code, reply.session_id) == (False, "bad_session_id", "")
    assert reply.message == "The session id must be at most 64 characters, not 65."
    reply = await engine.run("OrderFlow", "order", run_id="r" * 100)
    assert (reply.success, reply.error_code) == (False, "bad_run_id")
    assert reply.message == "The run id must be at most 64 characters, not 100."
    assert memory.events == []
    reply = await engine.run("OrderFlow", "order", session_id="s" * 64, run_id="r" * 64)
    assert reply.success, reply.message
    assert {(e.run_id, e.session_id) for e in memory.events} == {("r" * 64, "s" * 64)}


BAD_IDS = {
    "a space": ("order 1", "may hold only ASCII letters, digits, '.', '_' and '-', not ' ' "
                "(character 6)"),
    "a non-ASCII letter": ("ordre-\u00e9", "not '\u00e9' (character 7)"),
    "a slash": ("a/b", "not '/' (character 2)"),
    "a quote": ('a"b', "not '\"' (character 2)"),
    "a tab": ("a\tb", "not '\\t' (character 2)"),
    "CR LF": ("a\r\nb", "not '\\r' (character 2)"),
    "a colon": ("a:b", "not ':' (character 2)"),
    "a leading dot": (".a", "must begin with a letter or a digit, not '.'"),
    "a leading dash": ("-a", "must begin with a letter or a digit, not '-'"),
}


@pytest.mark.parametrize(("bad", "why"), BAD_IDS.values(), ids=BAD_IDS.keys())
async def test_an_id_outside_the_definition_is_refused_before_any_event(bad: str, why: str
                                                                        ) -> None:
    # Such an id went into every event; a dashboard stored the run, then failed (500) on
    # its channel group, its page's websocket and its download names.
    engine = FlowEngine(flows=[OrderFlow], sinks=[memory := MemorySink()])
    reply = await engine.run("OrderFlow", "order", run_id=bad)
    assert (reply.success, reply.error_code) == (False, "bad_run_id")
    assert reply.message.startswith("The run id ") and why in reply.message
    reply = await engine.run("OrderFlow", "order", session_id=bad)
    assert (reply.success, reply.error_code, reply.session_id) == (False, "bad_session_id", "")
    assert reply.message.startswith("The session id ") and why in reply.message
    assert memory.events == []
    assert await engine.store.load(bad) is None
    with pytest.raises(FlowInputError):  # both refusals are input errors
        raise BadRunIdError("x")
    ok = await engine.run("OrderFlow", "order", session_id="Order.session_1-a",
                          run_id="0rder.run_1-A")
    assert ok.success, ok.message
    assert {(e.run_id, e.session_id) for e in memory.events} == {
        ("0rder.run_1-A", "Order.session_1-a")}


async def test_flow_info_carries_the_schema_examples_and_the_first_doc_paragraph() -> None:
    info = FlowEngine(flows=[OrderFlow]).flow_info("OrderFlow")
    assert info.id == "OrderFlow" and info.description == "Orders things."
    assert info.example_messages == ["order", "order again"] and info.needs_message is True
    assert info.config_schema == OrderConfig.model_json_schema()
    assert info.config_schema["properties"]["count"]["maximum"] == 10


class Ask(Step):
    def get_prompt(self) -> str:
        return "Answer."


class OwnModelFlow(Flow):
    """Brings its own model under a provider the engine does not know."""

    model = ScriptedModel([Rule(text="from my own model")], name="own-script")

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="mine", name="gpt-imaginary")

    def define_steps(self) -> list[Step]:
        return [Ask(self)]

    def model_providers(self) -> dict[str, ScriptedModel]:
        return {"mine": self.model}


async def test_a_flow_brings_its_own_model_and_events_name_the_scripted_model() -> None:
    sink = MemorySink()
    engine = FlowEngine(flows=[OwnModelFlow], sinks=[sink])
    reply = await engine.run("OwnModelFlow", "hi")
    assert (reply.success, reply.message) == (True, "from my own model")
    (started,) = [e for e in sink.events if e.type == "model.started"]
    assert started.model == {"provider": "scripted", "name": "own-script", "params": {},
                             "requested": {"provider": "mine", "name": "gpt-imaginary",
                                           "params": {}}}


async def test_an_unnamed_scripted_override_still_names_the_selection() -> None:
    sink = MemorySink()
    engine = FlowEngine(flows=[OwnModelFlow], sinks=[sink],
                        model_override=ScriptedModel([Rule(text="override")]))
    reply = await engine.run("OwnModelFlow", "hi")
    assert reply.message == "override"
    (started,) = [e for e in sink.events if e.type == "model.started"]
    assert started.model == {"provider": "mine", "name": "gpt-imaginary", "params": {}}


async def test_without_its_own_model_the_flow_names_the_known_providers() -> None:
    class Bare(OwnModelFlow):
        id = "Bare"

        def model_providers(self) -> dict[str, ScriptedModel]:
            return {}

    engine = FlowEngine(flows=[Bare], providers={"openai": ScriptedModel()})
    reply = await engine.run("Bare", "hi")
    assert reply.error_code == "flow_definition"
    assert "'mine' is not registered (known: openai)" in reply.message


def test_model_providers_must_be_models() -> None:
    class Broken(OwnModelFlow):
        id = "Broken"

        def model_providers(self) -> dict[str, object]:  # type: ignore[override]
            return {"mine": "not a model"}

    with pytest.raises(FlowDefinitionError, match="model_providers\\(\\) of flow 'Broken'"):
        FlowEngine(flows=[Broken])
