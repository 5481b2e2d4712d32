"""Helpers of the barrier tests: run a coordinator body in one turn, build branch steps.

A test writes the code of its top-level step as an ``async def body(coord)`` and its
branches as small functions; :func:`run_body` runs one turn of a flow whose current step
is a :class:`Coordinator` logic step calling ``body``, and returns what the body returned
(or raised), the reply and the saved document. Branch step classes are built per test by
:func:`branch_step`, so every test (and every backend) gets fresh classes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
from pydantic import BaseModel

from runtime import (
    Channel,
    Flow,
    FlowEngine,
    LogicStep,
    ModelRequest,
    ModelResponse,
    ParallelConfig,
    Routable,
    RunReply,
    ScriptedModel,
    SessionDocument,
    SessionStore,
    Step,
)
from tests.runtime.helpers import RecordingStore, ScriptedFlow, load, make_engine

Body = Callable[[Step], Awaitable[Any]]
BranchFn = Callable[[Step, str | None], Awaitable[Any]]
StepEntry = type[Step] | Callable[[Flow], Step]

U = 0.02
"""The time unit of the ordering tests (seconds)."""


@dataclass
class Captured:
    """What the coordinator's body returned or raised."""

    value: Any = None
    error: BaseException | None = None


class Coordinator(LogicStep):
    """The top-level step: runs the flow's body and replies ``done`` (or ``raised``)."""

    async def run_logic(self) -> Routable:
        captured: Captured = self.flow.captured  # type: ignore[attr-defined]
        body: Body = self.flow.body  # type: ignore[attr-defined]
        try:
            captured.value = await body(self)
        except Exception as exc:  # the test asserts on it; the turn still saves normally
            captured.error = exc
            return "raised"
        return "done"


@dataclass
class Outcome:
    """One turn of a barrier flow: the body's result, the reply and the saved document."""

    value: Any
    error: BaseException | None
    reply: RunReply
    doc: SessionDocument
    engine: FlowEngine
    model: ScriptedModel
    store: SessionStore

    def state(self, step: str) -> dict[str, Any]:
        """The saved state of ``step`` without the framework's ``_saveOn`` stamp."""
        record = self.doc.step_record(step)
        return {} if record is None else {
            k: v for k, v in record.state.items() if k != "_saveOn"
        }

    def raised(self, kind: type[BaseException]) -> Any:
        """The body's exception, asserted to be a ``kind``."""
        assert isinstance(self.error, kind), f"expected {kind.__name__}, got {self.error!r}"
        return self.error


@dataclass
class BarrierFlowSpec:
    """Everything :func:`make_barrier_flow` needs."""

    body: Body
    steps: Sequence[StepEntry]
    config: ParallelConfig | None = None
    captured: Captured = field(default_factory=Captured)


def make_barrier_flow(spec: BarrierFlowSpec) -> type[Flow]:
    """A flow class with :class:`Coordinator` first, then ``spec.steps``."""

    class BarrierFlow(ScriptedFlow):
        body: ClassVar[Body] = staticmethod(spec.body)  # type: ignore[assignment]
        captured: ClassVar[Captured] = spec.captured

        def define_steps(self) -> list[Step | type[Step]]:
            entries: list[Step | type[Step]] = [Coordinator]
            for entry in spec.steps:
                is_class = isinstance(entry, type) and issubclass(entry, Step)
                entries.append(entry if is_class else entry(self))  # type: ignore[arg-type]
            return entries

        def config_parallel_execution(self) -> ParallelConfig:
            return spec.config or ParallelConfig()

    return BarrierFlow


async def run_body(
    body: Body,
    steps: Sequence[StepEntry] = (),
    *,
    rules: Sequence[Any] = (),
    config: ParallelConfig | None = None,
    store: SessionStore | None = None,
    model: Any = None,
    context: dict[str, Any] | None = None,
    engine: FlowEngine | None = None,
    session_id: str | None = None,
) -> Outcome:
    """Run one turn whose top-level step awaits ``body(coordinator)``."""
    spec = BarrierFlowSpec(body, steps, config)
    flow = make_barrier_flow(spec)
    if engine is None:
        engine, scripted = make_engine(flow, rules=rules, store=store or RecordingStore(),
                                       model=model)
    else:
        engine.register_flow(flow, replace=True)
        scripted = ScriptedModel(list(rules))
    reply = await engine.run(flow.id, "go", session_id, context)
    assert reply.success, reply.message
    doc = await load(engine, reply.session_id)
    used = model if isinstance(model, ScriptedModel) else scripted
    return Outcome(spec.captured.value, spec.captured.error, reply, doc, engine, used,
                   engine.store)


def branch_step(
    name: str,
    fn: BranchFn | None = None,
    *,
    channels: Mapping[str, Channel] | None = None,
    params_schema: type[BaseModel] | None = None,
    base: type[Step] = Step,
    attrs: Mapping[str, Any] | None = None,
) -> type[Step]:
    """A step class named ``name`` whose ``run()`` (the branch output) is ``fn``.

    Without ``fn`` the class keeps ``base.run`` (the model/tool loop for a plain step).
    """
    namespace: dict[str, Any] = dict(attrs or {})
    if fn is not None:
        async def run(self: Step, user_message: str | None = None) -> Any:
            return await fn(self, user_message)

        namespace["run"] = run
    if channels is not None:
        declared = dict(channels)
        namespace["parallel_state_channels"] = lambda self: dict(declared)
    if params_schema is not None:
        namespace["parallel_params_schema"] = lambda self: params_schema
    return type(name, (base,), namespace)


def returning(value: Any) -> BranchFn:
    """A branch body that returns ``value``."""

    async def fn(step: Step, message: str | None) -> Any:
        return value

    return fn


def saving(data: dict[str, Any], output: Any = None) -> BranchFn:
    """A branch body that saves ``data`` on its own step and returns ``output``."""

    async def fn(step: Step, message: str | None) -> Any:
        step.save_state(data)
        return output

    return fn


def failing(message: str, data: dict[str, Any] | None = None) -> BranchFn:
    """A branch body that saves ``data`` (if any), then raises ``ValueError(message)``."""

    async def fn(step: Step, message_: str | None) -> Any:
        if data:
            step.save_state(data)
        raise ValueError(message)

    return fn


def swallowing_once(entered: anyio.Event, swallowed: list[str]) -> BranchFn:
    """A branch body that sets ``entered``, then swallows its first cancellation (as a
    library retrying on it might: noted in ``swallowed``) and waits again: only a second
    cancellation ends it."""

    async def fn(step: Step, message: str | None) -> Any:
        entered.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            swallowed.append("once")
        await anyio.sleep_forever()

    return fn


def user_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` without framework fields (``_saveOn``, ``_transient``)."""
    return {k: v for k, v in state.items() if not k.startswith("_")}


async def wait(event: anyio.Event, timeout: float = 5.0) -> None:
    """Wait for ``event``; fail loudly instead of hanging when ordering is broken."""
    with anyio.fail_after(timeout):
        await event.wait()


class Meeting:
    """A point ``size`` branches wait at until all of them are there: work that is to
    overlap overlaps, whatever the machine's speed."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.arrived = 0
        self.complete = anyio.Event()

    async def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.size:
            self.complete.set()
        await wait(self.complete)


class InFlightModel(ScriptedModel):
    """A scripted model that records how many calls were in flight at once."""

    def __init__(self, rules: Sequence[Any] = ()) -> None:
        super().__init__(rules)
        self.in_flight = 0
        self.peak = 0

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().invoke(request)
        finally:
            self.in_flight -= 1


class Chain:
    """Forces a completion order: each label finishes only after the one before it.

    ``await chain.turn(label)`` waits until the label listed just before ``label`` in
    ``finish_order`` is :meth:`done`; the first label does not wait.
    """

    def __init__(self, finish_order: Sequence[str]) -> None:
        self.order = list(finish_order)
        self.events = {label: anyio.Event() for label in self.order}
        self.finished: list[str] = []

    async def turn(self, label: str) -> None:
        position = self.order.index(label)
        if position:
            await wait(self.events[self.order[position - 1]])

    def done(self, label: str) -> None:
        self.finished.append(label)
        self.events[label].set()
