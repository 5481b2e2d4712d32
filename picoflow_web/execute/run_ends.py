"""Waiting for a run's end by hearing it (``POST /ai/run``), not by reading it over and over.

Whoever ends a run (a worker, ingest, the watchdog) announces it to the runs list's group
(:data:`picoflow_web.live.groups.RUNS_GROUP`, a ``run.summary`` message), and every web process
hears that group through its channel layer. One listener per event loop joins the group
once and wakes the waiters of the run a summary says ended; a waiter then reads the run
once. A waiter still reads the run every :data:`RECHECK` seconds on its own, for an end it
cannot hear (a message lost on the way, a worker that cannot reach this process).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from collections.abc import AsyncIterator
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer

from picoflow_web.live.groups import RUNS_GROUP
from picoflow_web.models import Run

logger = logging.getLogger("picoflow.web")

RECHECK = 2.0
"""Seconds between a waiter's own reads of its run."""
REJOIN = 3600.0
"""Seconds between the listener's renewals of its group membership (the in-memory layer
drops members after a day)."""


class _Listener:
    """This loop's member of the runs group, and the waiters it wakes."""

    def __init__(self, layer: BaseChannelLayer) -> None:
        self.layer = layer
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.watchers: dict[str, set[asyncio.Event]] = {}
        """Woken by any summary of their run (:func:`changes`), not only an end."""
        self.joined = asyncio.Event()
        # A fresh context: the first waiter's request context ends with its request.
        self.task = asyncio.get_running_loop().create_task(self._listen(),
                                                           context=contextvars.Context())

    async def _listen(self) -> None:
        channel = await self.layer.new_channel()
        try:
            while True:
                await self.layer.group_add(RUNS_GROUP, channel)
                self.joined.set()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REJOIN):
                        while True:
                            self._heard(await self.layer.receive(channel))
        finally:
            with contextlib.suppress(Exception):
                await self.layer.group_discard(RUNS_GROUP, channel)

    def _heard(self, message: dict[str, Any]) -> None:
        run = message.get("run") if message.get("type") == "run.summary" else None
        if isinstance(run, dict):
            for changed in self.watchers.get(str(run.get("id")), ()):
                changed.set()
        if isinstance(run, dict) and run.get("status") in Run.ENDED:
            for ended in self.waiters.get(str(run.get("id")), ()):
                ended.set()

    def watch(self, run_id: str) -> asyncio.Event:
        ended = asyncio.Event()
        self.waiters.setdefault(run_id, set()).add(ended)
        return ended

    def unwatch(self, run_id: str, ended: asyncio.Event) -> None:
        waiting = self.waiters.get(run_id)
        if waiting is not None:
            waiting.discard(ended)
            if not waiting:
                del self.waiters[run_id]


_LISTENERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Listener] = (
    weakref.WeakKeyDictionary())


async def _listener() -> _Listener | None:
    """This loop's listener, joined to the group (None without a channel layer)."""
    layer = get_channel_layer()
    if layer is None:
        return None
    loop = asyncio.get_running_loop()
    listener = _LISTENERS.get(loop)
    if listener is None or listener.layer is not layer or listener.task.done():
        if listener is not None:
            if listener.task.done() and not listener.task.cancelled():
                logger.warning("Listening for runs' ends stopped: %r", listener.task.exception())
            listener.task.cancel()  # a layer replaced meanwhile (settings changed)
        listener = _LISTENERS[loop] = _Listener(layer)
    await listener.joined.wait()
    return listener


async def subscribed() -> None:
    """Until this loop hears runs end (at once when it already does)."""
    await _listener()


@contextlib.asynccontextmanager
async def changes(run_ids: list[str]) -> AsyncIterator[asyncio.Event]:
    """An event set whenever this process hears a summary of one of ``run_ids`` (a stop
    request, an end); joined on entry, so a change after what the caller reads next is
    heard. Without a channel layer it is never set: callers read again on their own."""
    changed = asyncio.Event()
    listener = await _listener()
    if listener is not None:
        for run_id in run_ids:
            listener.watchers.setdefault(run_id, set()).add(changed)
    try:
        yield changed
    finally:
        if listener is not None:
            for run_id in run_ids:
                watching = listener.watchers.get(run_id)
                if watching is not None:
                    watching.discard(changed)
                    if not watching:
                        del listener.watchers[run_id]


async def wait(run_id: str, timeout: float) -> Run:
    """The run once it ended, or as it is after ``timeout`` seconds of waiting."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    listener = await _listener()
    ended = listener.watch(run_id) if listener is not None else asyncio.Event()
    try:
        while True:
            # Joined before this read: an end announced after it is heard.
            run = await Run.objects.aget(id=run_id)
            left = deadline - loop.time()
            if run.status in Run.ENDED or left <= 0:
                return run
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(RECHECK, left)):
                    await ended.wait()
            ended.clear()
    finally:
        if listener is not None:
            listener.unwatch(run_id, ended)


__all__ = ["RECHECK", "changes", "subscribed", "wait"]
