"""Views and drafts: what one parallel branch can read, and what it has written.

A branch reads through a chain of views: its own drafts over the view its caller had at
the fork (for a root barrier, the canonical state; for a nested one, the calling branch's
scope), so siblings never see each other's in-flight writes and a nested fork inherits
its caller's current view. Forking is O(1) in the size of state: siblings share their
caller's view by reference — it cannot change while they run, because the caller is
awaiting the join — and a branch stores only the fields it writes (copy on write).

A branch's view also collects what the join needs: replacements and contributions with their
provenance (writer path and key, base value seen), and any invalid shared mutation. A
mutation is recorded *before* it is raised, so catching the error cannot hide it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from ..errors import (
    ParallelConfigurationError,
    ParallelMutationError,
    ParallelReducerError,
    PicoFlowError,
)
from ..events import FOLDED_CHANNELS
from ..events.channels import takes_accumulator, takes_value
from .reducers import Channel, ContributionMeta
from .types import (
    BarrierUsage,
    CancelToken,
    DirectResult,
    InvocationPath,
    ParallelInvocation,
    build_frozen,
    format_path,
)

# Memory histories are lists of the core's Message records; the barrier only copies the
# lists, so it does not need (or import) the type.
Message = Any

PRIVATE_FIELDS = frozenset({"_transient", "_saveOn"})
"""Framework fields a branch may write but that never publish."""


class View(Protocol):
    """Something state can be read through."""

    def state_of(self, step: str) -> Mapping[str, Any]:
        """The step's state as this view sees it. Shared: never mutate it."""
        ...

    def memory_of(self, namespace: str) -> list[Message]:
        """The namespace's history as this view sees it."""
        ...


@dataclass(frozen=True)
class Draft:
    """One draft write: a proposed replacement (or removal) of a top-level field, with
    provenance."""

    step: str
    field: str
    value: Any
    deleted: bool
    path: InvocationPath
    key: str
    base: Any
    """The value the writing branch saw at its fork (None when absent)."""

    def provenance(self) -> dict[str, Any]:
        """JSON-safe description for errors and debuggers."""
        return {
            "path": format_path(self.path), "key": self.key, "step": self.step,
            "field": self.field, "kind": "remove" if self.deleted else "replace",
            "value": None if self.deleted else self.value, "base": self.base,
        }


@dataclass(slots=True)
class Contribution:
    """One ``contribute_state`` call, with provenance. Never changed once made; not frozen
    because a frozen dataclass pays a ``object.__setattr__`` per field, per contribution."""

    step: str
    field: str
    value: Any
    meta: ContributionMeta
    base: Any
    path_str: str
    """The contributor's invocation path as text (its view's, formatted once)."""

    @property
    def order(self) -> tuple[InvocationPath, int]:
        """Request-path order, then call order within the invocation."""
        return self.meta.path, self.meta.seq

    def provenance(self) -> dict[str, Any]:
        """JSON-safe description for errors and debuggers."""
        return {
            "path": self.path_str, "key": self.meta.key, "step": self.step,
            "field": self.field, "kind": "contribute", "value": self.value, "base": self.base,
        }


ChannelsOf = Callable[[str], Mapping[str, Channel]]

# A view's drafts, contributions, private fields, memory and violations start as these
# shared, read-only empties and become its own on its first write (see BranchView.own):
# most branches of a fan-out never write some of them, and six containers per branch are
# a good part of a no-op branch's cost. Typed Any: read, they are what the fields hold.
_NO_ITEMS: Any = MappingProxyType({})
_NO_LIST: Any = ()


@dataclass(eq=False, slots=True)
class BranchView:
    """The private view of one branch: its fork-time base, its drafts and contributions,
    and what the join will need to know about them.

    Slotted, and a barrier makes its views with :func:`fork_views` rather than through
    ``__init__``: one is made per branch, on the fork's hot path."""

    base: View
    step: str
    index: int
    key: str
    path: InvocationPath
    params: Mapping[str, Any]
    cancel: CancelToken
    channels_of: ChannelsOf
    usages: tuple[BarrierUsage, ...]
    """Token budgets of every enclosing barrier, innermost last."""
    depth: int
    barrier_id: str = ""
    """Id of the barrier this branch belongs to (events name it)."""
    writes: dict[str, dict[str, Draft]] = field(default_factory=lambda: _NO_ITEMS)
    contributions: dict[str, dict[str, list[Contribution]]] = field(
        default_factory=lambda: _NO_ITEMS)
    private: dict[str, dict[str, Any]] = field(default_factory=lambda: _NO_ITEMS)
    violations: list[PicoFlowError] = field(default_factory=lambda: _NO_LIST)
    memory: dict[str, list[Message]] = field(default_factory=lambda: _NO_ITEMS)
    direct: DirectResult | None = None
    overridden: list[Contribution] = field(default_factory=lambda: _NO_LIST)
    """Own contributions a later replacement of their field hides from this view; the
    join still sees them (a replacement plus a contribution is a conflict)."""
    barriers: int = 0
    """Barriers this branch has opened (the next one's ordinal)."""
    closed: bool = False
    """Past the grace period: the branch lost publication rights; writes are dropped."""
    outer: BranchView | None = None
    """The branch that forked this one's barrier (None for a root barrier's branch)."""
    tokens: dict[str, int] | None = None
    """Tokens this branch and its descendants spent (what its ledger entry records); None
    until it spends some (a dict per branch would cost a no-op fan-out)."""
    _seq: int = 0
    _folding: dict[tuple[str, str], tuple[Sequence[Contribution], int, bool]] | None = None
    """Per field: the contribution list :meth:`folds_reduce` last saw, how many of its items
    it checked and its verdict (made on the first observed contribution)."""
    path_str: str = field(init=False, default="")
    """The invocation path as text (computed once: every event of the branch uses it)."""

    # -- reading -------------------------------------------------------------------------

    def state_of(self, step: str) -> Mapping[str, Any]:
        base = self.base.state_of(step)
        writes = self.writes.get(step)
        contributions = self.contributions.get(step)
        private = self.private.get(step)
        if not writes and not contributions and not private:
            return base
        out = dict(base)
        for name, write in (writes or {}).items():
            if write.deleted:
                out.pop(name, None)
            else:
                out[name] = write.value
        for name, items in (contributions or {}).items():
            out[name] = self._reduce(step, name, items, name in out, out.get(name))
        out.update(private or {})
        return out

    def value_of(self, step: str, name: str) -> Any:
        """One field of :meth:`state_of` (what a contribution's event reports), computed
        without building the whole state."""
        if step in self.private and name in self.private[step]:
            return self.private[step][name]
        items = self.contributions.get(step, {}).get(name)
        write = self.writes.get(step, {}).get(name)
        if write is not None:
            present, value = not write.deleted, write.value
        else:
            base = self.base.state_of(step)
            present, value = name in base, base.get(name)
        if not items:
            return value if present else None
        return self._reduce(step, name, items, present, value)

    def _reduce(
        self, step: str, name: str, items: list[Contribution], present: bool, value: Any
    ) -> Any:
        """The field's view: its visible value reduced with the contributions in
        request-path order. A reducer that raises is recorded before it is raised: the
        barrier is invalid even if the branch catches this, as when the join runs it."""
        channel = self.channels_of(step)[name]
        ordered = items if len(items) == 1 else sorted(items, key=lambda c: c.order)
        try:
            return channel.reduce(channel.initial(present, value),
                                  [(c.meta, c.value) for c in ordered], check=False)
        except Exception as exc:
            error = ParallelReducerError(
                f"The '{channel.kind}' reducer of {step}.{name} failed: {exc}",
                extra={"provenance": [c.provenance() for c in ordered]},
            )
            if not self.closed:
                self.add_violation(error)
            raise error from exc

    def folds_reduce(self, step: str, name: str, kind: str) -> bool:
        """Whether a fold, reducing this field's contributions one event at a time onto the
        value before, gets exactly :meth:`value_of`: a built-in ``kind``, only this
        branch's own contributions (one reduced after an inner join's would be reordered
        by request path) and values the reducer takes (a failure is the runtime's to
        report). Costs the contributions made since the last call, never the field's
        value or its earlier contributions: a branch contributing k times pays O(k) in
        all, not O(k²)."""
        # Called on every observed contribution: allocates nothing for a first one, a small
        # tuple for each after it.
        if kind not in _FOLDED or name in self.private.get(step, _NONE):
            return False
        items: Sequence[Contribution] = self.contributions.get(step, _NONE).get(name, ())
        if len(items) == 1:  # the field's first contribution here: nothing kept to reuse
            only = items[0]
            return (only.meta.path == self.path and takes_value(kind, only.value)
                    and _fits_initial(kind, self._initial_of(step, name)))
        # A field's list only grows, until a replacement of the field (here or absorbed
        # from an inner join) drops it for a new one: the verdict on the items seen so
        # far holds while the list is the same object, and the initial value with it.
        known = self._folding.get((step, name)) if self._folding else None
        if known is not None and known[0] is items:
            _, checked, fits = known
        else:
            checked, fits = 0, _fits_initial(kind, self._initial_of(step, name))
        if fits and checked < len(items):
            path = self.path
            for index in range(checked, len(items)):
                c = items[index]
                if c.meta.path != path or not takes_value(kind, c.value):
                    fits = False
                    break
        if len(items) > 1:  # a branch's only contribution (the usual case) keeps nothing
            if self._folding is None:
                self._folding = {}
            self._folding[step, name] = (items, len(items), fits)
        return fits

    def _initial_of(self, step: str, name: str) -> Any:
        """The value contributions to the field reduce onto (:data:`_ABSENT` when there is
        none: each built-in channel then starts from its own empty value)."""
        write = self.writes.get(step, _NONE).get(name)
        if write is not None:
            return _ABSENT if write.deleted else write.value
        base = self.base.state_of(step)
        return base.get(name, _ABSENT)

    def memory_of(self, namespace: str) -> list[Message]:
        if namespace not in self.memory:
            self.own()
            self.memory[namespace] = list(self.base.memory_of(namespace))
        return self.memory[namespace]

    def own(self) -> None:
        """Give the view containers of its own in place of the shared empties it starts
        with (before anything is written into them)."""
        if self.writes is _NO_ITEMS:
            self.writes = {}
        if self.contributions is _NO_ITEMS:
            self.contributions = {}
        if self.private is _NO_ITEMS:
            self.private = {}
        if self.memory is _NO_ITEMS:
            self.memory = {}
        if self.violations is _NO_LIST:
            self.violations = []
        if self.overridden is _NO_LIST:
            self.overridden = []

    def add_violation(self, error: PicoFlowError) -> None:
        """Record a broken rule of the branch (the join refuses the barrier for it)."""
        if self.violations is _NO_LIST:
            self.violations = []
        self.violations.append(error)

    def __post_init__(self) -> None:
        self.path_str = format_path(self.path)

    def invocation(self, session_id: str) -> ParallelInvocation:
        """What the branch knows about itself (``step.parallel_invocation()``)."""
        return build_frozen(ParallelInvocation, params=self.params, key=self.key,
                            index=self.index, path=self.path, cancel=self.cancel,
                            session_id=session_id)

    # -- writing -------------------------------------------------------------------------

    def violate(self, what: str, **extra: Any) -> ParallelMutationError:
        """Record an invalid shared mutation and return the error to raise."""
        error = ParallelMutationError(
            f"Branch {self.path_str} ({self.step}, key '{self.key}') may not {what}: parallel "
            "branches write only their own step's state.",
            extra={"provenance": [{"path": self.path_str, "key": self.key, "step": self.step,
                                   "kind": "mutation", "what": what, **extra}]},
        )
        if not self.closed:
            self.add_violation(error)
        return error

    def write(self, step: str, updates: Mapping[str, Any], removals: tuple[str, ...]) -> None:
        """Record replacements/removals of the branch's own step's fields."""
        if self.closed:
            return
        base = self.base.state_of(step)
        if step != self.step:
            # What it tried to write and what it saw there at its fork: a debugger shows
            # the refused write like any other, though no draft event is ever emitted for it.
            names = [*updates, *removals]
            raise self.violate(
                f"write the state of step '{step}'", target_step=step, fields=names,
                value={n: updates.get(n) for n in names},
                base={n: base.get(n) for n in names})
        self.own()
        fields = self.writes.setdefault(step, {})
        for name, value in updates.items():
            if name in PRIVATE_FIELDS:
                self.private.setdefault(step, {})[name] = value
            else:
                fields[name] = Draft(step, name, value, False, self.path, self.key, base.get(name))
                self._override(step, name)
        for name in removals:
            fields[name] = Draft(step, name, None, True, self.path, self.key, base.get(name))
            self._override(step, name)

    def _override(self, step: str, name: str) -> None:
        # The view follows call order: a replacement hides earlier contributions.
        earlier = self.contributions.get(step, {}).pop(name, None)
        if earlier:
            if self.overridden is _NO_LIST:
                self.overridden = []
            self.overridden.extend(earlier)

    def contribute(self, step: str, name: str, value: Any) -> Contribution | None:
        """Record a contribution to a declared channel of the branch's own step.

        Returns it (its ``meta.seq`` is its call order), or None once the branch lost its
        publication rights and the write was dropped.
        """
        if self.closed:
            return None
        if step != self.step:
            raise self.violate(f"contribute to step '{step}'", target_step=step)
        if name not in self.channels_of(step):
            error = ParallelConfigurationError(
                f"Step '{step}' declares no channel '{name}' in parallel_state_channels(); "
                "contribute_state() needs a declared channel.",
                extra={"provenance": [{"path": self.path_str, "key": self.key, "step": step,
                                       "field": name, "kind": "contribute", "value": value}]},
            )
            self.add_violation(error)
            raise error
        base = self.base.state_of(step).get(name)
        self._seq += 1
        meta = build_frozen(ContributionMeta, path=self.path, key=self.key, seq=self._seq)
        contribution = Contribution(step, name, value, meta, base, self.path_str)
        contributions = self.contributions
        if contributions is _NO_ITEMS:
            contributions = self.contributions = {}
        contributions.setdefault(step, {}).setdefault(name, []).append(contribution)
        return contribution

    def absorb(self, writes: list[Draft], contributions: list[Contribution]) -> None:
        """Take a nested join's publication into this (the caller's) scope."""
        self.own()
        for write in writes:
            self.writes.setdefault(write.step, {})[write.field] = write
            self._override(write.step, write.field)
        for item in contributions:
            self.contributions.setdefault(item.step, {}).setdefault(item.field, []).append(item)

    def all_writes(self) -> list[Draft]:
        """Every proposed replacement, own and bubbled up."""
        return [w for fields in self.writes.values() for w in fields.values()]

    def all_contributions(self) -> list[Contribution]:
        """Every contribution, own and bubbled up (hidden ones too)."""
        return [*self.overridden, *(c for fields in self.contributions.values()
                                    for items in fields.values() for c in items)]


def path_head(outer: BranchView | None, ordinal: int) -> str:
    """The text every branch path of a barrier starts with (its index follows):
    format_path's text of the outer path, then this level, ``<ordinal>:`` unless the first."""
    return (f"{outer.path_str}." if outer is not None else "") + (
        f"{ordinal}:" if ordinal else "")


def fork_views(
    base: View, plan: Sequence[tuple[Any, str, str, Mapping[str, Any], str | None]],
    ordinal: int, cancel: CancelToken, channels_of: ChannelsOf,
    usages: tuple[BarrierUsage, ...], depth: int, barrier_id: str, outer: BranchView | None,
    start: int = 0, stop: int | None = None,
) -> list[BranchView]:
    """The views of one barrier's branches, one per planned branch (``_plan``'s
    ``(step, name, key, params, message)``) in request order, of requests ``start`` to
    ``stop``: what ``BranchView(...)`` makes, without its keyword-argument binding or a
    path formatted from scratch per branch (the outer branch's is formatted already)."""
    prefix = outer.path if outer is not None else ()
    head = path_head(outer, ordinal)
    new = object.__new__
    views: list[BranchView] = []
    append = views.append
    chosen = plan if start == 0 and stop is None else plan[start:stop]
    for index, (_, step, key, params, _) in enumerate(chosen, start):
        view = new(BranchView)
        view.base = base
        view.step = step
        view.index = index
        view.key = key
        view.path = (*prefix, (ordinal, index)) if prefix else ((ordinal, index),)
        view.params = params
        view.cancel = cancel
        view.channels_of = channels_of
        view.usages = usages
        view.depth = depth
        view.barrier_id = barrier_id
        view.writes = _NO_ITEMS
        view.contributions = _NO_ITEMS
        view.private = _NO_ITEMS
        view.violations = _NO_LIST
        view.memory = _NO_ITEMS
        view.direct = None
        view.overridden = _NO_LIST
        view.barriers = 0
        view.closed = False
        view.outer = outer
        view.tokens = None
        view._seq = 0
        view._folding = None
        view.path_str = head + str(index)
        append(view)
    return views


@dataclass(frozen=True, eq=False)
class Snapshot:
    """A view fixed at a fork: what every branch of one barrier reads through.

    Taking it costs O(steps + written fields + messages), once per barrier — never a copy
    of state values, which are replaced, not mutated, on every write.
    """

    states: Mapping[str, Mapping[str, Any]] | View
    memory: Mapping[str, list[Message]]

    _plain: bool = field(init=False, repr=False, default=False)
    """Whether ``states`` is a plain mapping (decided once: an isinstance against the
    Mapping ABC on every read of every branch costs more than the read)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_plain", isinstance(self.states, Mapping))

    def state_of(self, step: str) -> Mapping[str, Any]:
        states = self.states
        if self._plain:  # every read of every branch comes here: no cast() call
            return states.get(step, _NONE)  # type: ignore[union-attr]
        return states.state_of(step)  # type: ignore[union-attr]

    def memory_of(self, namespace: str) -> list[Message]:
        return self.memory.get(namespace, [])


def snapshot_of(scope: BranchView) -> Snapshot:
    """The calling branch's view as of now (its later writes stay invisible to the fork)."""
    frozen = BranchView(base=scope.base, step=scope.step, index=scope.index, key=scope.key,
                   path=scope.path, params=scope.params, cancel=scope.cancel,
                   channels_of=scope.channels_of, usages=scope.usages, depth=scope.depth,
                   writes={k: dict(v) for k, v in scope.writes.items()},
                   contributions={k: {f: list(c) for f, c in v.items()}
                                  for k, v in scope.contributions.items()},
                   private={k: dict(v) for k, v in scope.private.items()})
    memory = {ns: list(history) for ns, history in scope.memory.items()}
    return Snapshot(states=frozen, memory=_FallbackMemory(memory, scope.base))


class _FallbackMemory(dict[str, list["Message"]]):
    """Namespaces the branch cloned, else its own fork-time base's."""

    def __init__(self, own: dict[str, list[Message]], base: View) -> None:
        super().__init__(own)
        self._base = base

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        return self._base.memory_of(key)


current_view: ContextVar[BranchView | None] = ContextVar("picoflow_branch_view", default=None)
"""The executing branch's view; None outside any branch (canonical state)."""


_FOLDED = frozenset(FOLDED_CHANNELS)
_NONE: Mapping[str, Any] = {}  # read-only default of the lookups above


_ABSENT = object()
"""The initial value of an absent field: each built-in channel starts from its own empty."""


def _fits_initial(kind: str, initial: Any) -> bool:
    """Whether the built-in reducer ``kind`` takes ``initial``; an absent field starts
    from the channel's empty value, which it does."""
    return initial is _ABSENT or takes_accumulator(kind, initial)
