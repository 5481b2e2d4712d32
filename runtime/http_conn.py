"""One HTTP connection of :mod:`runtime.http_pool`: a byte source and what was read ahead.

Three kinds, told apart by the scheme and the event loop:

* ``http`` on asyncio: the loop's own transport, with the connection as its protocol
  (what arrives is appended to the buffer in a callback; the socket stays registered):
  less client CPU per pooled request than a wait on a bare socket
  (``bench/model_fanout.py`` measures it).
* ``http`` on trio: a plain non-blocking socket, waited on with
  :func:`anyio.wait_readable` and :func:`anyio.wait_writable`. anyio's socket streams add
  a protocol object, guards and shielded checkpoints to every read, which a bare socket
  does without.
* ``https``: an anyio TLS stream, which does the handshake and the record layer.

Both read through the same buffer, so the reply parser sees one interface. The read
errors are anyio's: :class:`anyio.EndOfStream` when the peer hung up,
:class:`anyio.IncompleteRead` when it did so mid-body, :class:`anyio.DelimiterNotFound`
when a line is longer than allowed, and :class:`OSError` for a reset.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import errno
import ipaddress
import math
import os
import select
import socket
import ssl
from typing import cast

import anyio
import anyio.abc
import anyio.lowlevel

READ_CHUNK = 65536


class Connection(abc.ABC):
    """A keep-alive connection: sends bytes, reads replies through a read-ahead buffer."""

    __slots__ = ("_buffer", "idle_since", "reused", "timeout")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.idle_since = 0.0
        self.reused = False
        self.timeout = math.inf
        """Seconds any one wait (for bytes to read, or room to write) may take before it
        raises TimeoutError."""

    @abc.abstractmethod
    async def send(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    @abc.abstractmethod
    async def _fill(self) -> None:
        """Append the next bytes the peer sent (at least one) to the buffer; EndOfStream
        when it hung up."""

    @abc.abstractmethod
    def _raw_socket(self) -> socket.socket | None: ...

    @property
    def buffered(self) -> int:
        """Bytes read ahead and not consumed yet."""
        return len(self._buffer)

    async def receive_until(self, delimiter: bytes, max_bytes: int) -> bytes:
        """The bytes before ``delimiter`` (which is consumed too)."""
        buffer = self._buffer
        start = 0
        while True:
            at = buffer.find(delimiter, start)
            if 0 <= at <= max_bytes:
                line = bytes(buffer[:at])
                del buffer[:at + len(delimiter)]
                return line
            if len(buffer) >= max_bytes:
                raise anyio.DelimiterNotFound(max_bytes)
            start = max(len(buffer) - len(delimiter) + 1, 0)
            await self._fill()

    async def receive_exactly(self, count: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < count:
            try:
                await self._fill()
            except anyio.EndOfStream:
                raise anyio.IncompleteRead from None
        data = bytes(buffer[:count])
        del buffer[:count]
        return data

    async def receive(self) -> bytes:
        """Whatever is buffered, else the next bytes; EndOfStream when the peer hung up."""
        if not self._buffer:
            await self._fill()
        data = bytes(self._buffer)
        self._buffer.clear()
        return data

    def peer_closed(self) -> bool:
        """Whether an idle connection has something to read: the server's FIN (it timed
        the connection out) or bytes it had no business sending. Either way, not reusable.
        """
        if self._buffer:
            return True
        raw = self._raw_socket()
        if raw is None:
            return False
        try:
            if hasattr(select, "poll"):  # select() fails on descriptors past FD_SETSIZE
                poller = select.poll()
                poller.register(raw, select.POLLIN)
                return bool(poller.poll(0))
            readable, _, _ = select.select([raw], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)


class _SocketConnection(Connection):
    """Plain TCP on a non-blocking socket."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock

    async def send(self, data: bytes) -> None:
        sock = self._sock
        view = memoryview(data)
        while view:
            try:
                sent = sock.send(view)
            except BlockingIOError:
                with anyio.fail_after(self.timeout):
                    await anyio.wait_writable(sock)
                continue
            view = view[sent:]

    async def _fill(self) -> None:
        sock = self._sock
        while True:
            try:
                data = sock.recv(READ_CHUNK)
            except BlockingIOError:
                with anyio.fail_after(self.timeout):
                    await anyio.wait_readable(sock)
                continue
            if not data:
                raise anyio.EndOfStream
            self._buffer += data
            return

    async def aclose(self) -> None:
        # Nothing waits on the socket here (its exchange ended), so closing is immediate.
        self._sock.close()

    def _raw_socket(self) -> socket.socket | None:
        return None if self._sock.fileno() < 0 else self._sock


_MAX_READ_AHEAD = 1024 * 1024
"""Bytes a transport connection buffers before it stops reading until they are consumed."""


class _TransportConnection(Connection, asyncio.Protocol):
    """Plain TCP on asyncio: the event loop's transport, with this object as its protocol.

    The transport keeps its socket registered with the selector and hands over what
    arrives in a callback, where a wait on a bare socket registers and unregisters it
    each time (two system calls) and costs the loop an extra pass.
    """

    __slots__ = (
        "_gone",
        "_loop",
        "_lost",
        "_reading_paused",
        "_transport",
        "_waiter",
        "_writing_paused",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._gone = False
        self._lost: Exception | None = None
        self._reading_paused = False
        self._writing_paused = False

    # -- the protocol's side (called by the event loop) --------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports do not derive from asyncio's.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > _MAX_READ_AHEAD and not self._reading_paused:
            self._reading_paused = True
            assert self._transport is not None
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._gone = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone = True
        self._lost = exc
        self._writing_paused = False
        self._wake()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        """Until a callback wakes this connection; TimeoutError after ``timeout``."""
        waiter = self._waiter = self._loop.create_future()
        # A timer rather than a cancel scope: much cheaper, and paid on every request.
        timer = None if self.timeout == math.inf else self._loop.call_later(
            self.timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    # -- the connection's side ---------------------------------------------------------

    async def send(self, data: bytes) -> None:
        transport = self._transport
        if self._gone or transport is None or transport.is_closing():
            # A closing transport drops writes without a word; the socket would say EPIPE.
            raise self._lost or OSError(errno.EPIPE, "the connection is closed")
        transport.write(data)
        while self._writing_paused:
            await self._wait()
        if self._lost is not None:
            raise self._lost

    async def _fill(self) -> None:
        size = len(self._buffer)
        if self._reading_paused:
            self._reading_paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        while len(self._buffer) == size:
            if self._gone:
                if self._lost is not None:
                    raise self._lost
                raise anyio.EndOfStream
            await self._wait()

    def peer_closed(self) -> bool:
        # The loop reports a hang-up as it happens: no need to ask the socket.
        return bool(self._buffer) or self._gone

    async def aclose(self) -> None:
        # Like a socket's close: at once, whatever was left unsent or unread.
        if self._transport is not None:
            self._transport.abort()

    def _raw_socket(self) -> socket.socket | None:
        return None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _StreamConnection(Connection):
    """TLS, on an anyio stream."""

    __slots__ = ("_stream",)

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        super().__init__()
        self._stream = stream

    async def send(self, data: bytes) -> None:
        with anyio.fail_after(self.timeout):
            await self._stream.send(data)

    async def _fill(self) -> None:
        with anyio.fail_after(self.timeout):
            self._buffer += await self._stream.receive(READ_CHUNK)

    async def aclose(self) -> None:
        # A connection is closed when its task is being cancelled too: the close must not
        # wait on a peer that may never answer.
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(1),
            contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError),
        ):
            await self._stream.aclose()

    def _raw_socket(self) -> socket.socket | None:
        return self._stream.extra(anyio.abc.SocketAttribute.raw_socket, None)


async def connect(host: str, port: int, context: ssl.SSLContext | None) -> Connection:
    """Open a connection (TLS when ``context`` is given). Raises OSError on failure."""
    if context is not None:
        stream: anyio.abc.ByteStream = await anyio.connect_tcp(
            host, port, ssl_context=context, tls_hostname=host,
            # HTTP frames its own bodies; many servers skip TLS close_notify.
            tls_standard_compatible=False,
        )
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        if raw is not None:
            _no_delay(raw)
        return _StreamConnection(stream)
    loop = anyio.lowlevel.current_token().native_token
    if isinstance(loop, asyncio.AbstractEventLoop):
        conn = _TransportConnection(loop)
        # asyncio resolves a name off the loop and sets TCP_NODELAY itself.
        await loop.create_connection(lambda: conn, host, port)
        return conn
    return _SocketConnection(await _connect_socket(host, port))


async def _connect_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket: each resolved address in turn."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:  # a name: resolved off the event loop, as anyio does
        targets = [(family, sockaddr) for family, _, _, _, sockaddr in await anyio.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)]
    else:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        targets = [(family, (str(address), port))]
    failure: OSError | None = None
    for family, target in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            try:
                sock.connect(target)
            except BlockingIOError:
                await anyio.wait_writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise OSError(code, os.strerror(code)) from None
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:  # cancelled while connecting
            sock.close()
            raise
        _no_delay(sock)
        return sock
    raise failure or OSError(errno.EADDRNOTAVAIL, f"no address for {host!r}")


def _no_delay(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
