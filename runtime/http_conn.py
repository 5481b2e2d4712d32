"""One HTTP connection of :mod:`runtime.http_pool`: a byte source and what was read ahead.

Two kinds, told apart by the scheme:

* ``http``: a plain non-blocking socket, waited on with :func:`anyio.wait_readable` and
  :func:`anyio.wait_writable` (on asyncio, one reader callback per wait; on trio, its
  own wait). A fan-out of model calls to a local server (vLLM, Ollama, a gateway) spends
  much of its client CPU in the transport, and anyio's socket streams add a protocol
  object, guards and shielded checkpoints to every read: 2,000 pooled requests to a
  local server cost about 245 µs of client CPU each on streams, 165 µs on sockets.
* ``https``: an anyio TLS stream, which does the handshake and the record layer.

Both read through the same buffer, so the reply parser sees one interface. The read
errors are anyio's: :class:`anyio.EndOfStream` when the peer hung up,
:class:`anyio.IncompleteRead` when it did so mid-body, :class:`anyio.DelimiterNotFound`
when a line is longer than allowed, and :class:`OSError` for a reset.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import ipaddress
import os
import select
import socket
import ssl

import anyio
import anyio.abc

READ_CHUNK = 65536


class Connection(abc.ABC):
    """A keep-alive connection: sends bytes, reads replies through a read-ahead buffer."""

    __slots__ = ("_buffer", "idle_since", "reused")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.idle_since = 0.0
        self.reused = False

    @abc.abstractmethod
    async def send(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    @abc.abstractmethod
    async def _receive_some(self) -> bytes:
        """The next bytes the peer sent (at least one); EndOfStream when it hung up."""

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
            buffer += await self._receive_some()

    async def receive_exactly(self, count: int) -> bytes:
        buffer = self._buffer
        while len(buffer) < count:
            try:
                buffer += await self._receive_some()
            except anyio.EndOfStream:
                raise anyio.IncompleteRead from None
        data = bytes(buffer[:count])
        del buffer[:count]
        return data

    async def receive(self) -> bytes:
        """Whatever is buffered, else the next bytes; EndOfStream when the peer hung up."""
        if self._buffer:
            data = bytes(self._buffer)
            self._buffer.clear()
            return data
        return await self._receive_some()

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
                await anyio.wait_writable(sock)
                continue
            view = view[sent:]

    async def _receive_some(self) -> bytes:
        sock = self._sock
        while True:
            try:
                data = sock.recv(READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(sock)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        # Nothing waits on the socket here (its exchange ended), so closing is immediate.
        self._sock.close()

    def _raw_socket(self) -> socket.socket | None:
        return None if self._sock.fileno() < 0 else self._sock


class _StreamConnection(Connection):
    """TLS, on an anyio stream."""

    __slots__ = ("_stream",)

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        super().__init__()
        self._stream = stream

    async def send(self, data: bytes) -> None:
        await self._stream.send(data)

    async def _receive_some(self) -> bytes:
        return await self._stream.receive(READ_CHUNK)

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
