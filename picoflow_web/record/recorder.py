"""The bridge: the runtime's event sink that stores a run's events and tells browsers.

:class:`RunRecorder` is a runtime event sink. ``receive`` (called synchronously by the
runtime's bus) only appends to a buffer, so it never stalls a branch or a join. Its pump
task takes the buffer in batches — once ``batch_events`` events wait, or ``batch_seconds``
after the first of them arrived, so a lone event is not held back by a fixed tick; a
backlog is taken whole, up to ``store_events`` events and about ``store_chars`` characters —
**stores each batch, then publishes it** to
the run's channel group in messages of ``batch_events``, through the door every source of
events uses (:mod:`picoflow_web.record.append`; published by :mod:`picoflow_web.live.relay`:
from a worker, across processes). Persist before broadcast: a browser only ever hears of an event
that a reload or a reconnect can read back, so resuming from the last sequence number is
gap-free. One group message per batch, not per event, because ``group_send`` per event is
an order of magnitude slower.

Memory is bounded: with more than ``max_buffered`` events waiting to be stored the sink
says it is congested, and the run waits at its next await point (a branch start, a model
call) until the store caught up; nothing is dropped.

A run that is not ``running`` any more (its worker's lease lapsed and it was declared
interrupted, see :mod:`picoflow_web.record.interruption`), or not the recorder's ``worker``'s
any more, takes no more events from it: ``run.interrupted`` is its last one, so the batch
that would follow it is dropped, and so is the rest.

Everything else about a run (creating it, recording its end with the turn's reply,
telling the runs list) is a service: see :mod:`picoflow_web.execute.services`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, reset_queries
from django.utils import timezone

from picoflow_web.data.redact import event_text
from picoflow_web.models import Run
from picoflow_web.record.append import ENDINGS, Appended, Incoming, NotAppended, append, broadcast
from runtime.events import Event

logger = logging.getLogger("picoflow.web")


class RunRecorder:
    """Stores and broadcasts one run's events in batches (see the module docstring)."""

    name = "django"

    def __init__(self, run_id: str, *, batch_events: int = 200,
                 batch_seconds: float = 0.01, max_buffered: int = 20_000,
                 lease_seconds: float | None = None, store_events: int = 2_000,
                 store_chars: int = 1_000_000, worker: str | None = None) -> None:
        self.run_id = run_id
        self.worker = worker
        """The worker executing the run: while another one holds it, nothing is stored."""
        self.lease_seconds = lease_seconds
        self.batch_events = batch_events
        self.store_events = max(batch_events, store_events)
        self.store_chars = store_chars
        """About the most characters of events one transaction stores."""
        self.batch_seconds = batch_seconds
        self.max_buffered = max_buffered
        self._buffer: list[Event] = []
        self._arrived = asyncio.Event()  # the buffer is not empty
        self._full = asyncio.Event()  # a whole batch waits
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._run: Run | None = None
        """The run's row as this recorder last stored it (read once, then kept)."""
        self._lost_upto = -1
        """The last seq of the batches given up (see :meth:`_lost`)."""
        self.stored = 0
        """Events stored so far."""
        self.ended = False
        """Whether the run stopped taking events (see the module docstring)."""

    def receive(self, event: Event) -> None:
        """Take one event (synchronous, never blocks)."""
        self._buffer.append(event)
        waiting = len(self._buffer)
        if waiting == 1:
            self._arrived.set()
        if waiting >= self.batch_events:
            self._full.set()

    def congested(self) -> bool:
        """Whether the run should wait for the store (the bus's back-pressure)."""
        return len(self._buffer) > self.max_buffered

    def start(self) -> None:
        """Start the pump on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def close(self) -> None:
        """Flush everything buffered, then stop."""
        self._closing = True
        self._arrived.set()
        self._full.set()
        if self._task is not None:
            await self._task

    async def _pump(self) -> None:
        # One batch is stored (in a thread) while the next is serialised here: the two
        # overlap, and batches are still stored and published in order.
        committing: asyncio.Task[None] | None = None
        try:
            while True:
                if not self._buffer:
                    if self._closing:
                        return
                    self._arrived.clear()
                    await self._arrived.wait()
                if len(self._buffer) < self.batch_events and not self._closing:
                    self._full.clear()
                    with contextlib.suppress(TimeoutError):  # a timeout: "flush now"
                        await asyncio.wait_for(self._full.wait(), self.batch_seconds)
                # A backlog is stored in one transaction (up to store_events): a commit
                # and the run's counters per batch cost as much as a hundred rows.
                # Browsers still get messages of batch_events.
                take = min(max(self.batch_events, len(self._buffer)), self.store_events)
                batch = self._buffer[:take]
                if not batch or self.ended:
                    del self._buffer[:take]
                    continue
                try:
                    # Serialised once (and redacted): this text is stored and relayed as
                    # it is.
                    texts = self._serialise(batch)
                except Exception:  # keep pumping; the run itself must not die of it
                    del self._buffer[:take]
                    logger.exception("Serialising events of run %s failed", self.run_id)
                    self._lost(batch)
                    continue
                batch = batch[:len(texts)]
                del self._buffer[:len(texts)]
                if committing is not None:
                    await committing
                committing = asyncio.get_running_loop().create_task(
                    self._commit(batch, texts))
                await asyncio.sleep(0)  # let it hand the batch to its thread first
        finally:
            if committing is not None:
                await committing

    def _serialise(self, batch: list[Event]) -> list[str]:
        """The JSON of ``batch``'s first events, up to about ``store_chars`` characters
        (one event at least): a wide fork's pages of requests are stored and shown a few at
        a time, not megabytes in one transaction before the page hears of the first."""
        texts: list[str] = []
        size, limit = 0, self.store_chars
        for event in batch:
            text = event_text(event)
            texts.append(text)
            size += len(text)
            if size >= limit:
                break
        return texts

    async def _commit(self, batch: list[Event], texts: list[str]) -> None:
        """Store one batch, then tell browsers (never raises: the pump goes on)."""
        if self.ended:
            return
        try:
            appended = await self._store(batch, texts)
            if appended is not None:
                await broadcast([appended], self.batch_events)
            else:
                self.ended = True
                logger.warning("Run %s is not running here any more (declared interrupted, "
                               "or another worker holds it): its later events are not "
                               "stored", self.run_id)
        except Exception:  # keep pumping; the run itself must not die of it
            logger.exception("Storing events of run %s failed", self.run_id)
            self._lost(batch)

    def _lost(self, batch: list[Event]) -> None:
        """Give up ``batch``: the record has a gap there, and what follows is still stored."""
        self._lost_upto = max(self._lost_upto, batch[-1].seq)

    async def _store(self, batch: list[Event], texts: list[str]) -> Appended | None:
        """Append the batch (``texts``, its events' JSON) through the door
        (:func:`~picoflow_web.record.append.append`) while the run is still running
        here; what was stored, None when nothing was."""
        return await sync_to_async(self._store_sync)(batch, texts)

    def _store_sync(self, batch: list[Event], texts: list[str]) -> Appended | None:
        try:
            return self._store_batch(batch, texts)
        finally:
            # Outside a request nothing resets Django's debug query log: with DEBUG on, a
            # long run would keep thousands of its own INSERTs in memory.
            reset_queries()

    def _store_batch(self, batch: list[Event], texts: list[str]) -> Appended | None:
        if self._run is None:
            self._run = Run.objects.filter(id=self.run_id).first()
            if self._run is None:
                return None
        # The door takes what continues the stored sequence: a batch given up is skipped.
        self._run.last_seq = max(self._run.last_seq, self._lost_upto)
        incoming: list[Incoming] = [
            (e.seq, e.type, e.path, text,
             e.model_dump(mode="json") if e.type in ENDINGS else e.__dict__)
            for e, text in zip(batch, texts, strict=True)]
        guard: dict[str, Any] = {"status": Run.Status.RUNNING}
        if self.worker:
            guard["worker"] = self.worker
        also: dict[str, Any] = {}
        if self.lease_seconds is not None:
            # Storing proves the worker alive: the same write renews its lease, so a busy
            # database cannot starve the keeper's own renewal into expiry.
            also["lease_expires_at"] = timezone.now() + timedelta(seconds=self.lease_seconds)
        try:
            # The turn's end is its worker's to record, with the reply the engine returned.
            appended = append(self._run, incoming, now=timezone.now(), ends_turn=False,
                              guard=guard, also=also)
        except (NotAppended, IntegrityError):
            # A seq taken by the run's run.interrupted, or the run ended: not stored. Any
            # other integrity error of a running run is an error.
            if Run.objects.filter(id=self.run_id, **guard).exists():
                raise
            return None
        self.stored += len(batch)
        return appended


__all__ = ["RunRecorder"]
