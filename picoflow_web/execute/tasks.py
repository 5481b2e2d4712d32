"""The queued task that executes a run (Django's Tasks framework, database backend).

``services.run_start`` queues it; ``manage.py db_worker`` processes take it and run it to
the end (see :mod:`picoflow_web.execute.execution`). Its only argument is the run id: everything
else the turn needs is on the run's row, written before the task was queued.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django_tasks import TaskContext, task

from picoflow_web.execute.execution import run_in_worker, run_orphaned
from picoflow_web.live import relay


@task(takes_context=True)
async def execute_run(context: TaskContext, run_id: str) -> str:
    """Execute the queued run ``run_id``; the status it ended with."""
    workers = context.task_result.worker_ids
    worker = workers[-1] if workers else "worker"
    try:
        return await run_in_worker(run_id, worker)
    except Exception as exc:
        # Not a flow's failure (the engine turns those into replies): the worker's own.
        # The run must not wait for ever: it fails, saying why.
        await sync_to_async(run_orphaned)(run_id, worker, exc)
        raise
    finally:
        # The run's last batches may still wait for the relay socket; a worker that stops
        # after this task must not take them along.
        await sync_to_async(relay.drain, thread_sensitive=False)()


__all__ = ["execute_run"]
