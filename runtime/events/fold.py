"""The fold: a run's events → its run model, and any invocation's view at any moment.

The browser has the same fold (``static/picoflow_web/js/fold.js``); both are checked
against the golden traces in ``tests/golden/`` so they cannot drift.

Rules (mirroring the runtime, so folding never needs the runtime's code or reducers):

* Canonical state starts from ``session.loaded`` and changes by non-draft
  ``state.replaced``/``state.removed``, by ``join.published`` with target ``canonical``,
  and back by ``checkpoint.failed`` (the join is rolled back). The ``_saveOn`` stamp is not
  in events and not in the fold.
* A branch's view at sequence number N is its barrier's fork-time base — the canonical
  state as of ``barrier.forked``, or the calling branch's own view as of then — overlaid
  with its own drafts up to N (a contribution's event carries the resulting field value,
  or names its built-in channel and the fold reduces it onto the view's value before)
  and the publications its inner joins made into its scope up to N. Siblings' drafts up to
  N are listed as invisible to it.

Bad input never raises: like the browser's fold, this one records what it cannot place as
an :class:`Anomaly` in :attr:`RunModel.anomalies` and goes on. An event at or below the
last applied ``seq`` (a duplicate, or out of order) is ignored; a jump in ``seq`` is
recorded as the events missing; so are a draft or a fork on an invocation no fork
announced, a fork that reuses a barrier id or an invocation path or whose base is not its
caller, a branch event for an unknown branch, and an event naming an unknown barrier.
``sink.overflowed`` is recorded in :attr:`RunModel.overflows`.

``run.interrupted`` (recorded by a dashboard when the executor went silent) ends the run:
its status becomes ``interrupted``, :attr:`RunModel.interruption` keeps the reason, and the
branches still running and the barriers still open then are flagged ``interrupted`` (their
own status stays what the events last said). Any event after it is recorded as an anomaly
and not applied; so is a ``run.interrupted`` after ``turn.finished``, ``turn.failed`` or
``turn.cancelled``.

``turn.cancelled`` (the turn was stopped through its cancel token) ends the run like
``turn.failed`` does, without being one: its status becomes ``cancelled`` and
:attr:`RunModel.cancellation` keeps the reason, who asked and the revision the session
stays at. The canonical state is what the events published, which may be more than the
session saved: compare it with the state as of the last ``session.saved``.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import schema as ev
from .concurrent_fold import ConcurrentGroup, apply_concurrent
from .folded import FoldReduceError, reduce_one

State = dict[str, dict[str, Any]]


@dataclass
class Invocation:
    """One branch (or the top level, path ``""``) as the events tell it."""

    path: str
    step: str
    key: str = ""
    index: int = -1
    barrier: str | None = None
    status: str = "queued"
    """queued, running, fulfilled or rejected."""
    interrupted: bool = False
    """The run was interrupted while this branch was running (its status stays running)."""
    cancelled: bool = False
    output: Any = None
    error: dict[str, Any] | None = None
    started: float | None = None
    finished: float | None = None
    barriers: list[str] = field(default_factory=list)
    """Barriers this invocation opened, in order."""
    changes: list[tuple[int, str, str, Any, bool]] = field(default_factory=list)
    """Own drafts and received publications: (seq, step, field, value, deleted)."""
    drafts: list[tuple[int, str, str, Any, bool]] = field(default_factory=list)
    """Own drafts only (what siblings cannot see)."""
    tokens: int = 0
    lost_rights: bool = False
    """A ``cancel.grace_expired`` closed it: it outlived the grace period."""


@dataclass(frozen=True)
class Applied:
    """One field a join's publication record lists as applied, and who it came from."""

    step: str
    field: str
    kind: str
    """replacement, removal or contribution."""
    origin: str
    """The invocation path of the writer or contributor."""


@dataclass
class Barrier:
    """One barrier: its fork, branches and join."""

    id: str
    caller: str
    caller_step: str
    policy: str
    checkpoint: str
    base: str
    forked_seq: int
    forked_at: float
    branches: list[str]
    """Branch paths in request order."""
    base_state: State | None = None
    """Canonical state at the fork (root barriers)."""
    outcome: str = "open"
    """open, published or invalidated."""
    published: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)
    reductions: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    provenance: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_revision: int | None = None
    cancel_reason: str | None = None
    joined_at: float | None = None
    interrupted: bool = False
    """The run was interrupted while this barrier was open (its outcome stays open)."""
    undo: dict[tuple[str, str], tuple[bool, Any]] = field(default_factory=dict)
    target: str | None = None
    """canonical or caller-scope, once published."""
    checkpoint_failed: bool = False
    applied: dict[str, list[Applied]] = field(default_factory=dict)
    """What the join's record applied, under every path from a branch down to its writer."""
    discarded_at: dict[int, dict[str, Any]] = field(default_factory=dict)
    """The ``discarded`` entries by request index."""


@dataclass
class Anomaly:
    """An event the fold could not place (it was applied as far as it could be)."""

    seq: int
    message: str


@dataclass
class Overflow:
    """A ``sink.overflowed`` event: a sink dropped the events ``first`` .. ``last``."""

    seq: int
    sink: str
    first: int
    last: int


@dataclass
class RunModel:
    """Everything a view needs to draw one run."""

    run_id: str = ""
    session_id: str = ""
    flow: str = ""
    status: str = "running"
    """running, finished, failed, interrupted or cancelled."""
    reply: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cursor: str | None = None
    state: State = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    invocations: dict[str, Invocation] = field(default_factory=dict)
    barriers: dict[str, Barrier] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    """Ids of barriers whose join was invalidated."""
    last_seq: int = -1
    anomalies: list[Anomaly] = field(default_factory=list)
    """Events the fold could not place, in the order met."""
    overflows: list[Overflow] = field(default_factory=list)
    """Where sinks dropped events."""
    interruption: dict[str, Any] | None = None
    """``{seq, reason, silent_for}`` of the ``run.interrupted`` that ended the run."""
    cancellation: dict[str, Any] | None = None
    """``{seq, reason, requested_by, revision}`` of the ``turn.cancelled`` that ended it."""
    concurrent: list[ConcurrentGroup] = field(default_factory=list)
    """A coordinator's ``concurrent_steps()`` calls, their batches and children."""
    drafts: bool = True
    """Whether invocations keep their drafts and received publications (what
    :func:`view_at` reads). Without them the fold keeps the canonical state, statuses and
    barriers only."""


def new_run(*, drafts: bool = True) -> RunModel:
    """An empty run model, ready for :func:`apply_event`."""
    return RunModel(invocations={"": Invocation(path="", step="", status="running")},
                    drafts=drafts)


def fold(events: Iterable[ev.Event], upto: int | None = None, *,
         drafts: bool = True) -> RunModel:
    """Fold one run's events (in ``seq`` order) up to and including ``upto``.

    With ``drafts=False`` the branches' drafts are not kept (nor reduced: one branch's k
    contributions to an append channel keep k growing copies of the list, O(k²) time and
    memory), for a reader that wants the canonical state alone: the dashboard's record of
    a remote session.
    """
    run = new_run(drafts=drafts)
    for event in events:
        if upto is not None and event.seq > upto:
            break
        apply_event(run, event)
    return run


def apply_event(run: RunModel, event: ev.Event) -> bool:
    """Apply one event to ``run``; returns False when it was ignored (``seq`` not after the
    last applied one: a resent or out-of-order event). After ``run.interrupted`` an event is
    only recorded as an anomaly: it takes its ``seq`` but changes nothing else."""
    if event.seq <= run.last_seq:
        return False
    if event.seq != run.last_seq + 1 and run.last_seq >= 0:
        _anomaly(run, event, f"events {run.last_seq + 1}..{event.seq - 1} missing")
    if run.interruption is not None:
        _anomaly(run, event, f"{event.type} after run.interrupted")
    else:
        _apply(run, event)
    run.last_seq = event.seq
    return True


def _anomaly(run: RunModel, event: ev.Event, message: str) -> None:
    run.anomalies.append(Anomaly(event.seq, message))


def _barrier_of(run: RunModel, event: ev.Event, barrier_id: str) -> Barrier | None:
    barrier = run.barriers.get(barrier_id)
    if barrier is None:
        _anomaly(run, event, f"{event.type} for unknown barrier {barrier_id}")
    return barrier


def _set(state: State, step: str, name: str, value: Any, deleted: bool) -> None:
    fields = dict(state.get(step, {}))
    if deleted:
        fields.pop(name, None)
    else:
        fields[name] = copy.deepcopy(value)
    state[step] = fields


def _apply(run: RunModel, event: ev.Event) -> None:
    inv = run.invocations.get(event.path)
    match event:
        case ev.TurnStarted():
            run.run_id, run.session_id, run.flow = event.run_id, event.session_id, event.flow
        case ev.SessionLoaded():
            run.session_id = event.session_id
            run.state = copy.deepcopy(event.steps)
            run.cursor, run.tokens = event.current_step, dict(event.tokens)
        case ev.CursorMoved():
            run.cursor = event.to_step
        case ev.StateReplaced() | ev.StateRemoved() | ev.StateContributed():
            if event.draft and not run.drafts:
                return
            deleted = isinstance(event, ev.StateRemoved)
            if isinstance(event, ev.StateContributed):
                value = event.result if event.channel is None or inv is None \
                    or not event.draft else _reduced(run, inv, event)
            elif isinstance(event, ev.StateReplaced):
                value = event.value
            else:
                value = None
            if not event.draft:
                _set(run.state, event.step, event.field, value, deleted)
            elif inv is not None:
                change = (event.seq, event.step, event.field, value, deleted)
                inv.changes.append(change)
                inv.drafts.append(change)
            else:
                _anomaly(run, event, f"draft on unknown invocation {event.path}")
        case ev.BarrierForked():
            if event.barrier in run.barriers:
                _anomaly(run, event, f"barrier {event.barrier} forked again")
            if inv is None:
                _anomaly(run, event, f"fork from unknown invocation {event.path}")
            expected = event.path or "canonical"
            if event.base != expected:
                _anomaly(run, event, f"barrier {event.barrier} has base {event.base}, "
                                     f"not {expected}")
            run.barriers[event.barrier] = Barrier(
                id=event.barrier, caller=event.path, caller_step=event.caller_step,
                policy=event.policy, checkpoint=event.checkpoint, base=event.base,
                forked_seq=event.seq, forked_at=event.offset,
                branches=[r.path for r in event.requests],
                base_state=copy.deepcopy(run.state) if event.base == "canonical" else None,
            )
            if inv is not None:
                inv.barriers.append(event.barrier)
            for request in event.requests:
                if request.path in run.invocations:
                    _anomaly(run, event, f"barrier {event.barrier} reuses path {request.path}")
                run.invocations[request.path] = Invocation(
                    path=request.path, step=request.step, key=request.key,
                    index=request.index, barrier=event.barrier)
        case ev.BranchStarted() | ev.BranchFulfilled() | ev.BranchRejected() if inv is None:
            _anomaly(run, event, f"unknown branch {event.path}")
        case ev.BranchStarted() if inv is not None:
            inv.status, inv.started = "running", event.offset
        case ev.BranchFulfilled() if inv is not None:
            inv.status, inv.finished, inv.output = "fulfilled", event.offset, event.output
        case ev.BranchRejected() if inv is not None:
            inv.status, inv.finished = "rejected", event.offset
            inv.error, inv.cancelled = event.error.model_dump(), event.cancelled
        case ev.BranchDirectResult():
            if inv is not None:
                inv.output = event.value
        case ev.JoinReduced():
            if (barrier := _barrier_of(run, event, event.barrier)) is not None:
                barrier.reductions.append(
                    {"step": event.step, "field": event.field, "channel": event.channel,
                     "inputs": event.inputs, "completion_order": event.completion_order,
                     "result": event.result})
        case ev.JoinPublished():
            if (barrier := _barrier_of(run, event, event.barrier)) is None:
                return
            barrier.outcome, barrier.joined_at = "published", event.offset
            barrier.target = event.target
            barrier.published = [f.model_dump() for f in event.fields]
            barrier.discarded = list(event.discarded)
            barrier.applied = _applied_index(barrier)
            barrier.discarded_at = {d.get("index", -1): d for d in barrier.discarded}
            for item in event.fields:
                if event.target == "canonical":
                    fields = run.state.get(item.step, {})
                    barrier.undo[(item.step, item.field)] = (
                        item.field in fields, copy.deepcopy(fields.get(item.field)))
                    _set(run.state, item.step, item.field, item.value, item.deleted)
                elif inv is not None and run.drafts:
                    inv.changes.append((event.seq, item.step, item.field, item.value,
                                        item.deleted))
        case ev.JoinInvalidated():
            if (barrier := _barrier_of(run, event, event.barrier)) is None:
                return
            barrier.outcome, barrier.joined_at = "invalidated", event.offset
            barrier.error, barrier.provenance = event.error.model_dump(), list(event.provenance)
            run.conflicts.append(event.barrier)
        case ev.CheckpointSaved():
            if (barrier := _barrier_of(run, event, event.barrier)) is not None:
                barrier.checkpoint_revision = event.revision
        case ev.CheckpointFailed():
            if (barrier := _barrier_of(run, event, event.barrier)) is None:
                return
            for (step, name), (present, value) in barrier.undo.items():
                _set(run.state, step, name, value, not present)
            barrier.outcome, barrier.error = "invalidated", event.error.model_dump()
            barrier.checkpoint_failed = True
            run.conflicts.append(event.barrier)
        case ev.CancelRequested():
            if (barrier := _barrier_of(run, event, event.barrier)) is not None:
                barrier.cancel_reason = event.reason
        case ev.CancelPropagated():
            _barrier_of(run, event, event.barrier)
        case ev.CancelGraceExpired():
            if _barrier_of(run, event, event.barrier) is not None:
                for closed in event.closed:
                    if (late := run.invocations.get(closed)) is not None:
                        late.lost_rights = True
        case ev.ModelFinished():
            run.tokens = {k: run.tokens.get(k, 0) + n for k, n in (
                ("input_tokens", event.input_tokens), ("output_tokens", event.output_tokens),
                ("total_tokens", event.total_tokens))}
            if inv is not None:
                inv.tokens += event.total_tokens
        case ev.TurnFinished():
            run.status = "finished"
            run.reply = {"success": event.success, "completed": event.completed,
                         "message": event.message, "content_type": event.content_type}
        case ev.TurnFailed():
            run.status, run.error = "failed", event.error.model_dump()
        case ev.TurnCancelled():
            run.status = "cancelled"
            run.cancellation = {"seq": event.seq, "reason": event.reason,
                                "requested_by": event.requested_by, "revision": event.revision}
        case ev.ConcurrentBatchStarted() | ev.ConcurrentChildStarted() \
                | ev.ConcurrentChildFinished() | ev.ConcurrentBatchFinished():
            apply_concurrent(run.concurrent, event,
                             lambda message: _anomaly(run, event, message))
        case ev.SinkOverflowed():
            run.overflows.append(Overflow(event.seq, event.sink, event.first_seq,
                                          event.last_seq))
        case ev.RunInterrupted():
            if run.status in ("finished", "failed", "cancelled"):
                _anomaly(run, event, f"run.interrupted after turn.{run.status}")
                return
            run.status = "interrupted"
            run.interruption = {"seq": event.seq, "reason": event.reason,
                                "silent_for": event.silent_for}
            for path, invocation in run.invocations.items():
                if path and invocation.status == "running":
                    invocation.interrupted = True
            for barrier in run.barriers.values():
                if barrier.outcome == "open":
                    barrier.interrupted = True
        case _:
            pass


def _reduced(run: RunModel, inv: Invocation, event: ev.StateContributed) -> Any:
    """A contribution whose event names its channel, reduced onto the contributor's view
    of the field just before it (see ``folded.py``)."""
    present, before = _field_at(run, inv.path, event.step, event.field, event.seq,
                                frozenset())
    try:
        return reduce_one(str(event.channel), present, before, event.value, inv.key)
    except FoldReduceError as exc:
        _anomaly(run, event, f"contribution to {event.step}.{event.field}: {exc}")
        return None


def _field_at(run: RunModel, path: str, step: str, name: str, limit: int,
              seen: frozenset[str]) -> tuple[bool, Any]:
    """``(present, value)`` of one field in invocation ``path``'s view before ``limit``:
    its last own change or received publication, else its fork-time base (the canonical
    state then, or its caller's view then)."""
    inv = run.invocations.get(path)
    if inv is None:
        return False, None
    for seq, step_, field_, value, deleted in reversed(inv.changes):
        if seq < limit and step_ == step and field_ == name:
            return not deleted, value
    barrier = run.barriers.get(inv.barrier) if inv.barrier is not None else None
    if barrier is None:
        return False, None
    if barrier.base == "canonical":
        fields = (barrier.base_state or {}).get(step, {})
        return name in fields, fields.get(name)
    if barrier.base in seen or barrier.base not in run.invocations:
        return False, None  # the events do not tell this base (unknown caller, or a cycle)
    return _field_at(run, barrier.base, step, name, barrier.forked_seq, seen | {path})


def view_at(run: RunModel, path: str, seq: int | None = None) -> dict[str, Any]:
    """What invocation ``path`` could read at ``seq`` (default: the end of the fold).

    Returns ``{"state": {step: {field: value}}, "own": [...], "invisible": [...]}``: the
    visible state, the changes that came from the invocation itself or its inner joins,
    and the drafts its siblings had made by then (which it could not see). Raises
    ``KeyError`` for a path the run never announced. A fork-time base the events do not
    tell (a fork from an unknown invocation, recorded as an anomaly) reads as empty.
    """
    if not run.drafts:
        raise ValueError("This run was folded with drafts=False: it keeps no views.")
    return _view(run, path, seq, frozenset())


def _view(run: RunModel, path: str, seq: int | None, seen: frozenset[str]) -> dict[str, Any]:
    limit = run.last_seq if seq is None else seq
    if path == "":
        return {"state": copy.deepcopy(run.state), "own": [], "invisible": []}
    inv = run.invocations[path]
    assert inv.barrier is not None
    barrier = run.barriers[inv.barrier]
    state = _base_state(run, barrier, seen | {path})
    own = [c for c in inv.changes if c[0] <= limit]
    for _, step, name, value, deleted in own:
        _set(state, step, name, value, deleted)
    invisible = [
        {"path": other, "step": step, "field": name, "value": value, "deleted": deleted}
        for other in barrier.branches if other != path and other in run.invocations
        for seq_, step, name, value, deleted in run.invocations[other].drafts if seq_ <= limit
    ]
    return {
        "state": state,
        "own": [{"seq": s, "step": st, "field": f, "value": v, "deleted": d}
                for s, st, f, v, d in own],
        "invisible": invisible,
    }


def _base_state(run: RunModel, barrier: Barrier, seen: frozenset[str]) -> State:
    if barrier.base == "canonical":
        return copy.deepcopy(barrier.base_state or {})
    if barrier.base in seen or (barrier.base and barrier.base not in run.invocations):
        return {}  # the events do not tell this base (unknown caller, or a cycle)
    return _view(run, barrier.base, barrier.forked_seq, seen)["state"]  # type: ignore[no-any-return]


def _path_depth(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def _applied_index(barrier: Barrier) -> dict[str, list[Applied]]:
    """Who each applied field of a join's record came from, indexed under every path from
    the branch down to the writer, so "did anything of ``path`` publish" is one lookup for
    a branch and for any of its descendants. A contribution counts only when the record
    lists its field: a reduction alone publishes nothing."""
    index: dict[str, list[Applied]] = {}
    depth = _path_depth(barrier.caller) + 1

    def add(item: Applied) -> None:
        parts = item.origin.split(".")
        for n in range(depth, len(parts) + 1):
            index.setdefault(".".join(parts[:n]), []).append(item)

    listed = set()
    for f in barrier.published:
        listed.add((f["step"], f["field"]))
        if f.get("writer"):
            add(Applied(f["step"], f["field"], "removal" if f.get("deleted") else "replacement",
                        str(f["writer"])))
    for r in barrier.reductions:
        if (r["step"], r["field"]) in listed:
            for item in r.get("inputs") or []:
                path = item.get("path") if isinstance(item, dict) else None
                if isinstance(path, str):  # a foreign record without one names nobody
                    add(Applied(r["step"], r["field"], "contribution", path))
    return index


@dataclass(frozen=True)
class Publication:
    """What became of an invocation's writes (or a barrier's join), from the join's
    publication record and those of the joins above it.

    ``state`` is ``pending`` (its join has not run), ``scoped`` (applied into the caller's
    private scope, whose own join has not decided yet), ``published`` (``fields`` reached
    the canonical state), ``nothing`` (kept, but no field of the record came from it) or
    ``discarded``, with ``reason`` one of ``rejected``, ``cancelled``, ``late``, ``atomic``,
    ``invalidated``, ``rollback``, ``caller``, ``not-joined`` or ``discarded`` (a reason
    this fold does not know), and ``text`` the same in words. The browser's fold derives
    the same (``publicationOf`` in ``fold.js``); the golden exports compare them."""

    state: str
    reason: str | None
    text: str
    fields: tuple[Applied, ...] = ()
    via: str | None = None
    """The caller whose fate decided it."""

    def as_dict(self) -> dict[str, Any]:
        """The shape of the browser's ``Publication``."""
        return {"state": self.state, "reason": self.reason, "text": self.text,
                "fields": [{"step": f.step, "field": f.field, "kind": f.kind,
                            "origin": f.origin} for f in self.fields],
                "via": self.via}


_KEPT_NOTHING = "Its join kept it, but it wrote nothing that was published."
_CANONICAL = "Published into the canonical session state."


def publication_of(run: RunModel, path: str) -> Publication | None:
    """The publication of invocation ``path`` (None for the turn, or a path no fork
    announced)."""
    inv = run.invocations.get(path)
    if path == "" or inv is None or inv.barrier is None:
        return None
    barrier = run.barriers.get(inv.barrier)
    if barrier is None:
        return None
    verdict = _join_verdict(run, barrier)
    if verdict is not None:
        return verdict
    entry = barrier.discarded_at.get(inv.index)
    if entry is not None:
        return _discarded_branch(inv, entry)
    if inv.status != "fulfilled":
        return Publication("discarded", "rejected", f"Discarded: it ended {inv.status} and its "
                           "join keeps only fulfilled branches.")
    applied = tuple(barrier.applied.get(path, ()))
    if barrier.target == "caller-scope":
        caller = publication_of(run, barrier.caller)
        caller_inv = run.invocations.get(barrier.caller)
        who = _caller_name(run, barrier.caller)
        if caller is not None and caller.state == "discarded":
            why = _unprefixed(caller.text)
            how = (f"failed after this join: {why}"
                   if caller_inv is not None and caller_inv.status == "rejected"
                   else f"was discarded{' ' if why.startswith('by ') else ': '}{why}")
            return Publication("discarded", "caller", f"Discarded with its caller: {who} {how}",
                               via=barrier.caller)
        if not applied:
            return Publication("nothing", None, _KEPT_NOTHING)
        if caller is None or caller.state in ("pending", "scoped"):
            return Publication("scoped", None, f"Published into the scope of its caller {who}; "
                               "its caller's join has not run yet.", applied, barrier.caller)
        root = _canonical_record(run, barrier)
        reached = tuple(root.applied.get(path, ())) if root is not None else ()
        if not reached:
            return Publication("discarded", "caller", "Discarded: its caller's join published "
                               "none of it.", via=barrier.caller)
        return Publication("published", None, _CANONICAL, reached, barrier.caller)
    if not applied:
        return Publication("nothing", None, _KEPT_NOTHING)
    return Publication("published", None, _CANONICAL, applied)


def _unprefixed(text: str) -> str:
    """A caller's reason, to quote inside its descendants' own sentence."""
    return re.sub(r"^Discarded:? ", "", text)


def _canonical_record(run: RunModel, barrier: Barrier) -> Barrier | None:
    """The join above ``barrier`` (or itself) that published into the canonical state."""
    current: Barrier | None = barrier
    while current is not None and current.outcome == "published":
        if current.target == "canonical":
            return current
        caller = run.invocations.get(current.caller)
        if caller is None or caller.barrier is None:
            return None
        current = run.barriers.get(caller.barrier)
    return None


def _join_verdict(run: RunModel, barrier: Barrier) -> Publication | None:
    """What a join that did not publish means for every branch of it."""
    if barrier.outcome == "open":
        if run.status == "running":
            return Publication("pending", None, "Its join has not run yet.")
        why = {"interrupted": "the run was interrupted",
               "cancelled": "the turn was stopped"}.get(run.status, f"the turn {run.status}")
        return Publication("discarded", "not-joined", f"Discarded: {why} before its join ran.")
    if barrier.outcome == "invalidated":
        if barrier.checkpoint_failed:
            return Publication("discarded", "rollback", "Discarded: the root-join checkpoint "
                               "failed and the join's publication was rolled back.")
        code = (barrier.error or {}).get("code") or "conflict"
        return Publication("discarded", "invalidated", f"Discarded: the join was invalidated "
                           f"({code}), so no branch published.")
    return None


def _discarded_branch(inv: Invocation, entry: dict[str, Any]) -> Publication:
    """Why the record discarded a branch: in its words where it has them (``atomic: ...``),
    from the branch's own events where it says only ``rejected``."""
    reason = str(entry.get("reason") or "")
    if reason.startswith("atomic"):
        detail = re.sub(r"^atomic:?\s*", "", reason)
        return Publication("discarded", "atomic", "Discarded by the atomic policy"
                           + (f": {detail}" if detail else "")
                           + "; an atomic batch publishes nothing when any branch is rejected.")
    if reason == "rejected":
        if inv.lost_rights:
            return Publication("discarded", "late", "Discarded: still running when the "
                               "cancellation grace period ended, it lost its publication rights.")
        if inv.cancelled and (inv.error or {}).get("type") == "BranchBudgetError":
            return Publication("discarded", "cancelled", "Discarded: the barrier's token budget "
                               "ran out, so it lost its publication rights.")
        if inv.cancelled:
            return Publication("discarded", "cancelled", "Discarded: cancelled before it started."
                               if inv.started is None else "Discarded: cancelled while it ran.")
        error = ""
        if inv.error:
            error = f"{inv.error.get('type') or 'Error'}: {inv.error.get('message') or ''}".strip()
        return Publication("discarded", "rejected", "Discarded: it was rejected"
                           + (f" ({error})" if error else "") + ".")
    return Publication("discarded", "discarded",
                       f"Discarded: {reason or 'the join did not say why'}.")


def barrier_publication_of(run: RunModel, barrier_id: str) -> dict[str, Any] | None:
    """A barrier's publication (:meth:`Publication.as_dict`) with ``counts``: how many of its
    branches ended in each publication state. None for an unknown barrier."""
    barrier = run.barriers.get(barrier_id)
    if barrier is None:
        return None
    counts = dict.fromkeys(("pending", "scoped", "published", "nothing", "discarded"), 0)
    if barrier.outcome == "open" and run.status == "running":
        counts["pending"] = len(barrier.branches)
    else:
        for path in barrier.branches:
            if (found := publication_of(run, path)) is not None:
                counts[found.state] += 1
    return {**_barrier_publication(run, barrier).as_dict(), "counts": counts}


def _barrier_publication(run: RunModel, barrier: Barrier) -> Publication:
    verdict = _join_verdict(run, barrier)
    if verdict is not None:
        return Publication(verdict.state, verdict.reason,
                           re.sub(r"^Discarded: ", "Nothing published: ", verdict.text))
    fields = tuple(Applied(f["step"], f["field"], "removal" if f.get("deleted") else
                           "replacement", f.get("writer") or "") for f in barrier.published)
    if not fields:
        if barrier.policy == "atomic" and any(str(d.get("reason")).startswith("atomic")
                                              for d in barrier.discarded):
            text = ("Nothing published: the atomic policy discarded every branch because one "
                    "was rejected.")
        elif len(barrier.discarded) >= len(barrier.branches):
            text = "Nothing published: every branch was discarded."
        else:
            text = "Nothing published: no branch wrote anything."
        return Publication("nothing", "discarded" if barrier.discarded else None, text)
    if barrier.target == "caller-scope":
        caller = publication_of(run, barrier.caller)
        where = f"Published into the scope of {_caller_name(run, barrier.caller)}"
        if caller is not None and caller.state == "discarded":
            return Publication("discarded", "caller",
                               f"{where}, then discarded with it: {_unprefixed(caller.text)}",
                               via=barrier.caller)
        if caller is None or caller.state in ("pending", "scoped"):
            return Publication("scoped", None, f"{where}; its join has not run yet.", fields,
                               barrier.caller)
        if caller.state == "nothing":
            return Publication("discarded", "caller", f"{where}, whose join published none of "
                               "it.", via=barrier.caller)
        return Publication("published", None, f"{where}, and from there into the canonical "
                           "state.", fields, barrier.caller)
    return Publication("published", None, _CANONICAL, fields)


def _caller_name(run: RunModel, path: str) -> str:
    """A caller as sentences name it: its branch key (or step) and its path, "news (0.1)"."""
    inv = run.invocations.get(path)
    return f"{inv.key or inv.step} ({path})" if inv is not None else path


def comparable(state: State) -> State:
    """State without the framework fields events do not carry (``_saveOn``, ``_transient``)."""
    return {step: {k: v for k, v in fields.items() if k not in ("_saveOn", "_transient")}
            for step, fields in state.items()}


def runs_of(events: Sequence[ev.Event]) -> dict[str, list[ev.Event]]:
    """Group a mixed event list by run id, keeping order."""
    grouped: dict[str, list[ev.Event]] = {}
    for event in events:
        grouped.setdefault(event.run_id, []).append(event)
    return grouped
