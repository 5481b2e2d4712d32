"""A local OpenAI-compatible Chat Completions server for the adapter's fault-injection and
fan-out tests (what a third-party mock server cannot do: see tests/runtime/test_openai_compat.py
for the adapter against fakellm).

Stdlib ``http.server`` in a thread, speaking HTTP/1.1 with keep-alive, that records every
request (path, headers, body) and counts what a client cannot hide: TCP connections
accepted, requests, and how many requests were being handled at once. Requests can be held
until a number of them are in flight together (``gate``), or until the test releases them
(``hold``), so concurrency is observed at its peak instead of hoped for. A reply may be
canned JSON, raw bytes, or a stream of server-sent events that can stop mid-answer with the
connection dropped.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
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
    raw: bytes | None = None
    """Sent as the body instead of ``body``'s JSON."""
    events: list[Any] | None = None
    """Server-sent events (a streamed answer): each dict as ``data: <json>``, each string as
    ``data: <string>``; ``data: [DONE]`` follows unless the connection is dropped."""
    drop_after: int | None = None
    """Close the connection after this many events, the chunked body unfinished."""
    hang_up: bool = False
    """Close the connection without answering (as a server does to an idle keep-alive
    connection it closes while a request is on its way)."""
    reset: bool = False
    """Like ``hang_up``, with a reset (RST) instead of an orderly close: what the client sees
    when its request reaches a socket the server had already closed."""


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


def completion(content: str = "ok", usage: tuple[int, int, int] = (3, 2, 5)) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": dict(zip(("prompt_tokens", "completion_tokens", "total_tokens"), usage,
                          strict=True)),
    }


def chunk(content: str | None = None, *, tool_calls: list[dict[str, Any]] | None = None,
          finish_reason: str | None = None, refusal: str | None = None,
          usage: tuple[int, int, int] | None = None) -> dict[str, Any]:
    """One chunk of a streamed answer; with ``usage``, the closing usage-only chunk."""
    base: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                            "created": 0, "model": "gpt-test"}
    if usage is not None:
        return {**base, "choices": [], "usage": dict(zip(
            ("prompt_tokens", "completion_tokens", "total_tokens"), usage, strict=True))}
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    if refusal is not None:
        delta["refusal"] = refusal
    return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def streamed(*texts: str, usage: tuple[int, int, int] = (3, 2, 5),
             finish_reason: str = "stop") -> list[dict[str, Any]]:
    """The chunks of a streamed text answer: one per text, the finish, the usage."""
    return [*(chunk(t) for t in texts), chunk(finish_reason=finish_reason), chunk(usage=usage)]


def as_stream(reply: Reply) -> Reply:
    """A canned completion as a streamed request gets it: its text in two chunks, its tool
    calls each in one, the finish, the usage."""
    body = reply.body if reply.body is not None else completion()
    choice = body["choices"][0]
    message = choice.get("message") or {}
    content = message.get("content") or ""
    half = len(content) // 2
    events = [chunk(part) for part in (content[:half], content[half:]) if part]
    for index, call in enumerate(message.get("tool_calls") or []):
        events.append(chunk(tool_calls=[{**call, "index": index}]))
    events.append(chunk(finish_reason=choice.get("finish_reason")))
    usage = body.get("usage")
    if usage:
        events.append({"choices": [], "usage": usage})
    return Reply(status=reply.status, headers=reply.headers, hold=reply.hold,
                 close=reply.close, events=events)


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
    recorded: list[Recorded] = field(default_factory=list)
    answered: threading.Event = field(default_factory=threading.Event)
    """Set when a held request stops waiting and is answered."""
    current: int = 0
    max_concurrent: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _wave: int = 0
    _waiting: int = 0

    def enter(self, body: Any, path: str = "", headers: dict[str, str] | None = None) -> Reply:
        with self._cond:
            self.requests += 1
            self.bodies.append(body)
            self.recorded.append(Recorded(path, headers or {}, body))
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
            self.answered.set()
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
        headers = {k.lower(): v for k, v in self.headers.items()}
        body = json.loads(raw)
        reply = chat.enter(body, self.path, headers)
        if (isinstance(body, dict) and body.get("stream") and reply.events is None
                and reply.raw is None and reply.status == 200 and not reply.hang_up
                and not reply.reset):
            reply = as_stream(reply)
        if reply.hang_up or reply.reset:
            chat.leave()
            self.close_connection = True
            if reply.reset:  # no linger: close() sends RST
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            if reply.events is not None:
                self._stream(reply)
                return
            body = reply.raw if reply.raw is not None else json.dumps(
                reply.body if reply.body is not None else completion()).encode()
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

    def _stream(self, reply: Reply) -> None:
        assert reply.events is not None
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        events = list(reply.events)
        if reply.drop_after is None:
            events.append("[DONE]")
        for sent, event in enumerate(events):
            if reply.drop_after is not None and sent >= reply.drop_after:
                break
            data = event if isinstance(event, str) else json.dumps(event)
            part = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.flush()
        if reply.drop_after is not None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

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
