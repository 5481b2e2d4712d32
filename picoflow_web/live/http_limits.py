"""Daphne answers a request line or headers over Twisted's limits with 414 or 431.

Daphne parses HTTP with Twisted's ``HTTPChannel``, whose limits are 16 KiB for one line
(``MAX_LENGTH``), for the request line and headers together (``totalHeadersSize``) and
500 headers (``maxHeaders``). Over the line limit it drops the connection without a word,
over the others it answers a bare ``400``, as it does for a request it finds malformed (a
multipart body it cannot parse). :class:`LimitedHTTPChannel` keeps the limits and answers
in the API's error shape instead: ``414`` (``uri_too_long``) for a request line, ``431``
(``headers_too_large``) for headers, ``400`` (``malformed_request``) for the malformed.
Over a limit it then closes its side, reads and drops what the client still sends
(closing with unread input would reset the connection, and the client could lose the
answer) and aborts after :data:`LINGER_SECONDS`.

:func:`install` makes Daphne's HTTP factory build it; :func:`picoflow_web.asgi_stack.
with_picoflow` calls it, so both ``picoflow-web serve`` and a plain ``daphne
picoflow_web.asgi:application`` (or a project's ``asgi.py`` using the stack) answer: Daphne
loads the application before it builds its factory.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from twisted.web import http

logger = logging.getLogger("picoflow.web")

LINGER_SECONDS = 5.0
"""How long a refused connection may go on sending before it is cut."""


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"type": "error", "message": message, "code": code,
                       "error_code": code}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode("ascii") + body


class LimitedHTTPChannel(http.HTTPChannel):
    """Twisted's channel, answering what is over its limits (see the module docstring)."""

    _refused = False

    def lineLengthExceeded(self, line: bytes) -> None:
        self._refuse(request_line=self._receivedHeaderSize == 0)

    def lineReceived(self, line: bytes) -> None:
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._refuse(request_line=self._receivedHeaderSize == 0)
            return
        super().lineReceived(line)  # type: ignore[no-untyped-call]

    def headerReceived(self, line: bytes) -> bool:
        if self._receivedHeaderCount >= self.maxHeaders:
            self._refuse(request_line=False)
            return False
        return bool(super().headerReceived(line))  # type: ignore[no-untyped-call]

    def _refuse(self, *, request_line: bool) -> None:
        if request_line:
            status, reason, code = 414, "URI Too Long", "uri_too_long"
            message = f"The request line is longer than {self.MAX_LENGTH} bytes."
        else:
            status, reason, code = 431, "Request Header Fields Too Large", "headers_too_large"
            message = (f"The headers are larger than {self.totalHeadersSize} bytes, or more "
                       f"than {self.maxHeaders}.")
        logger.warning("HTTP request from %s refused with %d: %s", self._peer(), status,
                       message)
        self._refused = True
        self.dataReceived = self.lineReceived = _drop  # type: ignore[method-assign,assignment]
        transport: Any = self.transport
        transport.write(_answer(status, reason, code, message))
        transport.loseWriteConnection()
        self.setTimeout(LINGER_SECONDS)  # type: ignore[no-untyped-call]

    def _respondToBadRequestAndDisconnect(self) -> None:
        # Twisted's answer to what it finds malformed before the application sees it (a bad
        # request line or header, a multipart body it cannot parse): in the error shape too.
        transport: Any = self.transport
        transport.write(_answer(400, "Bad Request", "malformed_request",
                                "The request is not well-formed HTTP (request line, headers "
                                "or a multipart body)."))
        self.loseConnection()  # type: ignore[no-untyped-call]

    def timeoutConnection(self) -> None:
        if self._refused:
            transport: Any = self.transport
            transport.abortConnection()
        else:
            super().timeoutConnection()  # type: ignore[no-untyped-call]

    def _peer(self) -> str:
        transport: Any = self.transport
        peer: Any = getattr(transport, "getPeer", lambda: None)()
        return f"{peer.host}:{peer.port}" if hasattr(peer, "port") else "?"


def _drop(data: bytes) -> None:
    """What a refused connection still sends: read and dropped."""


def _protocol(factory: http.HTTPFactory) -> LimitedHTTPChannel:
    return LimitedHTTPChannel()  # type: ignore[no-untyped-call]  # Twisted's __init__


def install() -> bool:
    """Make Daphne's HTTP factory build :class:`LimitedHTTPChannel` (in this process);
    whether it could (Daphne installed, and Twisted without HTTP/2)."""
    try:
        from daphne.http_protocol import HTTPFactory
    except ImportError:
        return False
    if http.H2_ENABLED:
        # Twisted's default protocol is then a proxy that switches to HTTP/2 after ALPN;
        # building the HTTP/1.1 channel directly would lose that.
        logger.warning("Twisted has HTTP/2: over-long requests keep Twisted's own answers "
                       "(a dropped connection or a bare 400)")
        return False
    HTTPFactory.protocol = _protocol
    return True
