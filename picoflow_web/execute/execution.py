"""Executing a run in a worker: claim it, hold its lease, run the turn, record its end.

Called by the queued task (:mod:`picoflow_web.execute.tasks`) in whichever worker took it. A run
that is not queued any more (stopped before it started, interrupted, or taken by another
worker) is not executed; one whose lease this worker loses while it runs (declared
interrupted, or held by another worker) is stopped, and nothing more of it is recorded.

The services (:mod:`picoflow_web.execute.services`) queue the task, and use what is here
to announce a run and to end one that could not be queued: the dependency runs one way,
services → tasks → execution.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import Q
from django.utils import timezone

from picoflow_web.config import app_settings
from picoflow_web.data.documents import acting_in
from picoflow_web.data.redact import redact
from picoflow_web.execute import leases
from picoflow_web.execute.engine import get_engine
from picoflow_web.live import groups
from picoflow_web.models import Run
from picoflow_web.record.recorder import RunRecorder
from runtime import CancelToken, RunReply

logger = logging.getLogger("picoflow.web")

TURN_CANCELLED = "turn_cancelled"
"""The reply's ``error_code`` of a stopped turn."""


async def run_in_worker(run_id: str, worker: str) -> str:
    """Execute the queued run ``run_id`` as ``worker``; the status it ended with."""
    run = await sync_to_async(leases.claim)(run_id, worker)
    if run is None:
        logger.info("Run %s is not queued any more; %s leaves it", run_id, worker)
        return "skipped"
    await run_broadcast(run)
    token = CancelToken()
    loop = asyncio.get_running_loop()

    def cancel(reason: str, by: str | None) -> None:  # called from the keeper's thread
        loop.call_soon_threadsafe(lambda: token.cancel(reason, by=by))

    def lost() -> None:  # the recorder and the reply are refused by the run's row too
        cancel("the worker lost its lease on the run", None)

    keeper = leases.LeaseKeeper(run_id, worker, on_cancel=cancel, on_lost=lost)
    keeper.start()
    try:
        await run_execute_claimed(run, cancel=token)
    finally:
        await asyncio.to_thread(keeper.stop)
    if keeper.lost:
        logger.warning("Worker %s stopped run %s: its lease was gone", worker, run_id)
        return "lost"
    ended = await sync_to_async(lambda: type(run).objects.get(id=run_id).status)()
    return str(ended)


async def run_execute_claimed(run: Run, *, cancel: CancelToken | None = None) -> RunReply:
    """Execute a run a worker has claimed, recording its events; its reply."""
    # Its worker's alone: a worker that lost the run (interrupted, or another worker
    # holds it) stores no more events and no reply.
    recorder = RunRecorder(run.id, lease_seconds=app_settings.get("WORKER_LEASE"),
                           worker=run.worker or None)
    recorder.start()
    try:
        # The session store reads and writes only its own. (project_id is never null:
        # django-stubs types a foreign key with a default as nullable.)
        with acting_in(run.project_id):  # type: ignore[arg-type]
            if run.origin.get("resumes"):  # POST /api/runs/<id>/resume queued it
                # The ledger's turn record holds the flow, message and config it resumes.
                reply = await get_engine().resume(run.session_id, run_id=run.id,
                                                  sinks=[recorder], cancel=cancel)
            else:
                reply = await get_engine().run(
                    run.flow, run.message or None, session_id=run.session_id or None,
                    config=run.config, run_id=run.id, sinks=[recorder], cancel=cancel)
    finally:
        await recorder.close()
    cancelled = reply.error_code == TURN_CANCELLED
    await run_finish(run.id, reply.model_dump(),
                     status=Run.Status.CANCELLED if cancelled else None,
                     worker=run.worker or None)
    return reply


async def run_finish(run_id: str, reply: dict[str, Any], *, status: str | None = None,
                     only_from: str = Run.Status.RUNNING, worker: str | None = None) -> Run:
    """Record a turn's reply on its run, and announce the ended run.

    Only a run still ``only_from`` (running), and still ``worker``'s when given, changes:
    one declared interrupted meanwhile (its lease lapsed) stays interrupted, and one
    another worker holds is left to it.
    """
    if status is None:
        status = Run.Status.FINISHED if reply["success"] else Run.Status.FAILED
    # The reply's session id, not the request's: a turn without one started a session.
    mine = {"worker": worker} if worker else {}
    await Run.objects.filter(id=run_id, status=only_from, **mine).aupdate(
        status=status, reply=redact(reply), session_id=reply["session_id"],
        finished_at=timezone.now(), lease_expires_at=None)
    run = await Run.objects.aget(id=run_id)
    await run_broadcast(run)
    return run


async def run_broadcast(run: Run) -> None:
    """Tell the runs list about a new or changed run."""
    await groups.runs_send(run.summary())


def run_orphaned(run_id: str, worker: str, exc: BaseException) -> None:
    """End a run its worker could not execute or finish (a database error, say): failed,
    if it is still queued or still this worker's."""
    logger.error("Worker %s could not execute run %s: %s", worker, run_id, exc)
    Run.objects.filter(Q(status=Run.Status.QUEUED) | Q(status=Run.Status.RUNNING, worker=worker),
                       id=run_id).update(
        status=Run.Status.FAILED, finished_at=timezone.now(), lease_expires_at=None,
        reply={"success": False, "completed": False, "session_id": "",
               "message": f"The worker could not execute the run: {type(exc).__name__}: {exc}",
               "content_type": "text/plain", "error_code": "worker_error"})


__all__ = ["TURN_CANCELLED", "run_broadcast", "run_execute_claimed", "run_finish",
           "run_in_worker", "run_orphaned"]
