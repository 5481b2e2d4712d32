"""A coordinator's ``concurrent.*`` events: its calls, their batches and children.

Part of the run model (:attr:`~.model.RunModel.concurrent`), apart from the barrier
families it has nothing to do with.

* ``concurrent.batch_started`` opens a call (group) at its first batch, records the batch,
  and lists its items as children ``queued``.
* ``concurrent.child_started`` makes a child ``running`` with its run and session ids and
  the attempt; ``concurrent.child_finished`` gives it its end (status, attempts, HTTP
  status, reply or error, duration); ``concurrent.batch_finished`` closes the batch.
* An event for a call, batch or item no earlier event announced is an anomaly.
"""

from __future__ import annotations

from typing import Any

from .. import schema as ev
from .model import (
    ConcurrentBatch,
    ConcurrentChild,
    ConcurrentGroup,
    Handlers,
    Invocation,
    RunModel,
    anomaly,
)


def _group(run: RunModel, group: str) -> ConcurrentGroup | None:
    return next((g for g in run.concurrent if g.group == group), None)


def _batch_started(run: RunModel, event: ev.ConcurrentBatchStarted,
                   inv: Invocation | None) -> None:
    found = _group(run, event.group)
    if found is None:
        found = ConcurrentGroup(
            group=event.group, flow=event.flow, batches=event.batches, total=event.total,
            batch_size=event.batch_size, timeout=event.timeout, retries=event.retries,
            caller=event.path)
        run.concurrent.append(found)
    if any(b.batch == event.batch for b in found.batch_list):
        anomaly(run, event, f"concurrent batch {event.group}/{event.batch} started again")
        return
    found.batch_list.append(ConcurrentBatch(event.batch, list(event.items), event.seq,
                                            event.offset))
    for item in event.items:
        if item in found.children:
            anomaly(run, event, f"concurrent item {event.group}/{item} in two batches")
            continue
        found.children[item] = ConcurrentChild(item=item, batch=event.batch)


def _known_group(run: RunModel, event: ev.ConcurrentBatchFinished | ev.ConcurrentChildStarted
                 | ev.ConcurrentChildFinished) -> ConcurrentGroup | None:
    found = _group(run, event.group)
    if found is None:
        anomaly(run, event, f"{event.type} for unknown concurrent call {event.group}")
    return found


def _batch_finished(run: RunModel, event: ev.ConcurrentBatchFinished,
                    inv: Invocation | None) -> None:
    if (found := _known_group(run, event)) is None:
        return
    batch = next((b for b in found.batch_list if b.batch == event.batch), None)
    if batch is None:
        anomaly(run, event, f"{event.type} for unknown batch {event.group}/{event.batch}")
        return
    batch.finished_seq, batch.finished_at = event.seq, event.offset
    batch.fulfilled, batch.failed = event.fulfilled, event.failed


def _child(run: RunModel, event: ev.ConcurrentChildStarted | ev.ConcurrentChildFinished
           ) -> ConcurrentChild | None:
    """The child an event names, with the run and session ids the event gives it."""
    if (found := _known_group(run, event)) is None:
        return None
    child = found.children.get(event.item)
    if child is None or child.batch != event.batch:
        anomaly(run, event, f"{event.type} for unknown item {event.group}/{event.item}")
        return None
    child.run_id, child.session_id = event.child_run_id, event.child_session_id
    return child


def _child_started(run: RunModel, event: ev.ConcurrentChildStarted,
                   inv: Invocation | None) -> None:
    if (child := _child(run, event)) is None:
        return
    child.status, child.attempts = "running", event.attempt
    if child.started_seq is None:
        child.started_seq, child.started_at = event.seq, event.offset


def _child_finished(run: RunModel, event: ev.ConcurrentChildFinished,
                    inv: Invocation | None) -> None:
    if (child := _child(run, event)) is None:
        return
    child.status, child.attempts, child.duration = event.status, event.attempts, event.duration
    child.finished_seq, child.finished_at = event.seq, event.offset
    child.http_status, child.completed, child.reply = (event.http_status, event.completed,
                                                       event.reply)
    child.error = event.error.model_dump() if event.error is not None else None


HANDLERS: Handlers = {
    "concurrent.batch_started": _batch_started,
    "concurrent.child_started": _child_started,
    "concurrent.child_finished": _child_finished,
    "concurrent.batch_finished": _batch_finished,
}


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
