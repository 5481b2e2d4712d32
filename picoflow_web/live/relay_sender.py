"""A worker's connection to the web server's relay socket (``ws/relay/``).

Batches of a worker's events reach browsers through the web server (see
:mod:`picoflow_web.live.relay`). One websocket per worker process carries them: a message costs
the web server one frame, not an HTTP request through Django's middleware, and the worker
opens no connection per batch. A thread owns the socket, so the run's event loop only
queues a message (it waits only when the queue is full: back-pressure, not loss) and goes
on storing the next batch while this one travels.

What is queued is stored already, so a frame that cannot be delivered (the web server
restarting) is logged and dropped, and the next frame reconnects: the run socket fills
any gap from the store. A gap shows only when a later batch arrives, though, and a run's
last batches have none after them; so what was dropped is owed (:class:`_Owed`): how far
each run's events reach, and each run's latest summary. They are sent first once the
server answers again, tried every :data:`RETRY_SECONDS` even when nothing else is
published, and a run socket that gets such a notice reads the events back. A frame is
kept under :data:`FRAME_BYTES`, below Daphne's
default message cap (1 MiB); a batch of events too big for one travels as a notice of
what is stored (its ``upto``), which the run socket reads back. A batch's events are the
JSON text the recorder stored (:class:`RawJSON`); the frame carries that text as one JSON
string, so the web server parses one string, not every event, and passes the text on to
the run sockets, which put it into their frames to browsers as it is.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import WebSocketException
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

logger = logging.getLogger("picoflow.web")

PATH = "/ws/relay/"
FRAME_BYTES = 512 * 1024
QUEUED_MESSAGES = 256
"""Messages waiting for the socket before publishing waits (each is a batch of events)."""
RETRY_SECONDS = 1.0
"""After a failed connection, frames are dropped (not retried) for this long."""

Message = tuple[str, dict[str, Any]]
"""A channel-layer group name and the message for it."""


class RawJSON(str):
    """JSON text a frame carries as it is: a batch of events, serialised once when stored."""


def plain(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` for a channel layer: :class:`RawJSON` values as plain strings (the text
    travels as text; a layer's serialiser need not know the subclass)."""
    if not any(isinstance(v, RawJSON) for v in message.values()):
        return message
    return {k: str(v) if isinstance(v, RawJSON) else v for k, v in message.items()}


def _message_text(group: str, message: dict[str, Any]) -> str:
    return json.dumps({"group": group, "message": plain(message)}, separators=(",", ":"))


class _Drained:
    """A marker in the queue: set once everything queued before it was sent."""

    def __init__(self) -> None:
        self.done = threading.Event()


def socket_url(base: str) -> str:
    """``ws://host:port/ws/relay/`` for the web server at ``base`` (``http://host:port``)."""
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + PATH, "", ""))


def frames(messages: list[Message]) -> list[str]:
    """The frames carrying ``messages``, each under :data:`FRAME_BYTES`."""
    return [frame for frame, _ in _framed(messages)]


def _framed(messages: list[Message]) -> list[tuple[str, list[Message]]]:
    """:func:`frames`, each with the messages it carries."""
    out: list[tuple[str, list[Message]]] = []
    current: list[str] = []
    carried: list[Message] = []
    size = 0
    for group, message in messages:
        text = _message_text(group, message)
        if len(text) > FRAME_BYTES:
            text = _message_text(group, _notice(message))
        if current and size + len(text) > FRAME_BYTES:
            out.append((_frame(current), carried))
            current, carried, size = [], [], 0
        current.append(text)
        carried.append((group, message))
        size += len(text) + 1
    if current:
        out.append((_frame(current), carried))
    return out


def _frame(items: list[str]) -> str:
    return '{"messages":[' + ",".join(items) + "]}"


def _notice(message: dict[str, Any]) -> dict[str, Any]:
    """A batch too big for a frame, as the seq it reaches; the socket reads it back."""
    return {"type": message["type"], "events": [], "upto": message.get("upto", -1)}


class _Owed:
    """What dropped frames carried, as little as tells it: per run group, the last seq of
    its dropped events (a notice, which the run socket reads back up to); per run, its
    latest dropped summary. A later message of the same run that got through makes the
    debt void: the run socket sees the gap it leaves, and a newer summary replaces an
    older one."""

    def __init__(self) -> None:
        self._events: dict[str, int] = {}
        self._summaries: dict[str, Message] = {}

    def __bool__(self) -> bool:
        return bool(self._events or self._summaries)

    def dropped(self, messages: list[Message]) -> None:
        for group, message in messages:
            if message.get("type") == "run.events":
                upto = message.get("upto")
                if isinstance(upto, int):
                    self._events[group] = max(upto, self._events.get(group, upto))
            elif message.get("type") == "run.summary":
                run_id = _summary_run(message)
                if run_id is not None:
                    self._summaries[run_id] = (group, message)

    def delivered(self, messages: list[Message]) -> None:
        for group, message in messages:
            if message.get("type") == "run.events":
                self._events.pop(group, None)
            elif message.get("type") == "run.summary":
                self._summaries.pop(_summary_run(message) or "", None)

    def take(self) -> list[Message]:
        """The messages that pay what is owed (and forget it: a failed send owes it
        again)."""
        messages = [(group, {"type": "run.events", "events": [], "upto": upto})
                    for group, upto in self._events.items()]
        messages += self._summaries.values()
        self._events.clear()
        self._summaries.clear()
        return messages


def _summary_run(message: dict[str, Any]) -> str | None:
    run = message.get("run")
    run_id = run.get("id") if isinstance(run, dict) else None
    return run_id if isinstance(run_id, str) else None


class Sender:
    """The relay socket of this process: queued messages go out in order (see above)."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self._url = socket_url(base_url)
        self._origin = base_url.rstrip("/")
        self._headers = headers
        self._retry_at = 0.0
        self._queue: queue.Queue[list[Message] | _Drained] = queue.Queue(QUEUED_MESSAGES)
        self._socket: ClientConnection | None = None
        self._owed = _Owed()
        self._away = False
        """The last send failed (the web server is away, or was)."""
        threading.Thread(target=self._run, name="picoflow-relay", daemon=True).start()

    def put(self, messages: list[Message], *, block: bool = True) -> None:
        """Queue ``messages``; raises ``queue.Full`` when not ``block``-ing and it is full."""
        self._queue.put(messages, block=block)

    def drain(self, timeout: float) -> bool:
        """Wait until everything queued so far was sent (or dropped); whether it was."""
        marker = _Drained()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    def _run(self) -> None:
        while True:
            item: list[Message] | _Drained | None
            try:
                # Owing something: come back to pay it even if nothing is published.
                item = self._queue.get(timeout=self._owed_wait())
            except queue.Empty:
                item = None
            batch: list[Message] = self._owed.take()
            markers: list[_Drained] = []
            while item is not None:  # everything waiting goes in as few frames as fit
                if isinstance(item, _Drained):
                    markers.append(item)
                else:
                    batch += item
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = None
            for frame, carried in _framed(batch):
                if self._send(frame):
                    self._owed.delivered(carried)
                else:
                    self._owed.dropped(carried)
            for marker in markers:
                marker.done.set()

    def _owed_wait(self) -> float | None:
        if not self._owed:
            return None
        return max(self._retry_at - time.monotonic(), 0.0) + 0.01

    def _send(self, frame: str) -> bool:
        """Send ``frame``; whether it went (False: dropped, the web server is away)."""
        if self._socket is None and time.monotonic() < self._retry_at:
            return False  # not yet: the web server is away, its browsers read back later
        try:
            if self._socket is None:
                self._socket = connect(
                    self._url, origin=Origin(self._origin),
                    additional_headers=self._headers, compression=None, open_timeout=5,
                    close_timeout=1, max_size=None)
            self._socket.send(frame)
        except (OSError, WebSocketException) as exc:
            # Once per outage: while something is owed, a retry comes every RETRY_SECONDS.
            logger.log(logging.DEBUG if self._away else logging.WARNING,
                       "Relaying to %s failed (%s); browsers read the events back from "
                       "the store", self._url, exc)
            if self._socket is not None:
                self._socket.close()
            self._socket = None
            self._away = True
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return False
        if self._away:
            logger.info("Relaying to %s again", self._url)
            self._away = False
        return True


__all__ = ["FRAME_BYTES", "PATH", "Message", "RawJSON", "Sender", "frames", "plain",
           "socket_url"]
