"""A task backend for in-process web tests: a queued run executes on the test's event loop.

The web tests drive the app in the test process (Django's async test client, Channels'
communicators), where no worker process watches the database queue. This backend starts
the same task function (``picoflow_web.execute.tasks.execute_run``: claim, lease keeper, turn,
recorder) on the running loop the moment it is queued, and returns at once, as queueing
does. Tests with real ``manage.py db_worker`` processes use the database backend (see
``tests/livedaphne.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.utils import timezone
from django_tasks import TaskContext, TaskResult, TaskResultStatus
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import Task
from django_tasks.exceptions import InvalidTaskError
from django_tasks.utils import get_random_id

logger = logging.getLogger("picoflow.web")

INLINE_TASKS = {"default": {"BACKEND": "tests.inline_tasks.InlineBackend"}}
RUNNING: set[asyncio.Task[Any]] = set()
"""Tasks started and not yet done (kept referenced, and awaited by :func:`drain`)."""


class InlineBackend(BaseTaskBackend):
    supports_async_task = True

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        raise InvalidTaskError("The inline backend starts tasks on the running event loop: "
                               "queue them with aenqueue.")

    async def aenqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        self.validate_task(task)
        now = timezone.now()
        result: TaskResult[Any] = TaskResult(
            task=task, id=get_random_id(), status=TaskResultStatus.RUNNING, enqueued_at=now,
            started_at=now, last_attempted_at=now, finished_at=None, args=list(args),
            kwargs=dict(kwargs), backend=self.alias, errors=[], worker_ids=["inline"])

        async def execute() -> None:
            try:
                # Its own sync thread, as a worker has: in the test client, a request's sync
                # middleware holds asgiref's shared thread while the view waits for the run.
                async with ThreadSensitiveContext():
                    await task.func(TaskContext(task_result=result), *args, **kwargs)
            except Exception:
                logger.exception("Inline task %s failed", task.name)

        # A fresh context: the request's context points sync_to_async at the request's
        # own thread executor, which is gone once the response is sent.
        started = asyncio.get_running_loop().create_task(execute(),
                                                         context=contextvars.Context())
        RUNNING.add(started)
        started.add_done_callback(RUNNING.discard)
        return result


async def drain() -> None:
    """Wait for every started task to end."""
    while RUNNING:
        await asyncio.gather(*list(RUNNING), return_exceptions=True)
