"""The fold of a coordinator's ``concurrent.*`` events: its calls, batches and children.

Part of the run model (:attr:`~runtime.events.fold.RunModel.concurrent`), kept apart from
the barrier fold it has nothing to do with. The browser's fold (``fold_concurrent.js``)
follows the same rules; the ``coordinator`` golden checks both.

* ``concurrent.batch_started`` opens a call (group) at its first batch, records the batch,
  and lists its items as children ``queued``.
* ``concurrent.child_started`` makes a child ``running`` with its run and session ids and
  the attempt; ``concurrent.child_finished`` gives it its end (status, attempts, HTTP
  status, reply or error, duration); ``concurrent.batch_finished`` closes the batch.
* An event for a call, batch or item no earlier event announced is an anomaly (the
  caller records it), like any event the fold cannot place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import schema as ev


@dataclass
class ConcurrentBatch:
    batch: int
    items: list[int]
    started_seq: int
    started_at: float
    finished_seq: int | None = None
    finished_at: float | None = None
    fulfilled: int | None = None
    failed: int | None = None


@dataclass
class ConcurrentChild:
    item: int
    batch: int
    status: str = "queued"
    """queued, running, then how it ended (:data:`~runtime.events.schema.ChildStatus`)."""
    run_id: str | None = None
    session_id: str | None = None
    attempts: int = 0
    started_seq: int | None = None
    started_at: float | None = None
    finished_seq: int | None = None
    finished_at: float | None = None
    duration: float | None = None
    http_status: int | None = None
    completed: bool | None = None
    reply: Any = None
    error: dict[str, Any] | None = None


@dataclass
class ConcurrentGroup:
    """One ``concurrent_steps()`` call of the coordinator."""

    group: str
    flow: str
    batches: int
    total: int
    """Items of the call."""
    batch_size: int
    timeout: float
    retries: int
    caller: str
    """The invocation path it was called from (``""``: the turn)."""
    batch_list: list[ConcurrentBatch] = field(default_factory=list)
    children: dict[int, ConcurrentChild] = field(default_factory=dict)


ConcurrentEvent = (ev.ConcurrentBatchStarted | ev.ConcurrentChildStarted
                   | ev.ConcurrentChildFinished | ev.ConcurrentBatchFinished)


def apply_concurrent(groups: list[ConcurrentGroup], event: ConcurrentEvent,
                     anomaly: Callable[[str], None]) -> None:
    """Apply one ``concurrent.*`` event to the run's calls; ``anomaly`` hears what it
    cannot place."""
    found = next((g for g in groups if g.group == event.group), None)
    if isinstance(event, ev.ConcurrentBatchStarted):
        if found is None:
            found = ConcurrentGroup(
                group=event.group, flow=event.flow, batches=event.batches, total=event.total,
                batch_size=event.batch_size, timeout=event.timeout, retries=event.retries,
                caller=event.path)
            groups.append(found)
        if any(b.batch == event.batch for b in found.batch_list):
            anomaly(f"concurrent batch {event.group}/{event.batch} started again")
            return
        found.batch_list.append(ConcurrentBatch(event.batch, list(event.items), event.seq,
                                                event.offset))
        for item in event.items:
            if item in found.children:
                anomaly(f"concurrent item {event.group}/{item} in two batches")
                continue
            found.children[item] = ConcurrentChild(item=item, batch=event.batch)
        return
    if found is None:
        anomaly(f"{event.type} for unknown concurrent call {event.group}")
        return
    if isinstance(event, ev.ConcurrentBatchFinished):
        batch = next((b for b in found.batch_list if b.batch == event.batch), None)
        if batch is None:
            anomaly(f"{event.type} for unknown batch {event.group}/{event.batch}")
            return
        batch.finished_seq, batch.finished_at = event.seq, event.offset
        batch.fulfilled, batch.failed = event.fulfilled, event.failed
        return
    child = found.children.get(event.item)
    if child is None or child.batch != event.batch:
        anomaly(f"{event.type} for unknown item {event.group}/{event.item}")
        return
    child.run_id, child.session_id = event.child_run_id, event.child_session_id
    if isinstance(event, ev.ConcurrentChildStarted):
        child.status, child.attempts = "running", event.attempt
        if child.started_seq is None:
            child.started_seq, child.started_at = event.seq, event.offset
        return
    child.status, child.attempts, child.duration = event.status, event.attempts, event.duration
    child.finished_seq, child.finished_at = event.seq, event.offset
    child.http_status, child.completed, child.reply = (event.http_status, event.completed,
                                                       event.reply)
    child.error = event.error.model_dump() if event.error is not None else None


def export_groups(groups: list[ConcurrentGroup]) -> list[dict[str, Any]]:
    """The calls as plain JSON (children in item order), as both folds' exports give them."""
    return [{
        "group": g.group, "flow": g.flow, "batches": g.batches, "total": g.total,
        "batch_size": g.batch_size,
        "timeout": g.timeout, "retries": g.retries, "caller": g.caller,
        "batch_list": [{
            "batch": b.batch, "items": b.items, "started_seq": b.started_seq,
            "finished_seq": b.finished_seq, "fulfilled": b.fulfilled, "failed": b.failed,
        } for b in g.batch_list],
        "children": [{
            "item": c.item, "batch": c.batch, "status": c.status, "run_id": c.run_id,
            "session_id": c.session_id, "attempts": c.attempts, "started_seq": c.started_seq,
            "finished_seq": c.finished_seq, "http_status": c.http_status,
            "completed": c.completed, "reply": c.reply,
            "error_code": (c.error or {}).get("code"),
        } for c in sorted(g.children.values(), key=lambda c: c.item)],
    } for g in groups]
