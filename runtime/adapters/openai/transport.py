"""The HTTP transport of the clients the adapter builds: a request that went out on a pooled
connection the server had already closed goes again, on another connection.

A server closes an idle keep-alive connection whenever it likes. If that happens as the
client picks the connection from its pool, the request is written into a socket nobody
reads, and what comes back is either an end of stream (``RemoteProtocolError``: "Server
disconnected without sending a response") or a connection reset (``ReadError``), or the
write itself fails (``WriteError``), which of the three depending on timing alone. None of
them is the server's answer to the request.

Which connection carried the request is the one thing that tells this race from a server
that took the request and then died: httpcore reports, through the request's ``trace``
extension, when it opens a new connection. Only a request sent on a reused one, that failed
before any response head arrived (a failure while the body streams happens after this
transport has returned), is sent again, and only when its body can be sent again (the SDK's
JSON body is bytes). A failure on a new connection is the caller's to see.
"""

from __future__ import annotations

import importlib
from typing import Any

import openai

_http: Any = importlib.import_module(type(openai.DEFAULT_CONNECTION_LIMITS).__module__
                                     .split(".", 1)[0])
"""The HTTP library the installed SDK is built on (httpx2 for openai 3.x, httpx before)."""

_OPENED = "connection.connect_"
"""How httpcore's trace events for a new connection begin (``connect_tcp``,
``connect_unix_socket``)."""

_STALE_ERRORS: tuple[type[BaseException], ...] = (
    _http.ReadError, _http.WriteError, _http.RemoteProtocolError)


def stale(exc: BaseException) -> bool:
    """Whether ``exc`` is what a request meets on a connection the server had closed."""
    if isinstance(exc, _http.RemoteProtocolError):
        return "without sending a response" in str(exc)
    return isinstance(exc, (_http.ReadError, _http.WriteError))


class ReplayStaleTransport(_http.AsyncHTTPTransport):  # type: ignore[misc]
    """``AsyncHTTPTransport`` that sends a request again when the pooled connection it went
    out on turned out to be closed (see the module's docstring)."""

    async def handle_async_request(self, request: Any) -> Any:
        replayable = isinstance(request.stream, _http.ByteStream)
        outer = request.extensions.get("trace")
        while True:
            opened = False

            async def trace(name: str, info: dict[str, Any]) -> None:
                nonlocal opened
                if name.startswith(_OPENED):
                    opened = True
                if outer is not None:
                    await outer(name, info)

            request.extensions = {**request.extensions, "trace": trace}
            try:
                return await super().handle_async_request(request)
            except _STALE_ERRORS as exc:
                if opened or not replayable or not stale(exc):
                    raise
            # The pool has dropped the dead connection. Another idle one may be as stale (a
            # server restarted under the whole pool): each turn of this loop uses one up,
            # and the pool opens a new connection once no idle one is left.
