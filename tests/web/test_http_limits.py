"""A request line or headers over Daphne's (Twisted's) limits get an answer, 414 or 431 in
the API's error shape, not a dropped connection or a bare 400
(:mod:`picoflow_web.live.http_limits`): from a plain ``daphne picoflow_web.asgi:application``
and from ``picoflow-web serve``, over a raw socket."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tests.livedaphne import LiveDaphne, SharedServer
from tests.packaging.installed import REPO_ROOT, background, free_port, outside_env, wait_healthy

LONG_QUERY = b"GET /api/runs?q=" + b"x" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
LONG_HEADER = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"y" * 20_000
               + b"\r\n\r\n")
BIG_HEADERS = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               + b"".join(b"X-H%d: %s\r\n" % (n, b"z" * 1000) for n in range(20)) + b"\r\n")
MANY_HEADERS = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + b"".join(b"X-%d: 1\r\n" % n for n in range(600)) + b"\r\n")
LONG_WEBSOCKET = (b"GET /ws/runs/ HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nCookie: " + b"c" * 20_000
                  + b"\r\n\r\n")
OVER_LIMITS = {
    "long query": (LONG_QUERY, 414, "uri_too_long"),
    "long header": (LONG_HEADER, 431, "headers_too_large"),
    "headers too large together": (BIG_HEADERS, 431, "headers_too_large"),
    "too many headers": (MANY_HEADERS, 431, "headers_too_large"),
    "websocket handshake": (LONG_WEBSOCKET, 431, "headers_too_large"),
}


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` whole, then read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.sendall(request)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    return answer


def assert_refused(answer: bytes, status: int, code: str) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].startswith(b"HTTP/1.1 %d " % status), answer[:300]
    assert b"content-type: application/json" in head.lower()
    parsed = json.loads(body)
    assert parsed["type"] == "error" and parsed["error_code"] == code, parsed


@pytest.fixture
def server(shared_daphne: SharedServer) -> LiveDaphne:
    return shared_daphne.server


@pytest.mark.parametrize("name", OVER_LIMITS)
def test_daphne_answers_what_is_over_its_limits(server: LiveDaphne, name: str) -> None:
    request, status, code = OVER_LIMITS[name]
    before = len(server.log())
    assert_refused(exchange(server.port, request), status, code)
    # The next request on a new connection is served as ever, and nothing failed.
    ok = exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               b"Connection: close\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200 "), ok[:200]
    log = server.log()[before:]
    assert "Traceback" not in log and f"refused with {status}" in log


BAD_MULTIPART = b"--x\r\nno boundary was declared"
MALFORMED = {
    "multipart body": (b"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Content-Type: multipart/form-data\r\n"
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                       % (len(BAD_MULTIPART), BAD_MULTIPART)),
    "header without a colon": b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nno-colon\r\n\r\n",
}


@pytest.mark.parametrize("name", MALFORMED)
def test_what_twisted_finds_malformed_is_a_json_400(server: LiveDaphne, name: str) -> None:
    assert_refused(exchange(server.port, MALFORMED[name]), 400, "malformed_request")


def test_requests_within_the_limits_are_served(server: LiveDaphne) -> None:
    just_under = (b"GET /healthz?q=" + b"x" * 8_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  + b"".join(b"X-%d: 1\r\n" % n for n in range(100))
                  + b"Connection: close\r\n\r\n")
    assert exchange(server.port, just_under).startswith(b"HTTP/1.1 200 ")


def test_serve_answers_a_long_query_with_414(tmp_path: Path) -> None:
    port = free_port()
    env = outside_env(tmp_path, {"PYTHONPATH": str(REPO_ROOT)})
    log = tmp_path / "serve.log"
    with background([sys.executable, "-m", "picoflow_web", "serve", "--port", str(port),
                     "--workers", "0", "--data-dir", str(tmp_path / "data")],
                    env=env, cwd=tmp_path, log_path=log) as process:
        wait_healthy(f"http://127.0.0.1:{port}", process, log)
        assert_refused(exchange(port, LONG_QUERY), 414, "uri_too_long")
