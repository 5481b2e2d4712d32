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
  with its own drafts up to N (a contribution's event carries the resulting field value)
  and the publications its inner joins made into its scope up to N. Siblings' drafts up to
  N are listed as invisible to it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import schema as ev

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
    undo: dict[tuple[str, str], tuple[bool, Any]] = field(default_factory=dict)


@dataclass
class RunModel:
    """Everything a view needs to draw one run."""

    run_id: str = ""
    session_id: str = ""
    flow: str = ""
    status: str = "running"
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


def fold(events: Iterable[ev.Event], upto: int | None = None) -> RunModel:
    """Fold one run's events (in ``seq`` order) up to and including ``upto``."""
    run = RunModel(invocations={"": Invocation(path="", step="", status="running")})
    for event in events:
        if upto is not None and event.seq > upto:
            break
        _apply(run, event)
        run.last_seq = event.seq
    return run


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
            deleted = isinstance(event, ev.StateRemoved)
            if isinstance(event, ev.StateContributed):
                value = event.result
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
        case ev.BarrierForked():
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
                run.invocations[request.path] = Invocation(
                    path=request.path, step=request.step, key=request.key,
                    index=request.index, barrier=event.barrier)
        case ev.BranchStarted():
            if inv is not None:
                inv.status, inv.started = "running", event.offset
        case ev.BranchFulfilled():
            if inv is not None:
                inv.status, inv.finished, inv.output = "fulfilled", event.offset, event.output
        case ev.BranchRejected():
            if inv is not None:
                inv.status, inv.finished = "rejected", event.offset
                inv.error, inv.cancelled = event.error.model_dump(), event.cancelled
        case ev.BranchDirectResult():
            if inv is not None:
                inv.output = event.value
        case ev.JoinReduced():
            run.barriers[event.barrier].reductions.append(
                {"step": event.step, "field": event.field, "channel": event.channel,
                 "inputs": event.inputs, "completion_order": event.completion_order,
                 "result": event.result})
        case ev.JoinPublished():
            barrier = run.barriers[event.barrier]
            barrier.outcome, barrier.joined_at = "published", event.offset
            barrier.published = [f.model_dump() for f in event.fields]
            barrier.discarded = list(event.discarded)
            for item in event.fields:
                if event.target == "canonical":
                    fields = run.state.get(item.step, {})
                    barrier.undo[(item.step, item.field)] = (
                        item.field in fields, copy.deepcopy(fields.get(item.field)))
                    _set(run.state, item.step, item.field, item.value, item.deleted)
                elif inv is not None:
                    inv.changes.append((event.seq, item.step, item.field, item.value,
                                        item.deleted))
        case ev.JoinInvalidated():
            barrier = run.barriers[event.barrier]
            barrier.outcome, barrier.joined_at = "invalidated", event.offset
            barrier.error, barrier.provenance = event.error.model_dump(), list(event.provenance)
            run.conflicts.append(event.barrier)
        case ev.CheckpointSaved():
            run.barriers[event.barrier].checkpoint_revision = event.revision
        case ev.CheckpointFailed():
            barrier = run.barriers[event.barrier]
            for (step, name), (present, value) in barrier.undo.items():
                _set(run.state, step, name, value, not present)
            barrier.outcome, barrier.error = "invalidated", event.error.model_dump()
            run.conflicts.append(event.barrier)
        case ev.CancelRequested():
            run.barriers[event.barrier].cancel_reason = event.reason
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
        case _:
            pass


def view_at(run: RunModel, path: str, seq: int | None = None) -> dict[str, Any]:
    """What invocation ``path`` could read at ``seq`` (default: the end of the fold).

    Returns ``{"state": {step: {field: value}}, "own": [...], "invisible": [...]}``: the
    visible state, the changes that came from the invocation itself or its inner joins,
    and the drafts its siblings had made by then (which it could not see).
    """
    limit = run.last_seq if seq is None else seq
    if path == "":
        return {"state": copy.deepcopy(run.state), "own": [], "invisible": []}
    inv = run.invocations[path]
    assert inv.barrier is not None
    barrier = run.barriers[inv.barrier]
    state = _base_state(run, barrier)
    own = [c for c in inv.changes if c[0] <= limit]
    for _, step, name, value, deleted in own:
        _set(state, step, name, value, deleted)
    invisible = [
        {"path": other, "step": step, "field": name, "value": value, "deleted": deleted}
        for other in barrier.branches if other != path
        for seq_, step, name, value, deleted in run.invocations[other].drafts if seq_ <= limit
    ]
    return {
        "state": state,
        "own": [{"seq": s, "step": st, "field": f, "value": v, "deleted": d}
                for s, st, f, v, d in own],
        "invisible": invisible,
    }


def _base_state(run: RunModel, barrier: Barrier) -> State:
    if barrier.base == "canonical":
        return copy.deepcopy(barrier.base_state or {})
    return view_at(run, barrier.base, barrier.forked_seq)["state"]  # type: ignore[no-any-return]


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
