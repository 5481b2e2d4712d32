"""The engine-owned side of a flow: the live state of one turn.

A :class:`~runtime.Flow` is what users subclass, so it carries only hooks and the helpers
the docs teach. Everything the engine, the model loop, tool dispatch and the barrier need
besides — the bound session, the event bus, canonical step state and memory, counters,
the branch runner — lives on the :class:`Turn` of that flow instance, which no user class
inherits from, so no subclass can override it by accident. :func:`turn_of` is how the
core reaches it; the barrier sees it only through its host Protocol
(:class:`runtime.barrier.BarrierHost`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, final

import anyio

from . import current
from . import events as ev
from . import step as _step
from .barrier import (
    BranchView,
    CancelToken,
    Channel,
    ContributionMeta,
    ParallelConfig,
    PublishedValues,
    RunStepRequest,
    Snapshot,
    StepHost,
    View,
    barrier_options,
    current_view,
    run_barrier,
)
from .barrier.ledger import LedgerEntry, TurnLedger
from .errors import (
    FlowDefinitionError,
    ParallelConfigurationError,
    ParallelLimitError,
    ParallelOutputError,
    ParallelReducerError,
    StateValueError,
    TurnCancelledError,
    TurnLimitError,
)
from .events import EventBus, safe_value
from .jsonutil import json_copy
from .llm import ModelSelection, TokenUsage
from .messages import Message, now_iso
from .pressure import CongestionGate
from .session import (
    SESSION_DOC_VERSION,
    FlowRecord,
    MemorySpace,
    SequenceEntry,
    SessionDocument,
    StepRecord,
)
from .stores import BranchLedgerStore, LedgerTurn
from .tools import ToolRegistry, ToolSpec, handlers_of
from .transitions import Transition, step_name_of

if TYPE_CHECKING:
    from .engine import FlowEngine
    from .flow import Flow
    from .step import Step

frames: ContextVar[tuple[Step, ...]] = ContextVar("picoflow_frames", default=())
"""The stack of open child execution frames (``run_step``, branches). A contextvar, so
concurrent tasks each see their own stack."""

# Built once per branch or contribution: compiled builders, without validation (the
# level, names and values are the runtime's own; the suite builds them strictly).
_SEQUENCE_ENTRY = ev.record_maker(SequenceEntry)
_CONTRIBUTED = ev.event_maker(ev.StateContributed)

logger = logging.getLogger("picoflow")


class _Recipe(NamedTuple):
    """What a branch of one registered step needs of it, read once per turn (the registered
    step is configured in ``define_steps`` and not changed afterwards)."""

    kind: type[_step.Step]
    name: str
    namespace: str | None
    """Its memory namespace when it is not the step's name."""
    override: ModelSelection | None
    plain: bool
    """Whether it uses Step's own constructor."""
    logic: bool
    """A logic step with Step's own ``run``: the branch's output is ``run_logic()``'s."""
    entering: bool
    exiting: bool
    """Whether it has ``on_enter`` / ``on_exit`` hooks of its own (Step's do nothing)."""


def _recipe(registered: _step.Step) -> _Recipe:
    kind = type(registered)
    name = registered.name
    namespace = registered.get_memory_space()
    return _Recipe(
        kind, name, namespace if namespace != name else None, registered.model_override,
        kind.__init__ is _step.Step.__init__, registered.is_logic() and kind.run is _step.Step.run,
        kind.on_enter is not _step.Step.on_enter, kind.on_exit is not _step.Step.on_exit)


_new_step = object.__new__


class StoreLedgerWriter:
    """A turn's ledger writes, to its session's ledger in the store."""

    def __init__(self, store: BranchLedgerStore, session_id: str, turn_id: str) -> None:
        self.store, self.session_id, self.turn_id = store, session_id, turn_id

    async def put(self, entries: Sequence[LedgerEntry]) -> None:
        await self.store.ledger_put(self.session_id, self.turn_id, entries)


@final
class Turn:
    """The live state of one flow instance's turn. Construct through :func:`turn_of`."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.engine: FlowEngine | None = None
        self.bus: EventBus | None = None
        """Where this turn's events go; None when nothing listens."""
        self._gate: CongestionGate | None = None
        """Where branches wait while the bus is congested (made on first need)."""
        self.doc: SessionDocument | None = None
        self.tools = ToolRegistry(flow.id)
        self.context: dict[str, Any] = {}
        self.steps: dict[str, Step] = {}
        self.states: dict[str, dict[str, Any]] = {}
        """Canonical step state of this turn (what the session saves)."""
        self.memory: dict[str, list[Message]] = {}
        self.model_calls = 0
        self.invocations = 0
        self.root_barriers = 0
        self.turn_cancel: CancelToken | None = None
        """The token that stops this turn (``FlowEngine.run(..., cancel=...)``), if any."""
        self.open_root_barriers = 0
        """Root barriers between their fork and their publication right now."""
        self._root_barriers_closed: anyio.Event | None = None
        self._selection: ModelSelection | None = None
        self._channels: dict[str, Mapping[str, Channel]] = {}
        self._model_limiter: anyio.CapacityLimiter | Literal[False] | None = False
        self._concurrent_groups = 0
        self._trail: dict[tuple[int, str], SequenceEntry] = {}
        """One trail entry per (level, step name), shared by every branch that appends it:
        entries are frozen, and siblings of a fan-out append equal ones."""
        self._recipes: dict[int, _Recipe] = {}
        """How the branches of each registered step (by id) are made: see :func:`_recipe`."""
        self.ledger: TurnLedger | None = None
        """The turn's branch ledger, once a ledgered barrier forked (or the turn resumes)."""
        self.request: tuple[str | None, dict[str, Any] | None] = (None, None)
        """The turn's user message and config, as a ledger's record keeps them."""
        self.start: tuple[int, str | None] = (0, None)
        """The revision the turn began from and, when taken then, the document as JSON."""
        self._ledger_lock: anyio.Lock | None = None

    def next_concurrent_group(self) -> int:
        """A number for the turn's next ``concurrent_steps()`` call (its events' group)."""
        self._concurrent_groups += 1
        return self._concurrent_groups - 1

    def attach(self, engine: FlowEngine, bus: EventBus | None) -> None:
        """Bind the engine running the turn and its event bus."""
        self.engine, self.bus = engine, bus

    def require_engine(self) -> FlowEngine:
        if self.engine is None:
            raise FlowDefinitionError(f"Flow '{self.flow.id}' is not bound to an engine.")
        return self.engine

    def require_doc(self) -> SessionDocument:
        if self.doc is None:
            raise FlowDefinitionError(f"Flow '{self.flow.id}' is not bound to a session yet.")
        return self.doc

    # -- events --------------------------------------------------------------------------

    @property
    def observed(self) -> bool:
        """Whether anything listens to this turn's events (skip building them if not)."""
        return self.bus is not None and bool(self.bus.sinks)

    def emit(self, cls: type[Any], path: str | None = None, **fields: Any) -> None:
        """Emit one event; ``path`` defaults to the executing invocation's."""
        bus = self.bus
        if bus is None or not bus.sinks:
            return
        if path is None:
            view = current_view.get()
            path = view.path_str if view is not None else ""
        bus.emit_fields(cls, path, fields)

    async def wait_while_congested(self) -> None:
        """Back-pressure: wait while a sink says it is congested (see ``runtime.pressure``).

        Called at branch start and before each model call; callers check
        ``bus.pressure and bus.congested()`` inline first, so a run without congestible
        sinks pays two attribute reads.
        """
        if self._gate is None:
            self._gate = CongestionGate(self._congested)
        await self._gate.wait()

    def _congested(self) -> bool:
        bus = self.bus
        return bus is not None and bus.congested()

    # -- steps and tools -----------------------------------------------------------------

    def collect_steps(self) -> None:
        """Instantiate and index the registry returned by ``define_steps()``."""
        flow = self.flow
        for entry in flow.define_steps():
            step = entry(flow) if isinstance(entry, type) and issubclass(entry, _step.Step) \
                else entry
            if not isinstance(step, _step.Step):
                raise FlowDefinitionError(
                    f"define_steps() of flow '{flow.id}' returned {entry!r}, not a Step."
                )
            if step.flow is not flow:
                raise FlowDefinitionError(f"Step '{step.name}' was built for another flow.")
            if step.name in self.steps:
                raise FlowDefinitionError(
                    f"Step '{step.name}' is registered twice in flow '{flow.id}'."
                )
            self.steps[step.name] = step
        if not self.steps:
            raise FlowDefinitionError(f"Flow '{flow.id}' defines no steps.")
        self.tools.add(flow.define_tools())
        for step in self.steps.values():
            self.tools.add(step.define_tools())
            self.tools.add(h.spec for h in handlers_of(type(step)).values())
        for step in self.steps.values():
            self.exposed_tools(step)  # fail at bootstrap, not mid-turn, on unknown names

    def require_step(self, target: type[Any] | str) -> Step:
        """The registered step for a class or name."""
        name = step_name_of(target)
        try:
            return self.steps[name]
        except KeyError:
            raise FlowDefinitionError(
                f"Step '{name}' is not defined in flow '{self.flow.id}'."
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

    async def run_child(
        self, owner: Step, target: type[Step] | str, user_message: str | None
    ) -> str:
        """Run ``target`` as a sequential child of ``owner`` (see :meth:`Step.run_step`)."""
        if current_view.get() is not None:
            # Inside a branch a sequential child is a one-child atomic barrier.
            batch = await run_barrier(self, owner.name,
                                      [RunStepRequest(target, user_message=user_message)],
                                      barrier_options(policy="atomic"))
            (only,) = batch.branches
            if only.error is not None:
                raise only.error
            return only.output  # type: ignore[no-any-return]
        child = self.require_step(target)
        level = len(frames.get()) + 2
        token = frames.set((*frames.get(), child))
        try:
            self.require_doc().flow.sequence.append(
                SequenceEntry(level=level, step_name=child.name))
            self.emit(ev.StepEntered, step=child.name, level=level, how="child")
            await child.on_enter()
            try:
                return await child.run(user_message)
            finally:
                await child.on_exit()
                self.emit(ev.StepExited, step=child.name)
        finally:
            frames.reset(token)

    def model_selection(self) -> ModelSelection:
        """The flow's resolved default selection (validated once per turn)."""
        if self._selection is None:
            self._selection = ModelSelection.model_validate(self.flow.config_model())
        return self._selection

    # -- state ---------------------------------------------------------------------------

    def snapshot(self) -> View:
        """Canonical state fixed now: what a root barrier's branches read."""
        return Snapshot(states=dict(self.states),
                        memory={ns: list(h) for ns, h in self.memory.items()})

    def live_view(self) -> View:
        """The canonical state as it is at each read (a root join validates against it)."""
        return Snapshot(states=self.states, memory=self.memory)

    def peek_step_state(self, name: str) -> Mapping[str, Any]:
        """A step's state as the executing code sees it. Shared: never mutate it."""
        view = current_view.get()
        if view is not None:
            return view.state_of(name)
        return self.states.get(name, {})

    def write_step_fields(
        self, name: str, updates: Mapping[str, Any], removals: tuple[str, ...] = ()
    ) -> None:
        """Replace (or remove) top-level fields of a step's state.

        In a parallel branch this records drafts (own step only); elsewhere it writes the
        turn's canonical state and stamps ``_saveOn``.
        """
        self.require_step(name)
        view = current_view.get()
        try:
            values = json_copy(dict(updates), f"State of step '{name}'")
        except StateValueError as exc:
            if view is None:
                raise
            error = ParallelOutputError(exc.message, extra={"provenance": [
                {"path": view.path_str, "key": view.key, "step": name, "kind": "state"}]})
            view.add_violation(error)
            raise error from None
        if view is not None:
            view.write(name, values, removals)
            if self.observed and not view.closed:
                self._emit_writes(name, values, removals, view.base.state_of(name), True)
            return
        before = self.states.get(name, {})
        state = {k: v for k, v in before.items() if k not in removals}
        state.update(values)
        if set(values) - {"_transient"} or removals:  # transient scratch is not a save
            state["_saveOn"] = now_iso()
        self.states[name] = state
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
        view = current_view.get()
        value = json_copy(value, f"Contribution to {name}.{field}")
        if view is not None:
            contribution = view.contribute(name, field, value)
            if self.observed and contribution is not None:
                carried = safe_value(value)
                whole = carried is value or not (isinstance(carried, dict)
                                                 and carried.get("truncated") is True)
                kind = channels[field].kind
                # The folds reduce it themselves: the event's size is the contribution's,
                # not the field's (which grows with the session). A value carried
                # truncated could not be reduced: it takes the long way.
                folded = kind if whole and view.folds_reduce(name, field, kind) else None
                result = None
                if folded is None:
                    try:
                        result = safe_value(view.value_of(name, field))
                    except ParallelReducerError as exc:  # recorded in the view: the join
                        result = {"reducer_failed": str(exc)}  # reports it, as unobserved
                _CONTRIBUTED(self.bus, view.path_str, step=name, field=field, value=carried,
                             order=contribution.meta.seq, draft=True, channel=folded,
                             result=result)
            return
        if field not in channels:
            raise FlowDefinitionError(
                f"Step '{name}' declares no channel '{field}' in parallel_state_channels()."
            )
        channel = channels[field]
        state = self.states.get(name, {})
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

    def get_memory(self, namespace: str) -> list[Message]:
        """The live history of a namespace (in a branch: a private clone)."""
        view = current_view.get()
        if view is not None:
            history: list[Message] = view.memory_of(namespace)
            return history
        return self.memory.setdefault(namespace, [])

    # -- the barrier's host --------------------------------------------------------------

    def apply_publication(self, values: PublishedValues) -> Callable[[], None]:
        """Apply a root join's field values; returns a function that undoes it."""
        before = {step: self.states.get(step) for step, _ in values}
        stamp = now_iso()
        for (step, field), (value, deleted) in values.items():
            state = dict(self.states.get(step, {}))
            if deleted:
                state.pop(field, None)
            else:
                state[field] = value
            state["_saveOn"] = stamp
            self.states[step] = state

        def undo() -> None:
            for step, state in before.items():
                if state is None:
                    self.states.pop(step, None)
                else:
                    self.states[step] = state

        return undo

    def parallel_config(self) -> ParallelConfig:
        """The flow's validated parallel limits."""
        return ParallelConfig.model_validate(self.flow.config_parallel_execution())

    def count_invocations(self, count: int, limit: int) -> None:
        """Reserve ``count`` branch invocations of this turn's budget: the flow's ``limit``,
        or the engine's cap (``FlowEngine(max_invocations=...)``) when that is lower."""
        cap = self.engine.max_invocations if self.engine is not None else None
        effective = limit if cap is None else min(limit, cap)
        if self.invocations + count <= effective:
            self.invocations += count
            return
        capped = effective < limit
        why = (f"{self.invocations} used; FlowEngine(max_invocations={effective}) caps the "
               f"flow's {limit}") if capped else f"{self.invocations} used"
        raise ParallelLimitError(
            f"Forking {count} more branches would exceed the {'engine' if capped else 'flow'}"
            f"'s limit of {effective} invocations per turn ({why}).",
            extra={"limit": effective, "used": self.invocations, "requested": count,
                   "source": "engine" if capped else "flow"},
        )

    @contextmanager
    def root_barrier_open(self) -> Iterator[None]:
        """Count a root barrier as open while the ``with`` block runs."""
        self.open_root_barriers += 1
        try:
            yield
        finally:
            self.open_root_barriers -= 1
            closed = self._root_barriers_closed
            if not self.open_root_barriers and closed is not None:
                self._root_barriers_closed = None
                closed.set()

    async def root_barriers_closed(self) -> None:
        """Return once no root barrier is open (at once when none is)."""
        while self.open_root_barriers:
            if self._root_barriers_closed is None:
                self._root_barriers_closed = anyio.Event()
            await self._root_barriers_closed.wait()

    def stop_if_cancelled(self) -> None:
        """Raise :class:`TurnCancelledError` once the turn's token fired.

        Top-level code calls it where it would start new work (a model call, a step
        crossing); branches answer to their own tokens instead, which the turn's reaches.
        """
        token = self.turn_cancel
        if token is not None and token.cancelled and current_view.get() is None:
            raise TurnCancelledError(token.reason or "cancelled", token.requested_by)

    def next_root_ordinal(self) -> int:
        """The ordinal of a new root barrier among this turn's root barriers."""
        self.root_barriers += 1
        return self.root_barriers - 1

    async def run_branch(self, registered: StepHost, view: BranchView, message: str | None) -> Any:
        """Run one branch: a fresh step instance in its own view and execution frame."""
        assert isinstance(registered, _step.Step)
        bus = self.bus
        if bus is not None and bus.pressure and bus.congested():
            await self.wait_while_congested()
        recipe = self._recipes.get(id(registered))
        if recipe is None:
            recipe = self._recipes[id(registered)] = _recipe(registered)
        kind, name, namespace, override, plain, logic, entering, exiting = recipe
        # The fresh instance keeps the registered one's configuration (use_memory and
        # use_model in define_steps), which its constructor does not repeat.
        if plain:  # Step's own constructor sets nothing but the flow beside the defaults
            worker = _new_step(kind)
            worker.flow = self.flow
        else:
            worker = kind(self.flow)
        if namespace is not None:
            worker.use_memory(namespace)
        if override is not None:
            worker.use_model(override)
        doc = self.doc if self.doc is not None else self.require_doc()
        view_token = current_view.set(view)
        stack = (*frames.get(), worker)
        frame_token = frames.set(stack)
        try:
            level = len(stack) + 1
            # No validation (level and name are the runtime's own): hot path of every branch,
            # where even building one entry per branch costs more than the lookup.
            entry = self._trail.get((level, name))
            if entry is None:
                entry = self._trail[level, name] = _SEQUENCE_ENTRY(level=level, step_name=name)
            doc.flow.sequence.append(entry)
            # No step.entered/exited for a branch: branch.started/fulfilled/rejected say it.
            if entering:
                await worker.on_enter()
            if logic:
                # A logic branch's output is what run_logic() returns; it cannot route.
                output = await worker.run_logic()  # type: ignore[attr-defined]
                if output is not None and (isinstance(output, Transition) or (
                    isinstance(output, type) and issubclass(output, _step.Step)
                )):
                    raise view.violate("route from run_logic() (return the output instead)")
            else:
                output = await worker.run(message)
            if view.direct is not None:
                output = view.direct.value
            if exiting:
                await worker.on_exit()
            return output
        finally:
            frames.reset(frame_token)
            current_view.reset(view_token)

    async def branch_ledger(self) -> TurnLedger:
        """The turn's ledger, its record stored first (at the first ledgered fork)."""
        if self.ledger is not None and self.ledger.opened:
            return self.ledger
        if self._ledger_lock is None:
            self._ledger_lock = anyio.Lock()
        async with self._ledger_lock:  # two root barriers may fork at once
            if self.ledger is not None and self.ledger.opened:
                return self.ledger
            engine, doc = self.require_engine(), self.require_doc()
            store = engine.store
            if not isinstance(store, BranchLedgerStore):
                raise ParallelConfigurationError(
                    f"run_steps(..., ledger=True) needs a session store that keeps branch "
                    f"ledgers (BranchLedgerStore: ledger_begin, ledger_put, ledger_load, "
                    f"ledger_drop); {type(store).__name__} does not.")
            revision, document = self.start
            if document is None:
                stored = await store.load(doc.id)
                if stored is None:
                    raise ParallelConfigurationError(
                        f"Session '{doc.id}' is not stored; its turn cannot keep a ledger.")
                if stored.revision != revision:
                    logger.warning(
                        "Session '%s' was saved during the turn before its first ledgered "
                        "barrier: a resume starts from revision %d, not %d (set "
                        "ParallelConfig(ledger=True) to keep the turn's start).",
                        doc.id, stored.revision, revision)
                revision, document = stored.revision, stored.model_dump_json()
            bus = self.bus
            run_id = bus.run_id if bus is not None else doc.id
            message, config = self.request
            await store.ledger_begin(LedgerTurn(
                session_id=doc.id, turn_id=run_id, run_id=run_id, flow=self.flow.id,
                message=message, config=config, revision=revision, document=document))
            self.ledger = TurnLedger(StoreLedgerWriter(store, doc.id, run_id), run_id,
                                      opened=True)
            return self.ledger

    def reuse_tokens(self, view: BranchView, tokens: Mapping[str, int]) -> None:
        """Count a reused branch's tokens as if it had spent them now."""
        self.tally_tokens(TokenUsage.model_validate(dict(tokens)), view)

    async def flush_ledger(self) -> None:
        """Write the ledger entries still pending (before more paid work, a save, or as the
        turn fails or stops), shielded: a stop arriving now does not lose them."""
        ledger = self.ledger
        if ledger is not None and ledger.pending:
            with anyio.CancelScope(shield=True):
                await ledger.flush()

    async def checkpoint(self, reason: str = "checkpoint") -> int:
        """Save now (also the root-join checkpoint); returns the new revision."""
        if reason != "final":  # a final save that commits drops the ledger unwritten
            await self.flush_ledger()
        engine = self.require_engine()
        doc = self.sync_document()
        doc.revision = await engine.store.save(doc, doc.revision)
        self.emit(ev.SessionSaved, path="", revision=doc.revision, reason=reason)
        return doc.revision

    # -- model calls ---------------------------------------------------------------------

    def model_call_limiter(self) -> anyio.CapacityLimiter | None:
        """The limiter of the turn's model-call slots (the provider quota); None when the
        flow sets no quota. A call holds one slot while it runs."""
        if self._model_limiter is False:  # read once per turn: a validation per call
            limit = self.parallel_config().model_call_limit
            self._model_limiter = None if limit is None else anyio.CapacityLimiter(limit)
        return self._model_limiter

    def count_model_call(self) -> int:
        """Count one model call of this turn (a loop guard); returns its number."""
        self.model_calls += 1
        limit = self.flow.max_model_calls_per_turn
        if self.model_calls > limit:
            raise TurnLimitError(
                f"Turn exceeded {limit} model calls in flow '{self.flow.id}'; a transition "
                "probably loops.",
                extra={"calls": self.model_calls},
            )
        return self.model_calls

    def tally_tokens(self, usage: TokenUsage, view: BranchView | None = None) -> None:
        """Add one model attempt's usage to the session totals (attempted work counts,
        even when a branch's state is later discarded), to the branch and the branches it
        was forked under (what their ledger entries record) and to enclosing barrier
        budgets."""
        self.require_doc().tokens.add(usage)
        if view is None:
            view = current_view.get()
        if view is not None:
            spender: BranchView | None = view
            while spender is not None:
                spent = spender.tokens
                if spent is None:
                    spent = spender.tokens = {}
                spent["input_tokens"] = spent.get("input_tokens", 0) + usage.input_tokens
                spent["output_tokens"] = spent.get("output_tokens", 0) + usage.output_tokens
                spent["total_tokens"] = spent.get("total_tokens", 0) + usage.total_tokens
                spender = spender.outer
            for budget in view.usages:
                budget.tokens += usage.total_tokens
                if budget.budget is not None and budget.tokens > budget.budget \
                        and not budget.exhausted:
                    for callback in list(budget.on_exhausted):
                        callback()

    # -- session -------------------------------------------------------------------------

    def new_document(self, session_id: str | None = None) -> SessionDocument:
        """Bind a fresh session: empty state, cursor on the initial step, trail started."""
        initial = self.flow.initial_step()
        first = self.require_step(initial) if initial else next(iter(self.steps.values()))
        record = FlowRecord(name=self.flow.id, current_step=first.name,
                            sequence=[SequenceEntry(level=1, step_name=first.name)])
        doc = SessionDocument(flow=record) if session_id is None else SessionDocument(
            id=session_id, flow=record
        )
        doc.flow.context = json_copy(self.context)
        self.doc = doc
        if self.bus is not None:
            self.bus.session_id = doc.id
        return doc

    def restore_document(self, doc: SessionDocument) -> None:
        """Bind a stored session: state, memory, context and cursor come from ``doc``."""
        self.doc = doc
        if self.bus is not None:
            self.bus.session_id = doc.id
        self.context = copy.deepcopy(doc.flow.context)
        self.memory = {ns: list(space.messages) for ns, space in doc.flow.memory.items()}
        for record in doc.flow.steps:
            if record.name in self.steps:
                self.states[record.name] = copy.deepcopy(record.state)
        if doc.flow.current_step not in self.steps:
            raise FlowDefinitionError(
                f"Session '{doc.id}' points at step '{doc.flow.current_step}', which flow "
                f"'{self.flow.id}' does not define."
            )

    def emit_loaded(self, new_session: bool) -> None:
        """Emit the state this turn starts from (the fold's starting point)."""
        if not self.observed:
            return
        doc = self.require_doc()
        self.emit(ev.SessionLoaded, path="", new_session=new_session, revision=doc.revision,
                  current_step=doc.flow.current_step,
                  steps={step: {name: safe_value(value) for name, value in fields.items()}
                         for step, fields in self.states.items()},
                  context=safe_value(self.context), tokens=doc.tokens.model_dump())

    def sync_document(self) -> SessionDocument:
        """Write the turn's live state into the bound document and return it."""
        doc = self.require_doc()
        doc.version = SESSION_DOC_VERSION
        doc.flow.model = self.model_selection().public()
        doc.flow.context = copy.deepcopy(self.context)
        doc.flow.memory = {
            ns: MemorySpace(messages=list(history),
                            summary=doc.flow.memory[ns].summary if ns in doc.flow.memory else None)
            for ns, history in self.memory.items()
        }
        doc.flow.steps = [
            StepRecord(
                name=name,
                state={k: v for k, v in self.states.get(name, {}).items() if k != "_transient"},
                model=step.model_override.public() if step.model_override else None,
            )
            for name, step in self.steps.items()
            if name in self.states or step.model_override
        ]
        doc.save_on = now_iso()
        return doc


current.provide_turn(Turn)
