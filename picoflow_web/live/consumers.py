"""Websocket consumers: a run's events (replay, then live) and the runs list.

Hand-over without gaps or duplicates: the consumer joins the run's group *before* it reads
the stored events after the client's last sequence number, so a batch stored after that
read is still delivered live; and it forwards only events with ``seq`` above the last one
it sent, so a batch both read and received is not sent twice. Events are stored before
they are broadcast (see :mod:`picoflow_web.record.recorder`), so there is nothing the group can
deliver that the store could not, and a live batch that skips events (one message lost on
the way) is preceded by the skipped ones, read from the store. A run's last batches have
no later one to show they were lost: a worker that could not relay them (the web server
restarting) sends a notice of how far they reach once it can
(:mod:`picoflow_web.live.relay_sender`), and the socket reads them back.

Projects: a socket sees only runs of the projects its user may read (another project's
run id closes it with 4404, as an unknown one does); the runs list forwards only their
summaries. The sockets only send: whatever a client sends is refused — an error message
in the API's shape, a warning in the log, and the socket closed with 4400 — and so is a
bad ``?after=`` (the HTTP API's 400).

Close codes. A refused socket is accepted first, then closed with its code (a socket
closed before it is accepted fails at the handshake, and a browser sees only 1006); no
refusal logs a traceback. Codes are ``4000 +`` the HTTP status the API would answer
(Daphne lets an application close with 1000 or 3000-4999 only):

====  =============================================================================
4400  a bad query parameter (``?after=abc``), or the client sent a message (text or
      binary): an ``error`` message says why, first; a malformed relay frame
4401  not logged in
4403  an ``Origin`` that is not one of ``ALLOWED_HOSTS`` (or none); a relay socket
      without this installation's relay key
4404  no such run, or a run of a project the user may not read; no such path
====  =============================================================================
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs

from autobahn.exception import Disconnected
from channels.consumer import AsyncConsumer, get_handler_name
from channels.db import aclose_old_connections
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer

from picoflow_web.data import access, selectors
from picoflow_web.errors import ApiError, error_body
from picoflow_web.live import relay
from picoflow_web.live.groups import MESSAGE_BYTES, RUNS_GROUP, run_group

logger = logging.getLogger("picoflow.web")

CLOSE_BAD_REQUEST = 4400
"""A bad query parameter, a message from the client, a malformed relay frame."""
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
"""A foreign (or missing) ``Origin``; a relay socket without the relay key."""
CLOSE_NOT_FOUND = 4404
"""An unknown run, or one of a project the user may not read."""


class _ForwardingDispatch(AsyncConsumer):
    """Channels' ``dispatch``, without its database hop for the messages a consumer only
    forwards (``_FORWARDING``).

    Channels closes stale database connections before every handler, through the
    synchronous thread: a thread hop per message. A run page's socket gets a message per
    batch of events and the relay socket one per frame; those handlers touch no database
    (one that falls back to reading the store closes stale connections itself, first),
    so the hop was pure cost on the path of every live event.
    """

    _FORWARDING: frozenset[str] = frozenset()

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message["type"] in self._FORWARDING:
            await getattr(self, get_handler_name(message))(message)
        else:
            await super().dispatch(message)


class _SendOnly(_ForwardingDispatch, AsyncJsonWebsocketConsumer):
    """A socket that only sends: anything received closes it (see the module docstring)."""

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None,
                      **kwargs: Any) -> None:
        binary = text_data is None
        size = len(bytes_data or b"") if binary else len(text_data or "")
        logger.warning("Websocket %s: the client sent %s data (%d %s); closing it",
                       self.scope.get("path", "?"), "binary" if binary else "text", size,
                       "bytes" if binary else "characters")
        await self._fail(error_body("This socket only sends; it takes no messages.", "junk"),
                         CLOSE_BAD_REQUEST)

    async def send_json(self, content: Any, close: bool = False) -> None:
        """Send, unless the client is gone already. A group message (a run's summary, a
        batch) can be handled after the client closed the socket and before this consumer
        reads its disconnect, which waits in its queue: Daphne's socket then refuses the
        frame, and nobody is left to read it."""
        try:
            await super().send_json(content, close=close)
        except Disconnected:
            logger.debug("Websocket %s: the client left before a frame went out",
                         self.scope.get("path", "?"))

    async def _fail(self, body: dict[str, Any], close_code: int) -> None:
        """Send ``body`` (the API's error shape), then close with ``close_code``."""
        await self.send_json(body)
        await self.close(code=close_code)

    async def _access(self) -> access.Access | None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return None
        return await access.for_user(user)


class RunConsumer(_SendOnly):
    """``ws/runs/<run_id>/?after=<seq>``: stored events after ``seq``, then live ones."""

    _FORWARDING = frozenset({"run.events"})

    async def connect(self) -> None:
        grant = await self._access()
        if grant is None:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        self.run_id: str = self.scope["url_route"]["kwargs"]["run_id"]
        # No stored id holds a NUL, and PostgreSQL refuses one in a query (a 1011).
        run = (None if "\x00" in self.run_id
               else await selectors.run_get(self.run_id, projects=grant.readable()))
        if run is None:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode(errors="replace"),
                         keep_blank_values=True)
        try:
            self.last_seq = selectors.seq_param(query.get("after", [None])[0], "after", -1)
            generation = selectors.seq_param(query.get("generation", [None])[0],
                                             "generation", -1)
        except ApiError as exc:
            logger.warning("Websocket for run %s refused: %s", self.run_id, exc)
            await self.accept()
            await self._fail(exc.body(), 4000 + exc.status)
            return
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        # Read again once subscribed: a rebuild from now on reaches this socket as a
        # ``rebuilt`` batch, one before is in the generation the hello names.
        run = await selectors.run_get(self.run_id, projects=grant.readable()) or run
        await self.accept()
        await self.send_json({"type": "run", "run": run.summary()})
        if generation >= 0 and generation != run.generation:
            # What the page holds (``after``) is of a record since replaced: the page
            # starts over on this hello, and gets the run from seq 0.
            self.last_seq = -1
        await self._read_back()

    async def _refuse(self, code: int) -> None:
        await _refuse(self, code)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_events(self, message: dict[str, Any]) -> None:
        """A live batch from the bridge.

        A batch that does not continue what this socket sent means a message was lost on
        the way (a relay that failed, Redis pub/sub's at-most-once delivery): the missing
        events are stored already, so they are read back first.
        """
        if message.get("rebuilt"):
            # The run's record was replaced (a trace's run derived again from its spans:
            # picoflow_web.record.spans): what this socket sent is void; the page is told,
            # and this batch, from seq 0, follows.
            self.last_seq = -1
            generation = message.get("generation")
            await self.send_json({"type": "rebuilt", **(
                {"generation": generation} if isinstance(generation, int) else {})})
        events = message["events"]
        upto = message.get("upto")
        if not events and isinstance(upto, int):
            # A batch too big to relay (picoflow_web.live.relay_sender): it is stored; read it.
            await self._read_back(upto)
            return
        if isinstance(events, str):  # their stored JSON text
            first = message.get("first")
            events = (await self._forward_text(events, first, upto)
                      if isinstance(first, int) and isinstance(upto, int)
                      else json.loads(events))
            if events is None:
                return
        if events and events[0]["seq"] > self.last_seq + 1:
            await self._read_back(events[0]["seq"] - 1)
        fresh = [e for e in events if e["seq"] > self.last_seq]
        for chunk in _chunks(fresh, _json_size):
            self.last_seq = chunk[-1]["seq"]
            await self.send_json({"type": "events", "events": chunk})

    async def _forward_text(self, text: str, first: int, upto: int
                            ) -> list[dict[str, Any]] | None:
        """A batch as its stored JSON text: into the frame as it is when it continues what
        was sent (after reading back a gap). One that overlaps what was sent (a replay
        raced it) is parsed and returned, to be filtered like any other."""
        if upto <= self.last_seq:
            return None  # sent already (read back)
        if first > self.last_seq + 1:
            await self._read_back(first - 1)
        if first <= self.last_seq:
            events: list[dict[str, Any]] = json.loads(text)
            return events
        self.last_seq = upto
        await self.send(text_data=f'{{"type":"events","events":{text}}}')
        return None

    async def _read_back(self, upto: int | None = None) -> None:
        """Send the stored events after the last one sent, up to ``upto`` (or all), as the
        text they were stored as: a replay of 400,000 events is not parsed and
        re-encoded here on its way to the page."""
        await aclose_old_connections()  # live batches skip Channels' own (see dispatch)
        while upto is None or self.last_seq < upto:
            stored = await selectors.run_event_texts_after(self.run_id, self.last_seq,
                                                           upto=upto)
            if not stored:
                return
            for chunk in _chunks(stored, _text_size):
                self.last_seq = chunk[-1][0]
                texts = ",".join(text for _, text in chunk)
                await self.send(text_data=f'{{"type":"events","events":[{texts}]}}')


async def _refuse(consumer: AsyncWebsocketConsumer, code: int) -> None:
    """Accept, then close with ``code``: closing before accepting becomes an HTTP 403 at
    the handshake, and the browser would only ever see 1006, never why."""
    await consumer.accept()
    await consumer.close(code=code)


T = TypeVar("T")


def _chunks(items: list[T], weight: Callable[[T], int]) -> list[list[T]]:
    """Split events into messages of about ``MESSAGE_BYTES`` (a huge event travels alone).

    Websocket servers cap message size (Daphne: 1 MiB unless
    ``--websocket-max-message-size`` says otherwise), and smaller messages let the page
    render while a long replay is still arriving.
    """
    chunks: list[list[T]] = []
    current: list[T] = []
    size = 0
    for item in items:
        if current and size + weight(item) > MESSAGE_BYTES:
            chunks.append(current)
            current, size = [], 0
        current.append(item)
        size += weight(item)
    if current:
        chunks.append(current)
    return chunks


def _json_size(event: dict[str, Any]) -> int:
    return len(json.dumps(event, separators=(",", ":")))


def _text_size(row: tuple[int, str]) -> int:
    return len(row[1])


class RunsConsumer(_SendOnly):
    """``ws/runs/``: summaries of runs as they start and finish (of the user's projects:
    one group carries every summary, each names its project, and the socket forwards only
    those of projects its user reads)."""

    _FORWARDING = frozenset({"run.summary"})

    async def connect(self) -> None:
        grant = await self._access()
        if grant is None:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        self.readable = grant.readable()
        await self.channel_layer.group_add(RUNS_GROUP, self.channel_name)
        await self.accept()

    async def _refuse(self, code: int) -> None:
        await _refuse(self, code)

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(RUNS_GROUP, self.channel_name)

    async def run_summary(self, message: dict[str, Any]) -> None:
        """A run started or changed."""
        run = message["run"]
        if self.readable is not None and run.get("project") not in self.readable:
            return
        await self.send_json({"type": "run", "run": run})


class NotFound(AsyncWebsocketConsumer):
    """A socket at a path no route takes: closed with 4404."""

    async def connect(self) -> None:
        await _refuse(self, CLOSE_NOT_FOUND)


class OriginRefused(AsyncWebsocketConsumer):
    """A browser's socket from a foreign (or no) ``Origin`` (see
    :mod:`picoflow_web.live.routing`): closed with 4403, having read nothing."""

    async def connect(self) -> None:
        await _refuse(self, CLOSE_FORBIDDEN)


class RelayConsumer(_ForwardingDispatch, AsyncWebsocketConsumer):
    """``ws/relay/``: a worker's messages for this server's browsers (see
    :mod:`picoflow_web.live.relay`); the installation's relay key, not a user, opens it."""

    _FORWARDING = frozenset({"websocket.receive"})

    async def connect(self) -> None:
        offered = dict(self.scope.get("headers", [])).get(relay.HEADER.lower().encode(), b"")
        if not relay.key_matches(offered.decode("latin-1")):
            logger.warning("A relay socket without this installation's relay key was refused")
            await _refuse(self, CLOSE_FORBIDDEN)
            return
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None
                      ) -> None:
        try:
            messages = relay.parse(text_data if text_data is not None else bytes_data or b"")
        except ValueError as exc:
            logger.warning("A relay frame was refused: %s", exc)
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        await relay.publish(messages)
