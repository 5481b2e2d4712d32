"""The turn's own events: how it starts, what it loads, where its cursor is, how it ends.

``run.interrupted`` (recorded by a dashboard when the executor went silent) ends the run:
its status becomes ``interrupted``, :attr:`~.model.RunModel.interruption` keeps the
reason, and the branches still running and the barriers still open then are flagged
``interrupted`` (their own status stays what the events last said). A ``run.interrupted``
after ``turn.finished``, ``turn.failed`` or ``turn.cancelled`` is an anomaly.

``turn.cancelled`` (the turn was stopped through its cancel token) ends the run like
``turn.failed`` does, without being one: :attr:`~.model.RunModel.cancellation` keeps the
reason, who asked and the revision the session stays at. Nothing is saved after the stop,
so the canonical state goes back to what the store holds, the state as of the last
``session.saved`` (or ``session.loaded``), and what was published in memory since then is
kept apart in :attr:`~.model.RunModel.unsaved`.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import schema as ev
from .model import Handlers, Invocation, Overflow, RunModel, State, anomaly


def _started(run: RunModel, event: ev.TurnStarted, inv: Invocation | None) -> None:
    run.run_id, run.session_id, run.flow = event.run_id, event.session_id, event.flow
    run.resumes = event.resumes


def _session_loaded(run: RunModel, event: ev.SessionLoaded, inv: Invocation | None) -> None:
    run.session_id = event.session_id
    run.state = copy.deepcopy(event.steps)
    run.saved = dict(run.state)  # a field write replaces its step's dict: no deep copy
    run.cursor, run.tokens = event.current_step, dict(event.tokens)


def _session_saved(run: RunModel, event: ev.SessionSaved, inv: Invocation | None) -> None:
    run.saved = dict(run.state)


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
    run.unsaved = unsaved_fields(run.state, run.saved)
    run.state = dict(run.saved)


def unsaved_fields(memory: State, saved: State) -> list[dict[str, Any]]:
    """The fields ``memory`` holds otherwise than ``saved``, step by step in ``memory``'s
    order, then the steps only ``saved`` has: ``{step, field, value, deleted}``."""
    out: list[dict[str, Any]] = []
    for step in [*memory, *(s for s in saved if s not in memory)]:
        now, then = memory.get(step, {}), saved.get(step, {})
        if now is then:
            continue
        for name in [*now, *(f for f in then if f not in now)]:
            if name not in now:
                out.append({"step": step, "field": name, "value": None, "deleted": True})
            elif name not in then or not _same(now[name], then[name]):
                out.append({"step": step, "field": name, "value": copy.deepcopy(now[name]),
                            "deleted": False})
    return out


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



def _same(a: Any, b: Any) -> bool:
    """JSON equality as the browser's fold has it: ``True`` is not ``1``, ``1.0`` is."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict | list) or isinstance(b, dict | list):
        return False
    return bool(a == b)

HANDLERS: Handlers = {
    "turn.started": _started,
    "session.loaded": _session_loaded,
    "session.saved": _session_saved,
    "cursor.moved": _cursor_moved,
    "turn.finished": _finished,
    "turn.failed": _failed,
    "turn.cancelled": _cancelled,
    "run.interrupted": _interrupted,
    "sink.overflowed": _sink_overflowed,
}
