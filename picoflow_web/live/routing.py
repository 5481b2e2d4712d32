"""WebSocket routes, mounted by ``picoflow_web.asgi`` under the ``websocket`` protocol, and
the Origin check in front of the browsers' ones."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable
from channels.security.websocket import AllowedHostsOriginValidator, OriginValidator
from django.urls import path, re_path

from picoflow_web.live import consumers

if TYPE_CHECKING:
    from channels.consumer import _ASGIApplicationProtocol, _ChannelScope
    from channels.routing import _ExtendedURLPattern
    from channels.utils import _ChannelApplication

logger = logging.getLogger("picoflow.web")

# Django's stubs route views; Channels' routes carry ASGI applications (its URLRouter's
# patterns), built by the same two functions.
_Route = Callable[[str, "_ASGIApplicationProtocol"], "_ExtendedURLPattern"]
_socket_path = cast(_Route, path)
_socket_re_path = cast(_Route, re_path)

websocket_urlpatterns: list[_ExtendedURLPattern] = [
    _socket_path("ws/runs/", consumers.RunsConsumer.as_asgi()),
    # Any run id, even one stored before ids were checked: a "/", a line break...
    _socket_re_path(r"(?s)^ws/runs/(?P<run_id>.+)/\Z", consumers.RunConsumer.as_asgi()),
]
"""The browsers' sockets: behind the session/auth middleware and the Origin check."""

not_found: list[_ExtendedURLPattern] = [
    _socket_re_path(r"(?s)", consumers.NotFound.as_asgi()),
]
"""After every other route: a path no route takes is closed with 4404 (a router with no
route for it raises, and the socket would close with 1011 and a traceback)."""

RELAY_PATH = "/ws/relay/"
relay_app = consumers.RelayConsumer.as_asgi()
"""The workers' socket: its relay key authenticates it, so neither cookies nor an Origin
apply (a worker reaches the server as ``127.0.0.1`` whatever ``ALLOWED_HOSTS`` says)."""

_origin_refused = consumers.OriginRefused.as_asgi()


class _OriginCheck(OriginValidator):
    """Channels' check of the ``Origin`` header, refusing as the app's sockets refuse:
    accepted, then closed with 4403 (Channels' own closes before accepting, which a
    browser sees as a failed handshake, 1006)."""

    async def __call__(self, scope: _ChannelScope, receive: ASGIReceiveCallable,
                       send: ASGISendCallable) -> Any:
        raw = next((value.decode("latin-1") for name, value in scope.get("headers", [])
                    if name == b"origin"), None)
        try:
            valid = self.valid_origin(None if raw is None else urlparse(raw))
        except ValueError:  # no URL at all ("http://[::1", a port that is no number)
            valid = False
        if valid:
            # Channels' stubs allow an ASGI 2 application too: the stack is ASGI 3.
            application = cast(ASGI3Application, self.application)
            return await application(scope, receive, send)
        logger.warning("Websocket %s refused: Origin %r is not an allowed host",
                       scope.get("path", "?"), raw)
        return await _origin_refused(scope, receive, send)


def origin_checked(app: _ChannelApplication) -> OriginValidator:
    """``app`` behind the Origin check against ``ALLOWED_HOSTS`` (as Channels'
    ``AllowedHostsOriginValidator`` reads them)."""
    return _OriginCheck(app, AllowedHostsOriginValidator(app).allowed_origins)
