"""Worker leases: which worker executes a run, and noticing when it is gone.

A worker takes a queued run by *claiming* it: one conditional update turns it ``running``
with the worker's id and a lease that ends ``PICOFLOW_WORKER_LEASE`` seconds later. Only
one update can win, so a run is never executed by two workers, and a run that is no longer
queued (cancelled, interrupted, taken) is not executed at all. While the turn runs, a
:class:`LeaseKeeper` thread renews the lease and watches for a stop request.

A lease that expired means its worker stopped (killed, machine gone, or stuck for longer
than a lease): such runs are declared ``interrupted``
(:func:`picoflow_web.record.interruption.expire_leases`, with a stored ``run.interrupted``
event that names the worker and the session revision the session stays at). Web servers
(their watchdog) and workers (at start-up and while they wait, :func:`expire_in_background`)
run it.

A database that takes no writes for a while (another connection holds its lock) is no
lost worker: the keeper retries its renewal for as long as that lasts, and time the
database was stalled counts against a lease only after the stall ended
(:mod:`picoflow_web.record.stalls`). A worker that finds its lease gone (its run was declared
interrupted, or another worker holds it) stops its turn and records nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from picoflow_web.models import Run
from picoflow_web.record.append import Stored
from picoflow_web.record.interruption import expire_leases, lease_seconds

logger = logging.getLogger("picoflow.web")

CANCEL_POLL = 0.2
"""Seconds between a keeper's looks for a stop request (the Stop button's latency)."""


def claim(run_id: str, worker: str) -> Run | None:
    """Take a queued run for ``worker``; None if it is not queued (any more)."""
    now = timezone.now()
    taken = Run.objects.filter(id=run_id, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING, worker=worker[:100],
        lease_expires_at=now + timedelta(seconds=lease_seconds()), last_seen_at=now)
    return Run.objects.get(id=run_id) if taken else None


class LeaseKeeper(threading.Thread):
    """Renews one run's lease while its turn runs, and passes on a stop request.

    A thread, not a task on the turn's event loop: a turn with a hundred thousand ready
    branches can keep its loop busy for seconds, and the lease must not lapse for that.
    ``on_cancel(reason, by)`` is called once, from this thread, when someone asks the run
    to stop; ``on_lost()`` once, when the lease is not this worker's any more (the run was
    declared interrupted, or another worker holds it): the turn must stop and record
    nothing more.

    Each renewal is a transaction of its own that waits for the database's write lock
    (up to the busy timeout) and dates the new deadline once it has it, so a stalled
    database delays a renewal but does not shorten the lease it writes. A renewal that
    failed (the stall outlasted the busy timeout) is tried again at the next tick.
    """

    def __init__(self, run_id: str, worker: str, *,
                 on_cancel: Callable[[str, str | None], None],
                 on_lost: Callable[[], None]) -> None:
        super().__init__(name=f"lease-{run_id}", daemon=True)
        self.run_id, self.worker = run_id, worker[:100]
        self.on_cancel, self.on_lost = on_cancel, on_lost
        self._done = threading.Event()
        self._cancel_seen = False
        self.lost = False
        """Whether the lease was found gone (``on_lost`` was called)."""

    def stop(self) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        renew_every = lease_seconds() / 4
        tick = min(CANCEL_POLL, renew_every)
        due = time.monotonic() + renew_every
        try:
            while not self._done.wait(max(0.0, min(tick, due - time.monotonic()))):
                try:
                    if time.monotonic() >= due:
                        started = time.monotonic()
                        if not self._renew():
                            if self._lost():
                                self.lost = True
                                self.on_lost()
                            return
                        # A renewal that waited long may carry a deadline dated before
                        # the wait ended (PostgreSQL's row locks): renew again at once.
                        waited = time.monotonic() - started
                        due = time.monotonic() + (0.0 if waited > renew_every else renew_every)
                    if not self._cancel_seen:
                        self._check_cancel()
                except Exception:  # the database refused (a stall past the busy timeout)
                    logger.exception("Keeping the lease of run %s failed; trying again",
                                     self.run_id)
        finally:
            connection.close()

    def _renew(self) -> bool:
        """Push the lease's end a lease ahead; False when the run is not running here."""
        with transaction.atomic():  # SQLite: waits here for the write lock
            expires = timezone.now() + timedelta(seconds=lease_seconds())
            return bool(Run.objects.filter(
                id=self.run_id, status=Run.Status.RUNNING, worker=self.worker,
            ).update(lease_expires_at=expires))

    def _lost(self) -> bool:
        """Whether a run no longer running here was lost, not ended by its own turn (whose
        end may come just before the keeper is stopped)."""
        held = Run.objects.filter(id=self.run_id).values_list("status", "worker").first()
        if held is not None and held[1] == self.worker and held[0] in Run.ENDED - {
                Run.Status.INTERRUPTED}:
            return False
        logger.warning("Worker %s lost its lease on run %s (%s): it stops the turn and "
                       "records nothing more", self.worker, self.run_id,
                       "gone" if held is None else f"{held[0]}, worker {held[1] or '?'}")
        return True

    def _check_cancel(self) -> None:
        request = Run.objects.filter(id=self.run_id).values_list(
            "cancel_requested", flat=True).first()
        if request:
            self._cancel_seen = True
            by = request.get("by")
            self.on_cancel(f"stopped by {by}" if by else "stopped", by)


def expire_in_background(publish: Callable[[Stored], None], stop: threading.Event) -> None:
    """A worker's reaper: :func:`~picoflow_web.record.interruption.expire_leases` now, then
    every quarter lease until ``stop``; ``publish`` tells browsers what it interrupted."""
    while True:
        try:
            close_old_connections()
            publish(expire_leases())
        except Exception:
            logger.exception("Checking worker leases failed")
        if stop.wait(lease_seconds() / 4):
            connection.close()
            return


__all__ = ["LeaseKeeper", "claim", "expire_in_background", "lease_seconds"]
