"""A local OpenAI-compatible Chat Completions server for the adapter's fan-out tests.

Stdlib ``http.server`` in a thread, speaking HTTP/1.1 with keep-alive, that counts what a
client cannot hide: TCP connections accepted, requests, and how many requests were being
handled at once. Requests can be held until a number of them are in flight together
(``gate``), or until the test releases them (``hold``), so concurrency is observed at its
peak instead of hoped for.
"""

from __future__ import annotations

import json
import ssl
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio.lowlevel

GATE_DEADLINE = 10.0
"""Seconds a gated request waits for its wave before it is answered anyway (a deadline
that ends a wait, so a broken client fails the test's assertion instead of hanging)."""


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False
    """Wait for ``ChatServer.release`` before answering."""
    close: bool = False
    """Close the connection after the reply without announcing it (a server dropping an
    idle keep-alive connection)."""
    chunked: bool = False


def completion(content: str = "ok", usage: tuple[int, int, int] = (3, 2, 5)) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": dict(zip(("prompt_tokens", "completion_tokens", "total_tokens"), usage,
                          strict=True)),
    }


@dataclass
class ChatServer:
    url: str = ""
    gate: int | None = None
    """Hold each request until this many are being handled at once (one wave)."""
    replies: deque[Reply] = field(default_factory=deque)
    """Canned replies, in order; an answer ``ok`` when none is left."""
    on_request: Callable[[dict[str, Any]], None] | None = None
    connections: int = 0
    requests: int = 0
    bodies: list[Any] = field(default_factory=list)
    current: int = 0
    max_concurrent: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _wave: int = 0
    _waiting: int = 0

    def enter(self, body: Any) -> Reply:
        with self._cond:
            self.requests += 1
            self.bodies.append(body)
            self.current += 1
            self.max_concurrent = max(self.max_concurrent, self.current)
            reply = self.replies.popleft() if self.replies else Reply(body=completion())
            if self.gate is not None:
                # A wave counts the requests waiting in it, not all those in flight: a
                # request of the last wave still writing its reply would otherwise fill
                # the next wave's place, and the next wave's last request would wait out
                # the deadline.
                wave = self._wave
                self._waiting += 1
                if self._waiting >= self.gate:
                    self._wave += 1
                    self._waiting = 0
                    self._cond.notify_all()
                else:
                    self._cond.wait_for(lambda: self._wave > wave or self.release.is_set(),
                                        timeout=GATE_DEADLINE)
        if self.on_request is not None:
            self.on_request(body)
        if reply.hold:
            self.release.wait(GATE_DEADLINE)
        return reply

    def leave(self) -> None:
        with self._cond:
            self.current -= 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # many branches connect at once; the default backlog is 5
    chat: ChatServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (the cancellation tests) is expected


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.chat._cond:
            self.server.chat.connections += 1

    def do_POST(self) -> None:
        chat = self.server.chat
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        reply = chat.enter(json.loads(raw))
        try:
            body = json.dumps(reply.body if reply.body is not None else completion()).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                half = len(body) // 2
                for part in (body[:half], body[half:]):
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            pass  # the client gave up
        finally:
            chat.leave()
        if reply.close:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def chat_server(
    gate: int | None = None, tls: ssl.SSLContext | None = None,
) -> Iterator[ChatServer]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    scheme = "http"
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    chat = ChatServer(url=f"{scheme}://127.0.0.1:{httpd.server_address[1]}/v1", gate=gate)
    httpd.chat = chat
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield chat
    finally:
        chat.release.set()
        with chat._cond:
            chat._cond.notify_all()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


class VirtualClock:
    """A clock for the provider limiter whose time moves only when someone sleeps: a
    sleep of ``d`` seconds makes ``d`` seconds pass at once, and is recorded."""

    def __init__(self, epoch: float = 1_700_000_000.0) -> None:
        self.now = 0.0
        self.epoch = epoch
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.epoch + self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await anyio.lowlevel.checkpoint()
