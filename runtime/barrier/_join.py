"""The join: validate the branches of a barrier, reduce, and decide what publishes.

Pure: no anyio, no I/O; the driver (:mod:`runtime.barrier._driver`) applies the result.

Every other place a publication rule lives:

- what a branch may write, and that a violation is recorded before it is raised (so
  catching it cannot hide it): :class:`runtime.barrier.views.BranchView` (``write``,
  ``contribute``, ``violate``); the core's state helpers route branch writes there;
- what a branch reads (its drafts over the fork-time view, contributions reduced in
  request-path order): ``BranchView.state_of`` and ``value_of``;
- a branch past its grace period or budget loses publication rights: the driver closes
  its view (``closed``), and a closed view drops every later write;
- where a valid join publishes (the caller's view, or canonical state with the optional
  root-join checkpoint and its rollback): ``_Barrier.publish`` in the driver;
- how a channel combines values: :mod:`runtime.barrier.reducers`.

Rules, in order:

1. Any invalid shared mutation or configuration error recorded in any branch — fulfilled
   or rejected, caught or not — invalidates the barrier: raise, publish nothing.
2. A fulfilled branch whose output is not plain JSON invalidates the barrier.
3. Candidates are the fulfilled branches; under ``atomic``, none if any branch rejected.
   Rejected branches' writes are always discarded (and say why).
4. Per ``(step, field)`` over the candidates, nested publications included: more than one
   replacement is a conflict; a replacement plus a contribution is a conflict; a
   ``single_writer`` channel written by more than one branch is a conflict.
5. Contributions reduce in request-path order (then call order within an invocation),
   never completion order, from the value the caller saw at the fork. A reducer that
   raises invalidates the barrier.
6. The result lists field values (for a root join), and the raw writes and contributions
   (for a nested join, which publishes them into the caller's scope so the outer join
   can reduce everything in one request-path order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    ParallelOutputError,
    ParallelReducerError,
    ParallelStateConflictError,
)
from ..jsonutil import is_json
from .reducers import Channel
from .types import BranchResult, DiscardedBranch, FailurePolicy
from .views import BranchView, ChannelsOf, Contribution, Draft, View

DELETED = object()
"""Marks a field a join removes."""


@dataclass(frozen=True)
class Reduction:
    """One channel reduced at a join (for the event stream and the debugger)."""

    step: str
    field: str
    channel: str
    initial: Any
    contributions: tuple[Contribution, ...]
    """In request-path order (then call order)."""
    result: Any


@dataclass
class JoinResult:
    """What a valid join publishes."""

    values: dict[tuple[str, str], Any] = field(default_factory=dict)
    """New field values (``DELETED`` for removals), in publication order."""
    writes: list[Draft] = field(default_factory=list)
    contributions: list[Contribution] = field(default_factory=list)
    discarded: list[DiscardedBranch] = field(default_factory=list)
    reductions: list[Reduction] = field(default_factory=list)


def join(
    branches: Sequence[BranchResult],
    views: Sequence[BranchView],
    *,
    policy: FailurePolicy,
    caller_view: View,
    channels_of: ChannelsOf,
) -> JoinResult:
    """Apply the rules above; raise a ``BarrierInvalidError`` or return the result."""
    for view in views:
        if view.violations:
            first = view.violations[0]
            raise type(first)(first.message, extra=_all_provenance(views)) from first
    for branch in branches:
        if branch.output is not None and branch.status == "fulfilled" \
                and not is_json(branch.output):
            raise ParallelOutputError(
                f"Branch {branch.path_str} ({branch.step}) returned a value that is not plain "
                f"JSON: {type(branch.output).__name__}.",
                extra={"provenance": [{"path": branch.path_str, "key": branch.key,
                                       "step": branch.step, "kind": "output"}]},
            )
    result = JoinResult()
    rejected = [b for b in branches if b.status == "rejected"]
    for branch in rejected:
        result.discarded.append(DiscardedBranch(branch.index, branch.key, "rejected"))
    candidates = [s for b, s in zip(branches, views, strict=True) if b.status == "fulfilled"]
    if policy == "atomic" and rejected:
        reason = f"atomic: branch {rejected[0].path_str} ({rejected[0].key}) was rejected"
        for branch in branches:
            if branch.status == "fulfilled":
                result.discarded.append(DiscardedBranch(branch.index, branch.key, reason))
        return result

    writes: dict[tuple[str, str], list[Draft]] = {}
    contributions: dict[tuple[str, str], list[Contribution]] = {}
    for view in candidates:
        # Most branches of a wide fork write nothing: no lists built for them.
        if view.writes:
            for write in view.all_writes():
                writes.setdefault((write.step, write.field), []).append(write)
        if view.contributions or view.overridden:
            for item in view.all_contributions():
                contributions.setdefault((item.step, item.field), []).append(item)

    for target, items in writes.items():
        others = contributions.get(target, [])
        if len(items) > 1 or others:
            raise _conflict(target, items, others)
        result.values[target] = DELETED if items[0].deleted else items[0].value
        result.writes.append(items[0])

    for (step, name), found in contributions.items():
        channel = channels_of(step)[name]
        ordered = sorted(found, key=lambda c: c.order)
        if channel.single_writer and len({c.meta.path for c in ordered}) > 1:
            raise _conflict((step, name), [], ordered)
        state = caller_view.state_of(step)
        initial = channel.initial(name in state, state.get(name))
        value = _reduce(channel, step, name, initial, ordered)
        result.values[(step, name)] = value
        result.contributions.extend(ordered)
        result.reductions.append(Reduction(step, name, channel.kind, initial, tuple(ordered),
                                           value))
    return result


def _reduce(
    channel: Channel, step: str, name: str, initial: Any, ordered: list[Contribution]
) -> Any:
    try:
        return channel.reduce(initial, [(c.meta, c.value) for c in ordered])
    except Exception as exc:
        raise ParallelReducerError(
            f"The '{channel.kind}' reducer of {step}.{name} failed: {exc}",
            extra={"provenance": [c.provenance() for c in ordered], "initial": initial},
        ) from exc


def _conflict(
    target: tuple[str, str], writes: list[Draft], contributions: list[Contribution]
) -> ParallelStateConflictError:
    step, name = target
    writers = [w.provenance() for w in writes] + [c.provenance() for c in contributions]
    who = ", ".join(f"{w['path']} ({w['key']}, {w['kind']})" for w in writers)
    hint = (" Declare a channel in parallel_state_channels() and use contribute_state() for "
            "values that should combine." if writes else "")
    return ParallelStateConflictError(
        f"Conflicting writes to {step}.{name} from branches {who}.{hint}",
        extra={"provenance": writers, "step": step, "field": name},
    )


def _all_provenance(views: Sequence[BranchView]) -> dict[str, Any]:
    items: list[Any] = []
    for view in views:
        for error in view.violations:
            items.extend(error.extra.get("provenance", []))
    return {"provenance": items}

