"""The model-call loop: retries, recovery hooks, timeouts, tokens, selections and limits."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from runtime import (
    Flow,
    ModelBlockedError,
    ModelError,
    ModelResponse,
    ModelSelection,
    Rule,
    Step,
    Transition,
    stay,
    tool,
)
from runtime.runner import BLANK_RESPONSE_NUDGE
from tests.runtime.helpers import (
    MODEL,
    FailingModel,
    ScriptedFlow,
    SlowModel,
    load,
    make_engine,
    memory,
    usage,
)

pytestmark = pytest.mark.anyio


def flow_of(*steps: type[Step] | Any, base: type[Flow] = ScriptedFlow, **attrs: Any) -> type[Flow]:
    """A flow class named after its first step, registering ``steps``."""
    name = f"{steps[0].__name__}Flow"
    return type(name, (base,), {"define_steps": lambda self: list(steps), **attrs})


class Asker(Step):
    def get_prompt(self) -> str | None:
        return "Answer briefly."


class Picky(Step):
    def check_response(self, response: ModelResponse) -> bool:
        return "BAD" in response.content


seen: list[Any] = []


class Hooked(Step):
    """Records what the recovery hooks receive; class attributes choose their answers."""

    retry: ClassVar[bool | None] = None
    recovery: ClassVar[str | None] = None
    blocked_recovery: ClassVar[str | None] = None
    timeout: ClassVar[float | None] = None

    def call_timeout(self) -> float | None:
        return self.timeout

    async def should_retry_model_error(self, error: Exception, attempt: int) -> bool | None:
        seen.append(("retry?", type(error).__name__, attempt))
        return self.retry

    async def on_model_error(self, error: Exception) -> str | None:
        seen.append(("error", type(error).__name__))
        return self.recovery

    async def on_model_blocked(self, error: Exception) -> str | None:
        seen.append(("blocked", str(error)))
        return self.blocked_recovery


def hooked(**attrs: Any) -> type[Step]:
    return type("Hooked", (Hooked,), attrs)


async def run_with(model: Any, step: type[Step], message: str = "hi", **flow_attrs: Any) -> Any:
    seen.clear()
    flow = flow_of(step, **flow_attrs)
    engine, _ = make_engine(flow, model=model)
    reply = await engine.run(flow.id, message)
    return reply, await load(engine, reply.session_id)


# -- blank and rejected answers --------------------------------------------------------------


async def test_blank_answer_gets_a_nudge_and_a_retry_and_both_attempts_are_tallied() -> None:
    engine, model = make_engine(flow_of(Asker), rules=[
        Rule(text="  \n ", usage=usage(5), times=1),
        Rule(last=f"^{BLANK_RESPONSE_NUDGE}$", text="real answer", usage=usage(7)),
    ])
    reply = await engine.run("AskerFlow", "hi")
    assert reply.message == "real answer"
    assert len(model.requests) == 2
    assert all(r.system_prompt == "Answer briefly." for r in model.requests)
    nudge = model.requests[1].last_message
    assert (nudge.type, nudge.content) == ("human", BLANK_RESPONSE_NUDGE)
    doc = await load(engine, reply.session_id)
    assert doc.tokens.total_tokens == 12
    assert [m.content for m in memory(doc, "Asker") if m.type == "ai"] == ["real answer"]


async def test_only_blank_answers_fail_the_turn_after_every_attempt() -> None:
    engine, model = make_engine(flow_of(Asker), rules=[Rule(text="", usage=usage(2))])
    reply = await engine.run("AskerFlow", "hi")
    assert reply.success is False
    assert reply.error_code == "model_call_failed"
    assert reply.message.startswith("LLM call failed. Reason:blank. Error:")
    assert len(model.requests) == 3
    assert (await load(engine, reply.session_id)).tokens.total_tokens == 6


async def test_check_response_rejection_retries_and_keeps_the_rejected_answer_out() -> None:
    engine, model = make_engine(flow_of(Picky), rules=[
        Rule(text="BAD answer", usage=usage(4), times=1),
        Rule(text="good answer", usage=usage(6)),
    ])
    reply = await engine.run("PickyFlow", "hi")
    assert reply.message == "good answer"
    assert len(model.requests) == 2
    first, second = ([(m.type, m.id, m.content) for m in r.messages] for r in model.requests)
    assert second == first
    doc = await load(engine, reply.session_id)
    assert "BAD answer" not in [m.content for m in memory(doc, "Picky")]
    assert doc.tokens.total_tokens == 10


# -- transport errors, hooks and refusals ----------------------------------------------------


async def test_transport_errors_are_retried_until_an_attempt_succeeds() -> None:
    model = FailingModel(failures=2)
    reply, doc = await run_with(model, hooked())
    assert (reply.success, reply.message) == (True, "recovered")
    assert model.calls == 3
    assert seen == [("retry?", "ModelTransportError", 1), ("retry?", "ModelTransportError", 2)]
    assert doc.tokens.total_tokens == 10


async def test_transport_errors_beyond_retry_attempts_fail_the_turn() -> None:
    model = FailingModel(failures=3)
    reply, doc = await run_with(model, hooked())
    assert reply.success is False
    assert reply.error_code == "model_call_failed"
    assert reply.message.startswith("LLM call failed. Reason:transport. Error:transport broke")
    assert model.calls == 3
    assert seen[-1] == ("error", "ModelTransportError")
    assert doc.run_status == "aborted"


class FiveAttempts(ScriptedFlow):
    def config_model(self) -> ModelSelection:
        return MODEL.model_copy(update={"retry_attempts": 5})


async def test_retry_attempts_of_the_selection_bound_the_attempts() -> None:
    model = FailingModel(failures=4)
    reply, _ = await run_with(model, hooked(), base=FiveAttempts)
    assert reply.success, reply.message
    assert model.calls == 5
    failing = FailingModel(failures=5)
    reply, _ = await run_with(failing, hooked(), base=FiveAttempts)
    assert reply.success is False
    assert failing.calls == 5


async def test_should_retry_returning_false_stops_at_once() -> None:
    model = FailingModel(failures=3)
    reply, _ = await run_with(model, hooked(retry=False))
    assert reply.success is False
    assert model.calls == 1
    assert seen == [("retry?", "ModelTransportError", 1), ("error", "ModelTransportError")]


async def test_flow_level_retry_decision_applies_when_the_step_defers() -> None:
    async def never(self: Flow, error: Exception, attempt: int) -> bool | None:
        return False

    model = FailingModel(failures=3)
    reply, _ = await run_with(model, hooked(), should_retry_model_error=never)
    assert reply.success is False
    assert model.calls == 1


async def test_on_model_error_text_recovers_the_turn() -> None:
    model = FailingModel(failures=10)
    reply, doc = await run_with(model, hooked(recovery="Sorry, try later."))
    assert (reply.success, reply.message) == (True, "Sorry, try later.")
    assert model.calls == 3
    assert doc.run_status == "running"
    assert memory(doc, "Hooked")[-1].content == "Sorry, try later."


async def test_flow_level_on_model_error_recovers_when_the_step_defers() -> None:
    async def recover(self: Flow, error: Exception) -> str | None:
        return f"flow recovered from {type(error).__name__}"

    reply, _ = await run_with(FailingModel(failures=10), hooked(), on_model_error=recover)
    assert reply.message == "flow recovered from ModelTransportError"


async def test_a_refusal_is_not_retried_and_fails_without_a_hook() -> None:
    model = FailingModel(failures=10, error=ModelBlockedError("unsafe request"))
    reply, doc = await run_with(model, hooked())
    assert reply.success is False
    assert reply.error_code == "model_blocked"
    assert reply.message == "unsafe request"
    assert model.calls == 1
    assert seen == [("blocked", "unsafe request")]
    assert doc.run_status == "aborted"


async def test_on_model_blocked_can_recover_a_refusal() -> None:
    model = FailingModel(failures=10, error=ModelBlockedError("unsafe request"))
    reply, _ = await run_with(model, hooked(blocked_recovery="I cannot help with that."))
    assert (reply.success, reply.message) == (True, "I cannot help with that.")
    assert model.calls == 1


async def test_a_per_attempt_timeout_counts_as_a_transport_failure() -> None:
    model = SlowModel(delay=1.0, slow_calls=1)
    reply, _ = await run_with(model, hooked(timeout=0.05))
    assert (reply.success, reply.message) == (True, "slow answer")
    assert model.calls == 2
    assert seen == [("retry?", "TimeoutError", 1)]
    # The timeout cut the slow attempt short; it did not wait for its answer.
    assert model.outcomes == ["cancelled", "answered"]


async def test_timeouts_on_every_attempt_fail_with_reason_transport() -> None:
    model = SlowModel(delay=1.0)
    reply, _ = await run_with(model, hooked(timeout=0.05))
    assert reply.success is False
    assert reply.message.startswith("LLM call failed. Reason:transport.")
    assert model.calls == 3
    assert model.outcomes == ["cancelled"] * 3  # every attempt was stopped, none waited out


# -- token accounting ------------------------------------------------------------------------


class Counter(Step):
    def check_response(self, response: ModelResponse) -> bool:
        return response.content == "REJECT"

    @tool
    def again(self) -> Transition:
        """Call the model again."""
        return stay()


async def test_session_tokens_sum_every_attempt_across_turns() -> None:
    engine, _ = make_engine(flow_of(Counter), rules=[
        Rule(last="^one$", text="", usage=usage(5), times=1),
        Rule(last=f"^{BLANK_RESPONSE_NUDGE}$", text="REJECT", usage=usage(4), times=1),
        Rule(last=f"^{BLANK_RESPONSE_NUDGE}$", text="turn one", usage=usage(6), times=1),
        Rule(last="^two$", tools=[("again", {})], usage=usage(3), times=1),
        Rule(last_type="tool", text="turn two", usage=usage(2)),
    ])
    first = await engine.run("CounterFlow", "one")
    second = await engine.run("CounterFlow", "two", first.session_id)
    assert (first.message, second.message) == ("turn one", "turn two")
    tokens = (await load(engine, second.session_id)).tokens
    assert tokens.total_tokens == 5 + 4 + 6 + 3 + 2
    assert tokens.input_tokens == 5
    assert tokens.output_tokens == 20 - 5


# -- model selection -------------------------------------------------------------------------


class ParamsFlow(ScriptedFlow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(
            provider="scripted", name="test-model", retry_attempts=4,
            params={"temperature": 0.1, "nested": {"a": 1, "b": 2}, "api_key": "sk-flow"},
        )

    def define_steps(self) -> list[Step]:
        return [
            Merged(self).use_model({
                "provider": "scripted", "name": "test-model",
                "params": {"nested": {"b": 3}, "top_p": 0.5, "password": "hunter2"},
            }),
            Alone(self).use_model({"provider": "scripted", "name": "other-model",
                                   "params": {"top_p": 0.9}}),
            Inherits(self),
        ]


class Merged(Step):
    @tool
    def to_alone(self) -> type[Step]:
        """Go on."""
        return Alone


class Alone(Step):
    @tool
    def to_inherits(self) -> type[Step]:
        """Go on."""
        return Inherits


class Inherits(Step):
    pass


async def test_step_model_override_merges_same_model_params_and_stands_alone_otherwise() -> None:
    engine, model = make_engine(ParamsFlow, rules=[
        Rule(step="Merged", tools=[("to_alone", {})]),
        Rule(step="Alone", tools=[("to_inherits", {})]),
        Rule(step="Inherits", text="done"),
    ])
    reply = await engine.run("ParamsFlow", "hi")
    assert reply.success, reply.message
    merged, alone, inherits = (r.selection for r in model.requests)
    assert merged.name == "test-model"
    assert merged.params == {
        "temperature": 0.1, "nested": {"a": 1, "b": 3}, "api_key": "sk-flow",
        "top_p": 0.5, "password": "hunter2",
    }
    assert merged.retry_attempts == 4
    assert (alone.name, alone.params, alone.retry_attempts) == ("other-model", {"top_p": 0.9}, None)
    assert inherits.params["nested"] == {"a": 1, "b": 2}


async def test_persisted_selections_are_stripped_of_secrets_and_only_for_overrides() -> None:
    engine, _ = make_engine(ParamsFlow, rules=[Rule(text="done")])
    reply = await engine.run("ParamsFlow", "hi")
    doc = await load(engine, reply.session_id)
    assert doc.flow.model["params"] == {"temperature": 0.1, "nested": {"a": 1, "b": 2}}
    merged = doc.step_record("Merged")
    assert merged is not None and merged.model is not None
    assert merged.model["params"] == {"nested": {"b": 3}, "top_p": 0.5}
    assert doc.step_record("Inherits") is None


# -- limits and the scripted model -----------------------------------------------------------


class Looper(Step):
    @tool
    def again(self) -> Transition:
        """Loop."""
        return stay()


async def test_too_many_model_calls_in_one_turn_fail_with_turn_limit() -> None:
    flow = flow_of(Looper, max_model_calls_per_turn=3)
    engine, model = make_engine(flow, rules=[Rule(tools=[("again", {})])])
    reply = await engine.run(flow.id, "hi")
    assert reply.success is False
    assert reply.error_code == "turn_limit"
    assert reply.message == (
        "Turn exceeded 3 model calls in flow 'LooperFlow'; a transition probably loops."
    )
    assert len(model.requests) == 3


async def test_the_model_call_budget_is_per_turn() -> None:
    flow = flow_of(Looper, max_model_calls_per_turn=2)
    engine, _ = make_engine(flow, rules=[
        Rule(last="^(one|two)$", tools=[("again", {})]), Rule(text="ok"),
    ])
    first = await engine.run(flow.id, "one")
    second = await engine.run(flow.id, "two", first.session_id)
    assert (first.success, second.success) == (True, True)


async def test_an_unmatched_scripted_request_fails_with_a_description_of_it() -> None:
    engine, model = make_engine(flow_of(Asker), rules=[Rule(last="^expected$", text="ok")])
    reply = await engine.run("AskerFlow", "something unexpected")
    assert reply.success is False
    assert reply.error_code == "scripted_model_unmatched"
    assert "flow 'AskerFlow', step 'Asker', model 'test-model'" in reply.message
    assert "Last message: human: 'something unexpected'" in reply.message
    assert "System prompt starts: 'Answer briefly.'" in reply.message
    assert model.requests == []


async def test_a_rule_with_times_one_answers_only_once() -> None:
    engine, _ = make_engine(flow_of(Asker), rules=[Rule(text="only once", times=1)])
    first = await engine.run("AskerFlow", "hi")
    second = await engine.run("AskerFlow", "hi again", first.session_id)
    assert (first.success, first.message) == (True, "only once")
    assert second.success is False
    assert second.error_code == "scripted_model_unmatched"


class Verdict(BaseModel):
    label: str
    score: int


class Structured(Step):
    def output_schema(self) -> type[BaseModel] | None:
        return Verdict

    async def on_response(self, result: Any) -> str:
        assert isinstance(result, Verdict)
        return f"{result.label}={result.score}"


async def test_structured_output_sends_the_schema_and_parses_the_answer() -> None:
    engine, model = make_engine(flow_of(Structured), rules=[
        Rule(text='{"label": "good", "score": 9}')
    ])
    reply = await engine.run("StructuredFlow", "rate")
    assert reply.message == "good=9"
    assert model.requests[0].output_schema == Verdict.model_json_schema()


class StructuredWithRecovery(Structured):
    async def on_model_error(self, error: Exception) -> str | None:
        return "Sorry, rating is unavailable."


async def test_recovery_text_of_a_structured_output_step_becomes_the_reply() -> None:
    reply, _ = await run_with(FailingModel(failures=10), StructuredWithRecovery)
    assert (reply.success, reply.message) == (True, "Sorry, rating is unavailable.")


class RoutingOnResponse(Hooked):
    recovery = "Sorry, try later."

    async def on_response(self, result: Any) -> Any:
        raise AssertionError("a recovery reply must not reach on_response")


async def test_recovery_text_ends_the_turn_without_on_response() -> None:
    reply, doc = await run_with(FailingModel(failures=10), RoutingOnResponse)
    assert (reply.success, reply.message) == (True, "Sorry, try later.")
    assert memory(doc, "RoutingOnResponse")[-1].content == "Sorry, try later."


async def test_other_model_errors_skip_retries_and_go_to_on_model_error() -> None:
    model = FailingModel(failures=10, error=ModelError("provider said 400"))
    reply, _ = await run_with(model, hooked(recovery="handled"))
    assert (reply.success, reply.message) == (True, "handled")
    assert model.calls == 1
    assert seen == [("error", "ModelError")]

    failing = FailingModel(failures=10, error=ModelError("provider said 400"))
    reply, _ = await run_with(failing, hooked())
    assert (reply.success, reply.error_code, reply.message) == (
        False, "model_error", "provider said 400"
    )
    assert failing.calls == 1
