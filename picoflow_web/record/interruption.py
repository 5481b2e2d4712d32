"""Runs whose executor went quiet become ``interrupted``: the one place that decides it.

Two kinds of executor can vanish. A remote process (:mod:`picoflow_web.record.ingest`)
proves it lives by sending events or heartbeats (a traced one, spans:
:mod:`picoflow_web.record.spans`); one silent for ``PICOFLOW_REMOTE_TIMEOUT``
seconds is lost (:func:`interrupt_silent_runs`), and so is one whose turn has not ended that
long after someone asked it to stop (its process never heard the request, or ignores it).
A dashboard worker proves it by renewing its run's lease
(:mod:`picoflow_web.execute.leases`); one whose lease ended is lost (:func:`expire_leases`).
Either way the run gets a stored ``run.interrupted`` after its last stored event, through
the door every event takes (:mod:`picoflow_web.record.append`), which ends the run:
whatever its executor sends later is refused or dropped.

Both rounds follow the stall rule of :mod:`picoflow_web.record.stalls`: while the database
takes no writes no executor can prove anything, so a round the database kept waiting
declares nothing. Web servers run both rounds (:mod:`picoflow_web.record.watchdog`);
workers run the lease round too, so a run is noticed with no browser open.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from picoflow_web.config import app_settings
from picoflow_web.models import EventRecord, Run
from picoflow_web.record import stalls
from picoflow_web.record.append import Appended, Incoming, Stored, append, broadcast
from picoflow_web.record.spans import SOURCE as SPANS_SOURCE
from runtime.events import dump_event
from runtime.events import interruption as interrupted_event

SAVED_TYPES = ("session.saved", "checkpoint.saved")
"""Events that name the session revision a run saved."""


def lease_seconds() -> float:
    """How long a worker's lease on a run holds (``PICOFLOW_WORKER_LEASE``)."""
    return float(app_settings.get("WORKER_LEASE"))


def remote_timeout() -> float:
    """Seconds of silence after which a remote run is lost (``PICOFLOW_REMOTE_TIMEOUT``)."""
    return float(app_settings.get("REMOTE_TIMEOUT"))


def interrupt(run: Run, last: dict[str, Any], *, silent_for: float, reason: str,
              now: datetime, worker: str | None = None,
              revision: int | None = None) -> Appended:
    """Store ``run``'s ``run.interrupted`` after ``last``, its last stored event, and end
    the run (inside the caller's transaction, with ``run`` locked). ``worker`` and
    ``revision``: the worker that held it and the session revision it saved last."""
    event = interrupted_event(last, now=now.timestamp(),
                              silent_for=round(max(0.0, silent_for), 3), reason=reason,
                              worker=worker, revision=revision)
    # The event continues the rows stored, which the run's counter may not have counted
    # (rows written by other means than the door).
    run.last_seq = event.seq - 1
    incoming: Incoming = (event.seq, event.type, event.path, dump_event(event),
                          event.model_dump(mode="json"))
    return append(run, [incoming], now=now, heard=False)


def interrupt_silent_runs() -> Stored:
    """Declare every remote run silent for longer than the timeout interrupted (stored, not
    yet broadcast), and every one whose process has not ended its turn within the timeout
    of a stop request (it cannot hear one, or does not obey it)."""
    timeout = remote_timeout()

    def verdict(run: Run, now: datetime) -> Appended | None:
        assert run.last_seen_at is not None
        last = _last_stored(run.id)
        if last is None:
            return None
        silent_for = (timezone.now() - run.last_seen_at).total_seconds()
        asked = _stop_asked_at(run)
        if silent_for <= timeout:
            if asked is None or (now - asked).total_seconds() <= timeout:
                return None
            by = (run.cancel_requested or {}).get("by")
            return interrupt(
                run, last, silent_for=silent_for, now=now,
                reason=f"Stop requested{f' by {by}' if by else ''} "
                       f"{(now - asked).total_seconds():.0f} s ago: the process running it "
                       f"did not end the turn within {timeout:g} s.")
        # A trace's run (record.spans) is remote too: its spans are its only sign of life.
        reason = (f"No spans for {timeout:g} s and no root span: the traced process "
                  "stopped exporting." if run.origin.get("source") == SPANS_SOURCE else
                  f"No events or heartbeats for {timeout:g} s: the process running it "
                  "stopped reporting.")
        return interrupt(run, last, silent_for=silent_for, reason=reason, now=now)

    # Runs with a stop request are judged one by one (the request's time is in its JSON).
    return _round(Run.objects.filter(status=Run.Status.RUNNING, origin__kind="remote"),
                  lambda now: Q(last_seen_at__lt=now - timedelta(seconds=timeout))
                  | Q(cancel_requested__isnull=False),
                  timeout, verdict)


def _stop_asked_at(run: Run) -> datetime | None:
    """When someone asked ``run`` to stop (None: nobody, or a time that does not parse)."""
    at = (run.cancel_requested or {}).get("at")
    try:
        asked = datetime.fromisoformat(at) if isinstance(at, str) else None
    except ValueError:
        return None
    return asked if asked is not None and asked.tzinfo is not None else None


def expire_leases() -> Stored:
    """Declare every run whose worker's lease expired interrupted (stored, not yet
    broadcast); its ``run.interrupted`` names the worker and the session revision the
    session stays at."""
    lease = lease_seconds()

    def verdict(run: Run, now: datetime) -> Appended:
        expired = run.lease_expires_at
        assert expired is not None
        last_renewal = expired - timedelta(seconds=lease)
        return interrupt(
            run, _last_stored(run.id) or _before_first(run),
            silent_for=(timezone.now() - last_renewal).total_seconds(),
            reason=f"Worker {run.worker or '?'} stopped renewing its lease on the run "
                   f"(it expired at {expired.isoformat(timespec='seconds')}): the worker "
                   "was stopped or lost.",
            now=now, worker=run.worker or None, revision=_saved_revision(run.id))

    return _round(Run.objects.filter(status=Run.Status.RUNNING, origin__kind="worker"),
                  lambda now: Q(lease_expires_at__lt=now), lease, verdict)


def _round(running: QuerySet[Run], overdue: Callable[[datetime], Q],
           grace: float, verdict: Callable[[Run, datetime], Appended | None]) -> Stored:
    """Interrupt the ``running`` runs ``overdue`` (their filter at a time), one by one by
    ``verdict``, unless the database was stalled: the round waited a quarter of ``grace``
    for the write lock and its reads, or executors have not had ``grace`` seconds of a
    writable database since a stall ended (:mod:`picoflow_web.record.stalls`)."""
    out = Stored()
    round_ = stalls.Round()
    if not running.exists():
        return out  # nobody to judge: no need to take the write lock
    with transaction.atomic():  # SQLite: waits here for the write lock
        now = timezone.now()
        lost = list(running.select_for_update().filter(overdue(now)))
        if not round_.calm(patience=grace / 4, grace=grace):
            return out
        for run in lost:
            appended = verdict(run, timezone.now())
            if appended is not None:
                out.appended.append(appended)
    return out


def _last_stored(run_id: str) -> dict[str, Any] | None:
    last = EventRecord.objects.filter(run_id=run_id).order_by("-seq").values_list(
        "payload", flat=True).first()
    return dict(last) if last is not None else None


def _before_first(run: Run) -> dict[str, Any]:
    """The envelope before a run's first event: claimed, then lost before its first event
    was stored, its interruption is seq 0."""
    started = (run.last_seen_at or run.started_at).timestamp()
    return {"run_id": run.id, "session_id": run.session_id, "seq": -1, "time": started,
            "offset": 0.0}


def _saved_revision(run_id: str) -> int | None:
    """The session revision the run saved last (what the session stays at), if any."""
    saved = EventRecord.objects.filter(run_id=run_id, type__in=SAVED_TYPES).order_by(
        "-seq").values_list("payload", flat=True).first()
    revision = saved.get("revision") if isinstance(saved, dict) else None
    return revision if isinstance(revision, int) else None


def both_rounds() -> Stored:
    """Silent remote runs, then expired leases: what they interrupted (not yet broadcast)."""
    silent = interrupt_silent_runs()
    expired = expire_leases()
    return Stored(silent.appended + expired.appended)


async def sweep() -> int:
    """Both rounds, then tell browsers; how many runs were interrupted."""
    # A thread of its own: a round waits for the database's write lock, as long as a
    # stall lasts, and must not hold up the sync code of requests and sockets meanwhile.
    stored = await sync_to_async(_sweep_sync, thread_sensitive=False)()
    await broadcast(stored.appended)
    return len(stored.appended)


def _sweep_sync() -> Stored:
    try:
        return both_rounds()
    finally:
        connection.close()  # a pool thread's: nothing would ever close it


__all__ = ["SAVED_TYPES", "both_rounds", "expire_leases", "interrupt", "interrupt_silent_runs",
           "lease_seconds", "remote_timeout", "sweep"]
