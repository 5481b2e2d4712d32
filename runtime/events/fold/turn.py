"""The turn's own events: how it starts, what it loads, where its cursor is, how it ends.

``run.interrupted`` (recorded by a dashboard when the executor went silent) ends the run:
its status becomes ``interrupted``, :attr:`~.model.RunModel.interruption` keeps the
reason, and the branches still running and the barriers still open then are flagged
``interrupted`` (their own status stays what the events last said). A ``run.interrupted``
after ``turn.finished``, ``turn.failed`` or ``turn.cancelled`` is an anomaly.

``turn.cancelled`` (the turn was stopped through its cancel token) ends the run like
``turn.failed`` does, without being one: :attr:`~.model.RunModel.cancellation` keeps the
reason, who asked and the revision the session stays at.
"""

from __future__ import annotations

import copy

from .. import schema as ev
from .model import Handlers, Invocation, Overflow, RunModel, anomaly


def _started(run: RunModel, event: ev.TurnStarted, inv: Invocation | None) -> None:
    run.run_id, run.session_id, run.flow = event.run_id, event.session_id, event.flow


def _session_loaded(run: RunModel, event: ev.SessionLoaded, inv: Invocation | None) -> None:
    run.session_id = event.session_id
    run.state = copy.deepcopy(event.steps)
    run.cursor, run.tokens = event.current_step, dict(event.tokens)


def _cursor_moved(run: RunModel, event: ev.CursorMoved, inv: Invocation | None) -> None:
    run.cursor = event.to_step


def _finished(run: RunModel, event: ev.TurnFinished, inv: Invocation | None) -> None:
    run.status = "finished"
    run.reply = {"success": event.success, "completed": event.completed,
                 "message": event.message, "content_type": event.content_type}


def _failed(run: RunModel, event: ev.TurnFailed, inv: Invocation | None) -> None:
    run.status, run.error = "failed", event.error.model_dump()


def _cancelled(run: RunModel, event: ev.TurnCancelled, inv: Invocation | None) -> None:
    run.status = "cancelled"
    run.cancellation = {"seq": event.seq, "reason": event.reason,
                        "requested_by": event.requested_by, "revision": event.revision}


def _interrupted(run: RunModel, event: ev.RunInterrupted, inv: Invocation | None) -> None:
    if run.status in ("finished", "failed", "cancelled"):
        anomaly(run, event, f"run.interrupted after turn.{run.status}")
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


def _sink_overflowed(run: RunModel, event: ev.SinkOverflowed, inv: Invocation | None) -> None:
    run.overflows.append(Overflow(event.seq, event.sink, event.first_seq, event.last_seq))


HANDLERS: Handlers = {
    "turn.started": _started,
    "session.loaded": _session_loaded,
    "cursor.moved": _cursor_moved,
    "turn.finished": _finished,
    "turn.failed": _failed,
    "turn.cancelled": _cancelled,
    "run.interrupted": _interrupted,
    "sink.overflowed": _sink_overflowed,
}
