"""The web server's watchdog: runs whose executor went quiet become ``interrupted``.

Two kinds of executor can vanish: a remote process that stops shipping events and
heartbeats (``PICOFLOW_REMOTE_TIMEOUT``, :func:`picoflow_web.ingest.interrupt_silent_runs`)
and a worker whose lease lapses (``PICOFLOW_WORKER_LEASE``,
:func:`picoflow_web.leases.expire`). One task per web process checks both, started by
the first request or websocket the process serves (:func:`watched`); workers check
leases themselves too (``manage.py db_worker``), so a run is noticed with no browser open.
A database stall is no lost executor: a round the database kept waiting declares nothing
(:mod:`picoflow_web.stalls`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from picoflow_web import app_settings, ingest, leases, relay

logger = logging.getLogger("picoflow.web")

_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary())


async def sweep() -> int:
    """One round: interrupt silent remote runs and runs with expired leases, store their
    ``run.interrupted`` events, tell browsers; how many runs were interrupted."""
    # A thread of its own: a round waits for the database's write lock, as long as a
    # stall lasts, and must not hold up the sync code of requests and sockets meanwhile.
    silent, expired = await sync_to_async(_round, thread_sensitive=False)()
    await relay.publish(ingest.messages_of(silent) + ingest.messages_of(expired))
    return len(silent.events) + len(expired.events)


def _round() -> tuple[ingest.Stored, ingest.Stored]:
    try:
        return ingest.interrupt_silent_runs(), leases.expire()
    finally:
        connection.close()  # a pool thread's: nothing would ever close it


def ensure() -> None:
    """Start this process's watchdog on the running loop, once."""
    loop = asyncio.get_running_loop()
    task = _WATCHDOGS.get(loop)
    if task is None or task.done():
        # A fresh context: the request's context points sync_to_async at the request's
        # own thread executor, which is gone once the response is sent.
        _WATCHDOGS[loop] = loop.create_task(_watch(), context=contextvars.Context())


def watched(app: Any) -> Any:
    """The ASGI ``app``, starting this process's watchdog on its first connection.

    A killed worker's run must become ``interrupted`` even when nobody opens a page that
    would start the watchdog, e.g. a client polling ``GET /api/runs/<id>``.
    """

    async def application(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            ensure()
        await app(scope, receive, send)

    return application


async def _watch() -> None:
    interval = min(5.0, app_settings.get("REMOTE_TIMEOUT") / 4, leases.lease_seconds() / 4)
    while True:
        try:
            await sweep()
        except Exception:  # keep watching; one failed round must not end the watchdog
            logger.exception("Checking runs for silent executors failed")
        await asyncio.sleep(interval)


__all__ = ["ensure", "sweep", "watched"]
