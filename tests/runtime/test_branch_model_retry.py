"""A model attempt that fails inside a branch is retried and recovered, as at top level.

A regression found recording the ``checkpoints`` golden: in a branch, the model call runs
inside an anyio task group (to stop it when the branch's cancel token fires), and a task
group raises what its body raised wrapped in an ``ExceptionGroup``, so the retry loop's
``except`` clauses never matched there: the first transport error ended the branch,
rejected with code ``internal``, and ``on_model_blocked`` recovery was skipped.
"""

from __future__ import annotations

import pytest

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelBlockedError,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ModelTransportError,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    Step,
)
from runtime import events as ev
from tests.runtime.helpers import SlowModel

pytestmark = pytest.mark.anyio

class Echo(Step):
    """One model call."""


def fork_of(step: type[Step]) -> type[LogicStep]:
    """A logic step that runs ``step`` as the one branch of a barrier and replies with the
    branch's status and output (or error)."""

    async def run_logic(self: LogicStep) -> Routable:
        batch = await self.run_steps([RunStepRequest(step, user_message="hello")])
        (branch,) = batch.branches
        outcome = branch.output if branch.error is None else repr(branch.error)
        return f"{branch.status}: {outcome}"

    return type(f"{step.__name__}Fork", (LogicStep,), {"run_logic": run_logic})


Fork = fork_of(Echo)


class TopFlow(Flow):
    retry_delay = 0.0

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="m")

    def define_steps(self) -> list[Step]:
        return [Echo(self)]


class BranchFlow(TopFlow):
    def define_steps(self) -> list[Step]:
        return [Fork(self), Echo(self)]


def flaky() -> ScriptedModel:
    def reset(request: ModelRequest) -> ModelResponse:
        raise ModelTransportError("connection reset by peer")

    return ScriptedModel([Rule(times=1, respond=reset), Rule(text="echo")])


async def _retries(flow: type[Flow]) -> tuple[str, list[tuple[int, bool, str]]]:
    sink = ev.MemorySink()
    engine = FlowEngine(flows=[flow], providers={"scripted": flaky()}, sinks=[sink])
    reply = await engine.run(flow.id, "hello")
    return reply.message, [(e.attempt, e.retrying, e.error.code) for e in sink.events
                           if isinstance(e, ev.ModelFailed)]


async def test_a_transport_error_at_top_level_is_retried() -> None:
    assert await _retries(TopFlow) == ("echo", [(1, True, "model_transport")])


async def test_a_transport_error_in_a_branch_is_retried() -> None:
    assert await _retries(BranchFlow) == ("fulfilled: echo", [(1, True, "model_transport")])


class Guarded(Step):
    """One model call, recovering from a refusal with a reply of its own."""

    async def on_model_blocked(self, error: Exception) -> str | None:
        return f"recovered from: {error}"


GuardedFork = fork_of(Guarded)


class GuardedFlow(TopFlow):
    def define_steps(self) -> list[Step]:
        return [GuardedFork(self), Guarded(self)]


async def test_a_refusal_in_a_branch_reaches_the_steps_recovery_hook() -> None:
    def refuse(request: ModelRequest) -> ModelResponse:
        raise ModelBlockedError("blocked by the provider's safety filter")

    engine = FlowEngine(flows=[GuardedFlow],
                        providers={"scripted": ScriptedModel([Rule(respond=refuse)])})
    reply = await engine.run(GuardedFlow.id, "hello")
    assert reply.message == "fulfilled: recovered from: blocked by the provider's safety filter"


class Hasty(Step):
    """One model call, with a per-attempt timeout."""

    def call_timeout(self) -> float | None:
        return 0.05


HastyFork = fork_of(Hasty)


class HastyFlow(TopFlow):
    def define_steps(self) -> list[Step]:
        return [HastyFork(self), Hasty(self)]


async def test_a_timed_out_attempt_in_a_branch_is_cut_short_and_retried() -> None:
    model = SlowModel(delay=30.0, slow_calls=1)
    sink = ev.MemorySink()
    engine = FlowEngine(flows=[HastyFlow], providers={"scripted": model}, sinks=[sink])
    reply = await engine.run(HastyFlow.id, "hello")
    assert reply.message == "fulfilled: slow answer"
    assert model.outcomes == ["cancelled", "answered"]  # stopped, not waited out
    [failed] = [e for e in sink.events if isinstance(e, ev.ModelFailed)]
    assert (failed.attempt, failed.retrying, failed.error.type) == (1, True, "TimeoutError")
    assert "took more than 0.05s" in failed.error.message
