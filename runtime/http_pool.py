"""Pooled HTTP/1.1 requests on anyio: what the model adapters send with.

Written on anyio rather than on a third-party client so that the runtime keeps its two
dependencies and runs the same on asyncio and trio. It does only what a JSON API call
needs: one request at a time per connection, ``Content-Length`` or chunked replies (or a
body read to the end of an HTTP/1.0 connection), keep-alive, TLS with the system's
certificate store, and no redirects (a 3xx is returned to the caller like any status).

Idle connections are kept per event loop (a socket belongs to the loop that opened it,
and a process may run several loops, one per worker thread) and per origin (scheme, host,
port), and handed out last-in first out, so a burst reuses the warmest sockets and the
surplus ages out. A connection is a plain socket for ``http`` and an anyio TLS stream for
``https`` (:mod:`runtime.http_conn`).
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
import urllib.parse
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel

from .http_conn import Connection, connect

_MAX_HEADER_BYTES = 64 * 1024
_MAX_LINE_BYTES = 8 * 1024
_NEW_LOOP_LOCK = threading.Lock()


class HTTPTransportError(Exception):
    """No reply was had: connection refused or reset, the peer hung up mid-reply, or a
    reply that is not HTTP. The message is safe to show (it never holds the request)."""


class HTTPConnectError(HTTPTransportError):
    """No connection could be opened (refused, unreachable, bad name): nothing was sent, so
    the request is safe to send again."""


class HTTPTimeout(HTTPTransportError):
    """Connecting, or one read of the reply, took longer than the timeout."""


@dataclass(frozen=True)
class HTTPReply:
    """A complete reply: status, headers (names lower-cased; a repeated header keeps its
    last value) and the body."""

    status: int
    headers: dict[str, str]
    body: bytes


_Origin = tuple[str, str, int]
_Idle = dict[_Origin, list[Connection]]


@dataclass
class _LoopState:
    """One event loop's share of a pool."""

    idle: _Idle = field(default_factory=dict)
    slots: dict[_Origin, anyio.Semaphore] = field(default_factory=dict)


@dataclass
class ConnectionPool:
    """Keep-alive connections per origin, shared by every task of the process that uses
    this pool.

    Args:
        max_connections_per_origin: connections open to one origin at once, per event
            loop; more requests wait for one. Provider quotas are the limiter's business;
            this only keeps an unbounded fan-out from running out of file descriptors.
        max_idle_per_origin: idle connections kept per origin; more are closed when they
            come back.
        idle_timeout: seconds an idle connection is kept; servers drop idle keep-alive
            connections after a few seconds, and a socket older than this is likely dead.
        ssl_context: for https; the system's default context when None.
    """

    max_connections_per_origin: int = 512
    max_idle_per_origin: int = 256
    idle_timeout: float = 15.0
    ssl_context: ssl.SSLContext | None = None
    _loops: weakref.WeakKeyDictionary[object, _LoopState] = (
        field(default_factory=weakref.WeakKeyDictionary)
    )
    connections_opened: int = 0
    """How many TCP connections this pool has opened (for tests and benchmarks)."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes = b"",
        timeout: float,
    ) -> HTTPReply:
        """Send one request and read its whole reply.

        A reused connection that turns out to be dead before any byte of the reply
        arrives is replaced by a fresh one once: the server closed it while idle, so the
        request was never processed.

        Raises:
            HTTPTimeout: connecting or a read took more than ``timeout`` seconds.
            HTTPTransportError: any other failure to get a reply.
        """
        origin, target, host_header = _split(url)
        head = _request_head(method, target, host_header, headers, len(body))
        state = self._state()
        idle = state.idle
        slots = state.slots.get(origin)
        if slots is None:
            slots = state.slots[origin] = anyio.Semaphore(self.max_connections_per_origin)
        try:
            # Without the yield anyio's acquire makes even when a slot is free: a full turn
            # of the event loop per request, for every branch of a fan-out.
            slots.acquire_nowait()
        except anyio.WouldBlock:
            await slots.acquire()
        try:
            for _ in range(2):
                conn = await self._checkout(idle, origin) or await self._open(origin, timeout)
                try:
                    reply, keep = await self._exchange(conn, head + body, timeout)
                except _StaleConnection:
                    await conn.aclose()
                    continue
                except BaseException:
                    await conn.aclose()
                    raise
                if keep:
                    await self._checkin(idle, origin, conn)
                else:
                    await conn.aclose()
                return reply
        finally:
            slots.release()
        raise HTTPTransportError("the server closed the connection without a reply")

    async def aclose(self) -> None:
        """Close the idle connections of the current event loop."""
        idle = self._state().idle
        conns = [conn for origin in list(idle) for conn in idle.pop(origin)]
        for conn in conns:
            await conn.aclose()

    def idle_count(self) -> int:
        """Idle connections of the current event loop."""
        return sum(len(conns) for conns in self._state().idle.values())

    def _state(self) -> _LoopState:
        loop = anyio.lowlevel.current_token().native_token
        state = self._loops.get(loop)
        if state is None:
            # Loops of other threads may be starting too; the sweep iterates the mapping.
            with _NEW_LOOP_LOCK:
                self._forget_finished_loops()
                state = self._loops.setdefault(loop, _LoopState())
        return state

    def _forget_finished_loops(self) -> None:
        """Drop the idle connections of loops that have ended.

        An idle connection refers to its loop, so the weak key alone would never let a
        finished loop go. Their sockets cannot be closed politely without that loop; the
        garbage collector closes them.
        """
        for loop in list(self._loops):
            if _finished(loop):
                self._loops.pop(loop, None)

    # -- connections ---------------------------------------------------------------------

    async def _checkout(self, idle: _Idle, origin: _Origin) -> Connection | None:
        conns = idle.get(origin)
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            idle_for = now - conn.idle_since
            # A server drops an idle connection after seconds, not within one: checking a
            # just-returned socket would cost a system call per request for nothing (and a
            # connection that did die is retried on a fresh one).
            if idle_for <= self.idle_timeout and (idle_for < 1.0 or not conn.peer_closed()):
                conn.reused = True
                return conn
            await conn.aclose()
        return None

    async def _checkin(self, idle: _Idle, origin: _Origin, conn: Connection) -> None:
        conns = idle.setdefault(origin, [])
        if len(conns) >= self.max_idle_per_origin:
            await conn.aclose()
            return
        conn.idle_since = time.monotonic()
        conns.append(conn)

    async def _open(self, origin: _Origin, timeout: float) -> Connection:
        scheme, host, port = origin
        context = (self.ssl_context or _default_context()) if scheme == "https" else None
        try:
            with anyio.fail_after(timeout):
                conn = await connect(host, port, context)
        except TimeoutError:
            raise HTTPTimeout(f"connecting took more than {timeout:g}s") from None
        except OSError as exc:
            raise HTTPConnectError(_describe(exc)) from None
        self.connections_opened += 1
        return conn

    # -- one exchange --------------------------------------------------------------------

    async def _exchange(
        self, conn: Connection, data: bytes, timeout: float
    ) -> tuple[HTTPReply, bool]:
        got_bytes = False
        # The connection bounds each of its waits, like a socket timeout: a reply that
        # keeps trickling in is not cut off, one that stalls is.
        conn.timeout = timeout
        try:
            await conn.send(data)
            head = await conn.receive_until(b"\r\n\r\n", _MAX_HEADER_BYTES)
            got_bytes = True
            status, version, headers = _parse_head(head)
            body, framed = await _read_body(conn, headers)
        except TimeoutError:  # before OSError, of which it is a kind
            raise HTTPTimeout(f"no reply within {timeout:g}s") from None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                anyio.ClosedResourceError, OSError) as exc:
            if conn.reused and not got_bytes:
                raise _StaleConnection from None
            raise HTTPTransportError(_describe(exc)) from None
        except anyio.DelimiterNotFound:
            raise HTTPTransportError("the reply's headers are too long") from None
        connection = headers.get("connection", "").lower()
        keep = framed and (
            "keep-alive" in connection if version == "HTTP/1.0" else "close" not in connection
        )
        return HTTPReply(status, headers, body), keep


def _finished(loop: object) -> bool:
    is_closed = getattr(loop, "is_closed", None)  # an asyncio loop
    if callable(is_closed):
        return bool(is_closed())
    try:  # a trio token refuses callbacks once its run has finished
        loop.run_sync_soon(_nothing)  # type: ignore[attr-defined]
    except RuntimeError:
        return True
    except AttributeError:
        return False
    return False


def _nothing() -> None:
    pass


class _StaleConnection(Exception):
    pass


@functools.lru_cache(maxsize=256)
def _split(url: str) -> tuple[_Origin, str, str]:
    """Origin, request target and Host header of ``url`` (the same few URLs every call)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return (scheme, parts.hostname or "", port), target, parts.netloc.rpartition("@")[2]


def _request_head(
    method: str, target: str, host: str, headers: Mapping[str, str], length: int
) -> bytes:
    start, sized = _head_start(method, target, host, tuple(headers.items()))
    return start + b"\r\n" if sized else start + b"Content-Length: %d\r\n\r\n" % length


@functools.lru_cache(maxsize=256)
def _head_start(
    method: str, target: str, host: str, headers: tuple[tuple[str, str], ...]
) -> tuple[bytes, bool]:
    """The request head up to its length (the same few heads every call): the lines, and
    whether the caller gave ``Content-Length`` itself."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise HTTPTransportError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    sized = any(name.lower() == "content-length" for name, _ in headers)
    return "".join(line + "\r\n" for line in lines).encode("latin-1"), sized


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest.partition(" ")[0]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise HTTPTransportError(f"not an HTTP reply: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(code), version, headers


async def _read_body(reader: Connection, headers: dict[str, str]) -> tuple[bytes, bool]:
    """The body, and whether the connection is still framed (usable for another request)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: list[bytes] = []
        while True:
            size_line = await reader.receive_until(b"\r\n", _MAX_LINE_BYTES)
            try:
                size = int(size_line.split(b";")[0].strip() or b"x", 16)
            except ValueError:
                raise HTTPTransportError("a malformed chunk size in the reply") from None
            if size == 0:
                while await reader.receive_until(b"\r\n", _MAX_LINE_BYTES):
                    pass  # trailers, up to the empty line
                return b"".join(chunks), True
            chunks.append(await reader.receive_exactly(size))
            await reader.receive_exactly(2)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise HTTPTransportError(f"a malformed Content-Length: {length!r}")
        return (await reader.receive_exactly(int(length)) if int(length) else b""), True
    # Neither length nor chunks: the body runs to the end of the connection.
    parts: list[bytes] = []
    while True:
        try:
            parts.append(await reader.receive())
        except anyio.EndOfStream:
            return b"".join(parts), False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, anyio.EndOfStream | anyio.IncompleteRead):
        return "the server closed the connection mid-reply"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_CONTEXT: ssl.SSLContext | None = None


def _default_context() -> ssl.SSLContext:
    global _CONTEXT
    if _CONTEXT is None:
        # Loading the certificate store takes milliseconds: once per process.
        _CONTEXT = ssl.create_default_context()
    return _CONTEXT
