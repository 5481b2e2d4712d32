"""The pool's wire handling against a scripted TCP server: replies cut at every awkward
place, a body that trickles in, a peer that hangs up, a name to resolve.

Each test's server runs in the test's own event loop (asyncio and trio): it reads one
request head (and body) per scripted reply, then sends the reply's parts, sleeping where
the script says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

from runtime.http_pool import ConnectionPool, HTTPReply, HTTPTimeout, HTTPTransportError
from tests.runtime.helpers import until

pytestmark = pytest.mark.anyio

Part = bytes | float
"""Bytes to send, or seconds to wait before the next part."""


@dataclass
class Script:
    replies: list[list[Part]]
    """Per request, in order: the parts of its reply; the connection closes after the
    last reply."""
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0


async def _read_request(stream: anyio.abc.SocketStream, buffer: bytearray) -> bytes | None:
    while b"\r\n\r\n" not in buffer:
        try:
            buffer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            length = int(value)
    while len(buffer) < end + length:
        buffer += await stream.receive()
    request = bytes(buffer[:end + length])
    del buffer[:end + length]
    return request


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[int]:
    """Serve ``script`` on a local port (yielded) for the duration of the block."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        script.connections += 1
        buffer = bytearray()
        async with stream:
            while script.replies:
                request = await _read_request(stream, buffer)
                if request is None:
                    return
                script.requests.append(request)
                for part in script.replies.pop(0):
                    if isinstance(part, float):
                        await anyio.sleep(part)
                    else:
                        await stream.send(part)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield port
        finally:
            tg.cancel_scope.cancel()


def ok(body: bytes, *extra: bytes) -> list[Part]:
    return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body) + b"".join(extra)
            + b"\r\n" + body]


async def post(pool: ConnectionPool, port: int, timeout: float = 5.0,
               host: str = "127.0.0.1", **headers: str) -> HTTPReply:
    return await pool.request("POST", f"http://{host}:{port}/v1/x", headers=headers,
                              body=b'{"q": 1}', timeout=timeout)


@pytest.fixture
async def pool() -> AsyncIterator[ConnectionPool]:
    pool = ConnectionPool()
    yield pool
    await pool.aclose()


async def test_two_replies_on_one_connection_each_read_to_its_end(pool: ConnectionPool) -> None:
    # Both replies arrive in one segment after the second request: the first reply's
    # read must leave nothing behind, the second must start at its own status line.
    script = Script([ok(b"first"), ok(b"second", b"X-Seen: yes\r\n")])
    async with scripted(script) as port:
        first = await post(pool, port)
        second = await post(pool, port)
    assert (first.status, first.body) == (200, b"first")
    assert (second.body, second.headers["x-seen"]) == (b"second", "yes")
    assert script.connections == pool.connections_opened == 1
    assert [r.split(b"\r\n")[0] for r in script.requests] == [b"POST /v1/x HTTP/1.1"] * 2
    assert all(r.endswith(b'Content-Length: 8\r\n\r\n{"q": 1}') for r in script.requests)


async def test_a_reply_cut_inside_its_head_and_body(pool: ConnectionPool) -> None:
    whole = ok(b'{"answer": "pieces"}')[0]
    script = Script([[whole[:7], 0.05, whole[7:30], 0.05, whole[30:-4], 0.05, whole[-4:]]])
    async with scripted(script) as port:
        reply = await post(pool, port)
    assert reply.body == b'{"answer": "pieces"}'


async def test_the_timeout_bounds_each_wait_not_the_whole_reply(pool: ConnectionPool) -> None:
    # Three waits of half a timeout each: longer than one timeout in all, each shorter
    # by a margin a loaded machine does not eat up.
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    script = Script([[1.0, head, 1.0, b"3\r\nabc\r\n", 1.0, b"0\r\n\r\n"]])
    async with scripted(script) as port:
        reply = await post(pool, port, timeout=2.0)
    assert reply.body == b"abc"


async def test_a_body_that_stalls_past_the_timeout_times_out(pool: ConnectionPool) -> None:
    # The head came, so the deadline moved on; then the body never did.
    script = Script([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", 30.0]])
    async with scripted(script) as port:
        with pytest.raises(HTTPTimeout, match=r"no reply within 0\.3s"):
            await post(pool, port, timeout=0.3)


async def test_a_body_to_the_end_of_the_connection(pool: ConnectionPool) -> None:
    # Neither a length nor chunks: the body is what comes until the peer hangs up, and
    # the connection is not kept.
    script = Script([[b"HTTP/1.0 200 OK\r\n\r\npart one, ", 0.05, b"part two"]])
    async with scripted(script) as port:
        reply = await post(pool, port)
    assert reply.body == b"part one, part two"
    assert pool.idle_count() == 0


async def test_a_peer_that_hangs_up_mid_body(pool: ConnectionPool) -> None:
    script = Script([[b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"]])
    async with scripted(script) as port:
        with pytest.raises(HTTPTransportError, match="closed the connection mid-reply"):
            await post(pool, port)
    assert pool.idle_count() == 0


async def test_a_head_longer_than_allowed(pool: ConnectionPool) -> None:
    script = Script([[b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n"]])
    async with scripted(script) as port:
        with pytest.raises(HTTPTransportError, match="headers are too long"):
            await post(pool, port)


async def test_a_reply_that_is_not_http(pool: ConnectionPool) -> None:
    script = Script([[b"SSH-2.0-OpenSSH\r\n\r\n"]])
    async with scripted(script) as port:
        with pytest.raises(HTTPTransportError, match="not an HTTP reply"):
            await post(pool, port)


async def test_a_host_name_is_resolved(pool: ConnectionPool) -> None:
    script = Script([ok(b"by name")])
    async with scripted(script) as port:
        reply = await post(pool, port, host="localhost")
    assert reply.body == b"by name"
    assert b"\r\nHost: localhost:%d\r\n" % port in script.requests[0]


async def test_a_header_with_a_line_break_sends_nothing(pool: ConnectionPool) -> None:
    script = Script([ok(b"never")])
    async with scripted(script) as port:
        with pytest.raises(HTTPTransportError, match="contains a line break"):
            await post(pool, port, **{"X-Evil": "a\r\nInjected: yes"})
        # The same headers again: refused again (the check is not skipped once cached).
        with pytest.raises(HTTPTransportError, match="contains a line break"):
            await post(pool, port, **{"X-Evil": "a\r\nInjected: yes"})
        reply = await post(pool, port, **{"X-Fine": "yes"})
    assert reply.body == b"never"
    assert len(script.requests) == 1
    assert b"Injected" not in script.requests[0]
    assert b"\r\nX-Fine: yes\r\n" in script.requests[0]


async def test_bodies_larger_than_the_buffers_arrive_whole_both_ways(pool: ConnectionPool) -> None:
    # Larger than the kernel's socket buffers and than what a connection reads ahead
    # before it waits for its reader: sending and reading both pause and resume.
    answer = bytes(range(256)) * (12 * 1024)  # 3 MiB
    question = b"q" * (8 * 1024 * 1024)
    script = Script([ok(answer)])
    async with scripted(script) as port:
        reply = await pool.request("POST", f"http://127.0.0.1:{port}/v1/x", headers={},
                                   body=question, timeout=30)
    assert reply.body == answer
    assert script.requests[0].endswith(b"\r\n\r\n" + question)


async def test_a_connection_the_server_dropped_unannounced_is_replaced(
    pool: ConnectionPool,
) -> None:
    # The server hangs up after its reply without saying "Connection: close"; the next
    # request, sent at once (no check before reuse), finds the connection dead before
    # any reply byte and goes out again on a fresh one.
    script = Script([ok(b"first")])
    async with scripted(script) as port:
        assert (await post(pool, port)).body == b"first"
        [conn] = [c for conns in pool._state().idle.values() for c in conns]
        await until(conn.peer_closed, "the server's FIN")
        script.replies.append(ok(b"second"))
        assert (await post(pool, port)).body == b"second"
    assert script.connections == pool.connections_opened == 2
    assert len(script.requests) == 2
