"""Flows: a registry of steps, the durable cursor and the session of one turn.

A :class:`Flow` instance lives for exactly one turn: the engine constructs it, binds it to
a session document (:meth:`Flow.bind_session`), runs the current step, and saves. Nothing
survives the turn but the document.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from . import events as ev
from .channels import Channel
from .errors import (
    ExecutionFrameError,
    FlowDefinitionError,
    ParallelLimitError,
    ParallelOutputError,
    ParallelReducerError,
    StateValueError,
    TurnLimitError,
)
from .events import EventBus, safe_value
from .jsonutil import deep_merge, get_path, json_copy
from .messages import Message, now_iso
from .models import ModelSelection, TokenUsage
from .parallel import ParallelConfig
from .scope import FrozenView, Scope, View, current_scope, freeze_scope
from .session import (
    SESSION_DOC_VERSION,
    FlowRecord,
    LogEntry,
    MemorySpace,
    RunStatus,
    SequenceEntry,
    SessionDocument,
    StepRecord,
)
from .step import Step
from .terminate import TerminateSessionStep
from .tools import ToolRegistry, ToolSpec, handlers_of
from .transitions import Transition, step_name_of

if TYPE_CHECKING:
    from .engine import FlowEngine

logger = logging.getLogger("picoflow")

# The stack of open child execution frames (run_step). A contextvar, so concurrent tasks
# each see their own stack.
_frames: ContextVar[tuple[Step, ...]] = ContextVar("picoflow_frames", default=())


class Flow:
    """Base class of every flow. Subclass it, implement :meth:`config_model` and
    :meth:`define_steps`, and register the class with a :class:`~runtime.FlowEngine`.
    """

    id: ClassVar[str] = "Flow"
    max_model_calls_per_turn: ClassVar[int] = 50
    """Guard against routing loops: more model calls than this in one turn fail it."""
    retry_delay: ClassVar[float] = 0.5
    """Seconds between model-call attempts."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" not in cls.__dict__:
            cls.id = cls.__name__

    def __init__(self) -> None:
        self.engine: FlowEngine | None = None
        self.bus: EventBus | None = None
        """Where this turn's events go; None when nothing listens."""
        self.doc: SessionDocument | None = None
        self.tools = ToolRegistry(self.id)
        self._context: dict[str, Any] = {}
        self._steps: dict[str, Step] = {}
        self._states: dict[str, dict[str, Any]] = {}
        self._memory: dict[str, list[Message]] = {}
        self._selection: ModelSelection | None = None
        self._model_calls = 0
        self._invocations = 0
        self._root_barriers = 0
        self._channels: dict[str, Mapping[str, Channel]] = {}
        self._model_limiter: anyio.CapacityLimiter | None = None

    # -- hooks ---------------------------------------------------------------------------

    def config_model(self) -> ModelSelection:
        """The flow's default model selection. Every flow with model steps overrides it."""
        raise FlowDefinitionError(f"Flow '{self.id}' must implement config_model().")

    def define_steps(self) -> Sequence[Step | type[Step]]:
        """The step registry: instances (``XStep(self).use_memory(...)``) or classes."""
        return [TerminateSessionStep(self).use_memory("temp")]

    def initial_step(self) -> type[Step] | str | None:
        """Entry step of a new session; default: the first registered step."""
        return None

    def define_tools(self) -> list[ToolSpec]:
        """Flow-level tool definitions shared by the steps."""
        return []

    async def init(self) -> None:
        """Called after the context is added, before the steps are collected."""

    async def on_restore_session_doc(self, doc: SessionDocument) -> SessionDocument | None:
        """Migrate a stored document before it is restored; None starts a new session."""
        return doc if doc.version == SESSION_DOC_VERSION else None

    def call_timeout(self) -> float | None:
        """Per-attempt model-call timeout in seconds; None means no timeout."""
        return None

    def config_parallel_execution(self) -> ParallelConfig:
        """Limits for run_steps(): depth, invocations per turn, grace, model-call quota."""
        return ParallelConfig()

    async def should_retry_model_error(self, error: Exception, attempt: int) -> bool | None:
        """Flow-level retry decision after the step's; None means the default (retry)."""
        return None

    async def on_model_error(self, error: Exception) -> str | None:
        """Flow-level recovery after the step's; return reply text or None."""
        return None

    async def on_model_blocked(self, error: Exception) -> str | None:
        """Flow-level recovery for refusals after the step's; return reply text or None."""
        return None

    # -- context -------------------------------------------------------------------------

    def get_context(self, path: str | None = None) -> Any:
        """A copy of the flow context, or the value at a dotted path (``config.x``)."""
        return copy.deepcopy(get_path(self._context, path))

    def add_context(self, data: dict[str, Any]) -> None:
        """Merge into the context. Only before the session is bound: it is frozen after."""
        scope = current_scope.get()
        if scope is not None:
            raise scope.violate("change the flow context")
        if self.doc is not None:
            raise FlowDefinitionError(
                "The flow context is frozen once the session is bound; set it in init()."
            )
        self._context = deep_merge(self._context, json_copy(data, "Flow context"))

    # -- events --------------------------------------------------------------------------

    @property
    def observed(self) -> bool:
        """Whether anything listens to this turn's events (skip building them if not)."""
        return self.bus is not None and bool(self.bus.sinks)

    def emit(self, cls: type[ev._Event], path: str | None = None, **fields: Any) -> None:
        """Emit one event; ``path`` defaults to the executing invocation's."""
        bus = self.bus
        if bus is None or not bus.sinks:
            return
        if path is None:
            scope = current_scope.get()
            path = scope.path_str if scope is not None else ""
        bus.emit_fields(cls, path, fields)

    # -- steps and the cursor ------------------------------------------------------------

    def collect_steps(self) -> None:
        """Instantiate and index the registry returned by :meth:`define_steps`."""
        for entry in self.define_steps():
            step = entry(self) if isinstance(entry, type) and issubclass(entry, Step) else entry
            if not isinstance(step, Step):
                raise FlowDefinitionError(
                    f"define_steps() of flow '{self.id}' returned {entry!r}, not a Step."
                )
            if step.flow is not self:
                raise FlowDefinitionError(f"Step '{step.name}' was built for another flow.")
            if step.name in self._steps:
                raise FlowDefinitionError(
                    f"Step '{step.name}' is registered twice in flow '{self.id}'."
                )
            self._steps[step.name] = step
        if not self._steps:
            raise FlowDefinitionError(f"Flow '{self.id}' defines no steps.")
        self.tools.add(self.define_tools())
        for step in self._steps.values():
            self.tools.add(step.define_tools())
            self.tools.add(h.spec for h in handlers_of(type(step)).values())
        for step in self._steps.values():
            self.exposed_tools(step)  # fail at bootstrap, not mid-turn, on unknown names

    @property
    def steps(self) -> dict[str, Step]:
        """Registered steps by name."""
        return dict(self._steps)

    def require_step(self, target: str | type[Step]) -> Step:
        """The registered step for a class or name."""
        name = step_name_of(target)
        try:
            return self._steps[name]
        except KeyError:
            raise FlowDefinitionError(
                f"Step '{name}' is not defined in flow '{self.id}'."
            ) from None

    def exposed_tools(self, step: Step) -> dict[str, ToolSpec]:
        """Tools the step offers its model: decorated handlers, then ``use_tools()``."""
        exposed = {
            name: self.tools.require(name)
            for name, handler in handlers_of(type(step)).items()
            if handler.expose
        }
        for name in step.use_tools():
            exposed.setdefault(name, self.tools.require(name))
        return exposed

    @property
    def current_step_name(self) -> str | None:
        """The durable cursor."""
        return self._doc().flow.current_step

    def require_current_step(self) -> Step:
        """The step under the cursor."""
        name = self.current_step_name
        if name is None:
            raise FlowDefinitionError(f"Flow '{self.id}' has no current step.")
        return self.require_step(name)

    def get_executing_step(self) -> Step | None:
        """The innermost execution frame's step, else the cursor's."""
        frames = _frames.get()
        if frames:
            return frames[-1]
        return self.require_current_step() if self.current_step_name else None

    def require_executing_step(self) -> Step:
        """Like :meth:`get_executing_step`, but never None."""
        step = self.get_executing_step()
        if step is None:
            raise FlowDefinitionError(f"Flow '{self.id}' has no executing step.")
        return step

    @property
    def nesting_level(self) -> int:
        """1 at top level; +1 per open child frame (the level recorded in ``sequence``)."""
        return len(_frames.get()) + 1

    async def goto(self, target: str | type[Step]) -> None:
        """Move the cursor: ``on_exit`` of the old step, trail entry, ``on_enter`` of the new.

        Raises:
            ExecutionFrameError: from inside a child execution frame.
        """
        step = self.require_step(target)
        scope = current_scope.get()
        if scope is not None:
            raise scope.violate(f"move the cursor (to '{step.name}')")
        if _frames.get():
            raise ExecutionFrameError(
                f"Cannot goto '{step.name}' from a child execution frame. "
                "Return a result to the owning step instead."
            )
        if step.name == self.current_step_name:
            return
        current = self.require_current_step() if self.current_step_name else None
        if current is not None:
            await current.on_exit()
            self.emit(ev.StepExited, step=current.name)
        flow = self._doc().flow
        flow.sequence.append(SequenceEntry(level=1, step_name=step.name))
        self.emit(ev.CursorMoved, from_step=flow.current_step, to_step=step.name)
        flow.current_step = step.name
        self.emit(ev.StepEntered, step=step.name, level=1, how="goto")
        await step.on_enter()

    async def run_child(
        self, owner: Step, target: type[Step] | str, user_message: str | None
    ) -> str:
        """Run ``target`` as a sequential child of ``owner`` (see :meth:`Step.run_step`)."""
        if current_scope.get() is not None:
            # Inside a branch a sequential child is a one-child atomic barrier.
            from ._barrier import run_steps
            from .parallel import RunStepRequest

            batch = await run_steps(owner, [RunStepRequest(target, user_message=user_message)],
                                    failure_policy="atomic")
            (only,) = batch.branches
            if only.error is not None:
                raise only.error
            return only.output  # type: ignore[no-any-return]
        child = self.require_step(target)
        level = self.nesting_level + 1
        token = _frames.set((*_frames.get(), child))
        try:
            self._doc().flow.sequence.append(SequenceEntry(level=level, step_name=child.name))
            self.emit(ev.StepEntered, step=child.name, level=level, how="child")
            await child.on_enter()
            try:
                return await child.run(user_message)
            finally:
                await child.on_exit()
                self.emit(ev.StepExited, step=child.name)
        finally:
            _frames.reset(token)

    # -- state ---------------------------------------------------------------------------

    def live_view(self) -> View:
        """The canonical state as it is at each read (a root join validates against it)."""
        return FrozenView(states=self._states, memory=self._memory)

    def fork_view(self) -> View:
        """The executing code's view, fixed now: what a new barrier's branches read."""
        scope = current_scope.get()
        if scope is not None:
            return freeze_scope(scope)
        return FrozenView(states=dict(self._states),
                          memory={ns: list(h) for ns, h in self._memory.items()})

    def peek_step_state(self, name: str) -> Mapping[str, Any]:
        """A step's state as the executing code sees it. Shared: never mutate it."""
        scope = current_scope.get()
        if scope is not None:
            return scope.state_of(name)
        return self._states.get(name, {})

    def read_step_state(self, name: str) -> dict[str, Any]:
        """A private copy of a step's state."""
        return copy.deepcopy(dict(self.peek_step_state(name)))

    def write_step_fields(
        self, name: str, updates: Mapping[str, Any], removals: tuple[str, ...] = ()
    ) -> None:
        """Replace (or remove) top-level fields of a step's state.

        In a parallel branch this records drafts (own step only); elsewhere it writes the
        turn's canonical state and stamps ``_saveOn``.
        """
        self.require_step(name)
        scope = current_scope.get()
        try:
            values = json_copy(dict(updates), f"State of step '{name}'")
        except StateValueError as exc:
            if scope is None:
                raise
            error = ParallelOutputError(exc.message, extra={"provenance": [
                {"path": scope.path_str, "key": scope.key, "step": name, "kind": "state"}]})
            scope.violations.append(error)
            raise error from None
        if scope is not None:
            scope.write(name, values, removals)
            if self.observed and not scope.closed:
                self._emit_writes(name, values, removals, scope.base.state_of(name), True)
            return
        before = self._states.get(name, {})
        state = {k: v for k, v in before.items() if k not in removals}
        state.update(values)
        if set(values) - {"_transient"} or removals:  # transient scratch is not a save
            state["_saveOn"] = now_iso()
        self._states[name] = state
        if self.observed:
            self._emit_writes(name, values, removals, before, False)

    def _emit_writes(
        self, name: str, values: Mapping[str, Any], removals: tuple[str, ...],
        base: Mapping[str, Any], draft: bool,
    ) -> None:
        for field, value in values.items():
            self.emit(ev.StateReplaced, step=name, field=field, value=safe_value(value),
                      base=safe_value(base.get(field)), draft=draft)
        for field in removals:
            self.emit(ev.StateRemoved, step=name, field=field,
                      base=safe_value(base.get(field)), draft=draft)

    def contribute_step_state(self, name: str, field: str, value: Any) -> None:
        """Contribute to a declared channel (in a branch: recorded for the join)."""
        channels = self.channels_of(name)
        scope = current_scope.get()
        value = json_copy(value, f"Contribution to {name}.{field}")
        if scope is not None:
            scope.contribute(name, field, value)
            if self.observed and not scope.closed:
                try:
                    result = safe_value(scope.value_of(name, field))
                except ParallelReducerError as exc:  # recorded in the scope: the join
                    result = {"reducer_failed": str(exc)}  # reports it, as unobserved
                self.emit(ev.StateContributed, step=name, field=field, value=safe_value(value),
                          order=scope._seq, draft=True, result=result)
            return
        if field not in channels:
            raise FlowDefinitionError(
                f"Step '{name}' declares no channel '{field}' in parallel_state_channels()."
            )
        from .channels import ContributionMeta

        channel = channels[field]
        state = self._states.get(name, {})
        reduced = channel.reduce(channel.initial(field in state, state.get(field)),
                                 [(ContributionMeta((), name, 1), value)])
        self.write_step_fields(name, {field: reduced})

    def channels_of(self, name: str) -> Mapping[str, Channel]:
        """The reduced channels a registered step declares (cached per turn)."""
        if name not in self._channels:
            declared = self.require_step(name).parallel_state_channels()
            bad = [k for k, v in declared.items() if not isinstance(v, Channel)]
            if bad:
                raise FlowDefinitionError(
                    f"parallel_state_channels() of step '{name}' must map fields to channels "
                    f"(StepChannels.*); {bad} are not."
                )
            self._channels[name] = dict(declared)
        return self._channels[name]

    def apply_publication(
        self, values: Mapping[tuple[str, str], tuple[Any, bool]]
    ) -> Callable[[], None]:
        """Apply a root join's field values; returns a function that undoes it."""
        before = {step: self._states.get(step) for step, _ in values}
        stamp = now_iso()
        for (step, field), (value, deleted) in values.items():
            state = dict(self._states.get(step, {}))
            if deleted:
                state.pop(field, None)
            else:
                state[field] = value
            state["_saveOn"] = stamp
            self._states[step] = state

        def undo() -> None:
            for step, state in before.items():
                if state is None:
                    self._states.pop(step, None)
                else:
                    self._states[step] = state

        return undo

    def parallel_config(self) -> ParallelConfig:
        """The flow's validated parallel limits."""
        return ParallelConfig.model_validate(self.config_parallel_execution())

    def count_invocations(self, count: int, limit: int) -> None:
        """Reserve ``count`` branch invocations of this turn's budget."""
        if self._invocations + count > limit:
            raise ParallelLimitError(
                f"Forking {count} more branches would exceed the flow's limit of {limit} "
                f"invocations per turn ({self._invocations} used)."
            )
        self._invocations += count

    def next_barrier_ordinal(self, parent: Scope | None) -> int:
        """The ordinal of a new barrier among its caller's barriers (this turn)."""
        if parent is None:
            self._root_barriers += 1
            return self._root_barriers - 1
        parent.barriers += 1
        return parent.barriers - 1

    async def run_branch(self, registered: Step, scope: Scope, message: str | None) -> Any:
        """Run one branch: a fresh step instance in its own scope and execution frame."""
        worker = type(registered)(self)
        worker._namespace, worker._model = registered._namespace, registered._model
        scope_token = current_scope.set(scope)
        frame_token = _frames.set((*_frames.get(), worker))
        try:
            level = len(_frames.get()) + 1
            self._doc().flow.sequence.append(  # no validation: hot path of every branch
                SequenceEntry.model_construct(level=level, step_name=worker.name)
            )
            # No step.entered/exited for a branch: branch.started/fulfilled/rejected say it.
            await worker.on_enter()
            if worker.is_logic() and type(worker).run is Step.run:
                # A logic branch's output is what run_logic() returns; it cannot route.
                output = await worker.run_logic()  # type: ignore[attr-defined]
                if isinstance(output, Transition) or (
                    isinstance(output, type) and issubclass(output, Step)
                ):
                    raise scope.violate("route from run_logic() (return the output instead)")
            else:
                output = await worker.run(message)
            if scope.direct is not None:
                output = scope.direct.value
            await worker.on_exit()
            return output
        finally:
            _frames.reset(frame_token)
            current_scope.reset(scope_token)

    @asynccontextmanager
    async def model_call_slot(self) -> AsyncIterator[None]:
        """Hold one of the turn's model-call slots (the provider quota), if limited."""
        limit = self.parallel_config().model_call_limit
        if limit is None:
            yield
            return
        if self._model_limiter is None:
            self._model_limiter = anyio.CapacityLimiter(limit)
        async with self._model_limiter:
            yield

    def get_step_state(self, step: type[Step] | str, key: str | None = None) -> Any:
        """Another step's state (a copy), or the value at ``key``."""
        return self.require_step(step).get_state(key)

    def save_step_state(self, step: type[Step] | str, data: dict[str, Any]) -> None:
        """Save into another step's state with :meth:`Step.save_state` semantics."""
        self.require_step(step).save_state(data)

    def save_transient_step_state(self, step: type[Step] | str, data: dict[str, Any]) -> None:
        """Merge this-turn-only values into another step's transient state."""
        self.require_step(step).save_transient_state(data)

    def get_memory(self, namespace: str) -> list[Message]:
        """The live history of a namespace (created empty on first use).

        In a parallel branch: a private clone of the caller's, discarded at the end.
        """
        scope = current_scope.get()
        if scope is not None:
            return scope.memory_of(namespace)
        return self._memory.setdefault(namespace, [])

    # -- session -------------------------------------------------------------------------

    def _doc(self) -> SessionDocument:
        if self.doc is None:
            raise FlowDefinitionError(f"Flow '{self.id}' is not bound to a session yet.")
        return self.doc

    @property
    def session_id(self) -> str:
        """Id of the bound session."""
        return self._doc().id

    @property
    def run_status(self) -> RunStatus:
        """``running``, ``completed`` or ``aborted``."""
        return self._doc().run_status

    @property
    def sequence(self) -> list[SequenceEntry]:
        """The execution trail (a copy)."""
        return list(self._doc().flow.sequence)

    @property
    def tokens(self) -> TokenUsage:
        """Token totals of the session, attempted work included."""
        return self._doc().tokens

    def mark_completed(self) -> None:
        """Mark the session completed; the next message starts a new session."""
        scope = current_scope.get()
        if scope is not None:
            raise scope.violate("complete the session")
        self._doc().run_status = "completed"

    def tally_tokens(self, usage: TokenUsage) -> None:
        """Add one model attempt's usage to the session totals (attempted work counts,
        even when a branch's state is later discarded) and to enclosing barrier budgets."""
        self._doc().tokens.add(usage)
        scope = current_scope.get()
        if scope is not None:
            for budget in scope.usages:
                budget.tokens += usage.total_tokens
                if budget.budget is not None and budget.tokens > budget.budget \
                        and not budget.exhausted:
                    for callback in list(budget.on_exhausted):
                        callback()

    def warn(self, message: str, **extra: Any) -> None:
        """Append a warning to the session log."""
        self._doc().warn.append(
            LogEntry.model_validate({**extra, "level": "warn", "message": message})
        )

    def log(self, message: str, **extra: Any) -> None:
        """Append an informational line to the session log."""
        self._doc().log.append(
            LogEntry.model_validate({**extra, "level": "log", "message": message})
        )

    def require_engine(self) -> FlowEngine:
        """The engine running this turn."""
        if self.engine is None:
            raise FlowDefinitionError(f"Flow '{self.id}' is not bound to an engine.")
        return self.engine

    def count_model_call(self) -> None:
        """Count one model call of this turn; too many means a routing loop."""
        self._model_calls += 1
        if self._model_calls > self.max_model_calls_per_turn:
            raise TurnLimitError(
                f"Turn exceeded {self.max_model_calls_per_turn} model calls in flow "
                f"'{self.id}'; a transition probably loops.",
                extra={"calls": self._model_calls},
            )

    def model_selection(self) -> ModelSelection:
        """The flow's resolved default selection."""
        if self._selection is None:
            self._selection = ModelSelection.model_validate(self.config_model())
        return self._selection

    def new_document(self, session_id: str | None = None) -> SessionDocument:
        """Bind a fresh session: empty state, cursor on the initial step, trail started."""
        initial = self.initial_step()
        first = self.require_step(initial) if initial else next(iter(self._steps.values()))
        record = FlowRecord(name=self.id, current_step=first.name,
                            sequence=[SequenceEntry(level=1, step_name=first.name)])
        doc = SessionDocument(flow=record) if session_id is None else SessionDocument(
            id=session_id, flow=record
        )
        doc.flow.context = json_copy(self._context)
        self.doc = doc
        if self.bus is not None:
            self.bus.session_id = doc.id
        return doc

    def restore_document(self, doc: SessionDocument) -> None:
        """Bind a stored session: state, memory, context and cursor come from ``doc``."""
        self.doc = doc
        if self.bus is not None:
            self.bus.session_id = doc.id
        self._context = copy.deepcopy(doc.flow.context)
        self._memory = {ns: list(space.messages) for ns, space in doc.flow.memory.items()}
        for record in doc.flow.steps:
            if record.name in self._steps:
                self._states[record.name] = copy.deepcopy(record.state)
        if doc.flow.current_step not in self._steps:
            raise FlowDefinitionError(
                f"Session '{doc.id}' points at step '{doc.flow.current_step}', which flow "
                f"'{self.id}' does not define."
            )

    def emit_loaded(self, new_session: bool) -> None:
        """Emit the state this turn starts from (the fold's starting point)."""
        if not self.observed:
            return
        doc = self._doc()
        self.emit(ev.SessionLoaded, path="", new_session=new_session, revision=doc.revision,
                  current_step=doc.flow.current_step,
                  steps={step: {name: safe_value(value) for name, value in fields.items()}
                         for step, fields in self._states.items()},
                  context=safe_value(self._context), tokens=doc.tokens.model_dump())

    def sync_document(self) -> SessionDocument:
        """Write the turn's live state into the bound document and return it."""
        doc = self._doc()
        doc.version = SESSION_DOC_VERSION
        doc.flow.model = self.model_selection().public()
        doc.flow.context = copy.deepcopy(self._context)
        doc.flow.memory = {
            ns: MemorySpace(messages=list(history),
                            summary=doc.flow.memory[ns].summary if ns in doc.flow.memory else None)
            for ns, history in self._memory.items()
        }
        doc.flow.steps = [
            StepRecord(
                name=name,
                state={k: v for k, v in self._states.get(name, {}).items() if k != "_transient"},
                model=step.model_override.public() if step.model_override else None,
            )
            for name, step in self._steps.items()
            if name in self._states or step.model_override
        ]
        doc.save_on = now_iso()
        return doc

    async def save_session(self, reason: str = "crossing") -> None:
        """Compare-and-swap save of the session; nested children never call this."""
        scope = current_scope.get()
        if scope is not None:
            raise scope.violate("save the session")
        if _frames.get():
            raise ExecutionFrameError("A child execution frame cannot save the session.")
        await self.checkpoint_session(reason)

    async def checkpoint_session(self, reason: str = "checkpoint") -> int:
        """Save now (also the root-join checkpoint); returns the new revision."""
        engine = self.require_engine()
        doc = self.sync_document()
        doc.revision = await engine.store.save(doc, doc.revision)
        self.emit(ev.SessionSaved, path="", revision=doc.revision, reason=reason)
        return doc.revision

