"""The web server's watchdog: one task per web process that notices vanished executors.

Runs whose remote process stopped reporting, or whose worker's lease lapsed, become
``interrupted`` (:mod:`picoflow_web.record.interruption` decides and stores it). Each web
process checks, started by the first request or websocket it serves (:func:`watched`), so
a lost run is noticed even when nobody opens its page; workers check leases themselves
too (``manage.py db_worker``).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from typing import Any

from picoflow_web.record.interruption import lease_seconds, remote_timeout, sweep

logger = logging.getLogger("picoflow.web")

_WATCHDOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary())


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
    interval = min(5.0, remote_timeout() / 4, lease_seconds() / 4)
    while True:
        try:
            await sweep()
        except Exception:  # keep watching; one failed round must not end the watchdog
            logger.exception("Checking runs for silent executors failed")
        await asyncio.sleep(interval)


__all__ = ["ensure", "sweep", "watched"]
