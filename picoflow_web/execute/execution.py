"""Executing a run in a worker: claim it, hold its lease, run the turn, record its end.

Called by the queued task (:mod:`picoflow_web.tasks`) in whichever worker took it. A run
that is not queued any more (stopped before it started, interrupted, or taken by another
worker) is not executed; one whose lease this worker loses while it runs (declared
interrupted, or held by another worker) is stopped, and nothing more of it is recorded.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async

from picoflow_web import leases, services
from runtime import CancelToken

logger = logging.getLogger("picoflow.web")


async def run_in_worker(run_id: str, worker: str) -> str:
    """Execute the queued run ``run_id`` as ``worker``; the status it ended with."""
    run = await sync_to_async(leases.claim)(run_id, worker)
    if run is None:
        logger.info("Run %s is not queued any more; %s leaves it", run_id, worker)
        return "skipped"
    await services.run_broadcast(run)
    token = CancelToken()
    loop = asyncio.get_running_loop()

    def cancel(reason: str, by: str | None) -> None:  # called from the keeper's thread
        loop.call_soon_threadsafe(lambda: token.cancel(reason, by=by))

    def lost() -> None:  # the recorder and the reply are refused by the run's row too
        cancel("the worker lost its lease on the run", None)

    keeper = leases.LeaseKeeper(run_id, worker, on_cancel=cancel, on_lost=lost)
    keeper.start()
    try:
        await services.run_execute_claimed(run, cancel=token)
    finally:
        await asyncio.to_thread(keeper.stop)
    if keeper.lost:
        logger.warning("Worker %s stopped run %s: its lease was gone", worker, run_id)
        return "lost"
    ended = await sync_to_async(lambda: type(run).objects.get(id=run_id).status)()
    return str(ended)


def run_orphaned(run_id: str, worker: str, exc: BaseException) -> None:
    """End a run its worker could not execute or finish (a database error, say): failed,
    if it is still queued or still this worker's."""
    from django.db.models import Q
    from django.utils import timezone

    from picoflow_web.models import Run

    logger.error("Worker %s could not execute run %s: %s", worker, run_id, exc)
    Run.objects.filter(Q(status=Run.Status.QUEUED) | Q(status=Run.Status.RUNNING, worker=worker),
                       id=run_id).update(
        status=Run.Status.FAILED, finished_at=timezone.now(), lease_expires_at=None,
        reply={"success": False, "completed": False, "session_id": "",
               "message": f"The worker could not execute the run: {type(exc).__name__}: {exc}",
               "content_type": "text/plain", "error_code": "worker_error"})


__all__ = ["run_in_worker", "run_orphaned"]
