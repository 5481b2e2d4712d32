"""A worker's connection to the web server's relay socket (``ws/relay/``).

Batches of a worker's events reach browsers through the web server (see
:mod:`picoflow_web.relay`). One websocket per worker process carries them: a message costs
the web server one frame, not an HTTP request through Django's middleware, and the worker
opens no connection per batch. A thread owns the socket, so the run's event loop only
queues a message (it waits only when the queue is full: back-pressure, not loss) and goes
on storing the next batch while this one travels.

What is queued is stored already, so a frame that cannot be delivered (the web server
restarting) is logged and dropped, and the next frame reconnects: the run socket fills
any gap from the store. A frame is kept under :data:`FRAME_BYTES`, below Daphne's
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
    out: list[str] = []
    current: list[str] = []
    size = 0
    for group, message in messages:
        text = _message_text(group, message)
        if len(text) > FRAME_BYTES:
            text = _message_text(group, _notice(message))
        if current and size + len(text) > FRAME_BYTES:
            out.append(_frame(current))
            current, size = [], 0
        current.append(text)
        size += len(text) + 1
    if current:
        out.append(_frame(current))
    return out


def _frame(items: list[str]) -> str:
    return '{"messages":[' + ",".join(items) + "]}"


def _notice(message: dict[str, Any]) -> dict[str, Any]:
    """A batch too big for a frame, as the seq it reaches; the socket reads it back."""
    return {"type": message["type"], "events": [], "upto": message.get("upto", -1)}


class Sender:
    """The relay socket of this process: queued messages go out in order (see above)."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self._url = socket_url(base_url)
        self._origin = base_url.rstrip("/")
        self._headers = headers
        self._retry_at = 0.0
        self._queue: queue.Queue[list[Message] | _Drained] = queue.Queue(QUEUED_MESSAGES)
        self._socket: ClientConnection | None = None
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
            item = self._queue.get()
            batch: list[Message] = []
            markers: list[_Drained] = []
            while True:  # everything waiting goes in as few frames as fit
                if isinstance(item, _Drained):
                    markers.append(item)
                else:
                    batch += item
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            for frame in frames(batch):
                self._send(frame)
            for marker in markers:
                marker.done.set()

    def _send(self, frame: str) -> None:
        if self._socket is None and time.monotonic() < self._retry_at:
            return  # the web server is away; its browsers read the events back later
        try:
            if self._socket is None:
                self._socket = connect(
                    self._url, origin=self._origin,  # type: ignore[arg-type]
                    additional_headers=self._headers, compression=None, open_timeout=5,
                    close_timeout=1, max_size=None)
            self._socket.send(frame)
        except (OSError, WebSocketException) as exc:
            logger.warning("Relaying to %s failed (%s); browsers read the events back from "
                           "the store", self._url, exc)
            if self._socket is not None:
                self._socket.close()
            self._socket = None
            self._retry_at = time.monotonic() + RETRY_SECONDS


__all__ = ["FRAME_BYTES", "PATH", "Message", "RawJSON", "Sender", "frames", "plain",
           "socket_url"]
