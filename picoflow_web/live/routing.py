"""WebSocket routes, mounted by ``picoflow_web.asgi`` under the ``websocket`` protocol, and
the Origin check in front of the browsers' ones."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from channels.security.websocket import AllowedHostsOriginValidator, OriginValidator
from django.urls import URLPattern, URLResolver, path, re_path

from picoflow_web import consumers

logger = logging.getLogger("picoflow.web")

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/runs/", consumers.RunsConsumer.as_asgi()),
    # Any run id, even one stored before ids were checked: a "/", a line break...
    re_path(r"(?s)^ws/runs/(?P<run_id>.+)/\Z", consumers.RunConsumer.as_asgi()),
]
"""The browsers' sockets: behind the session/auth middleware and the Origin check."""

not_found: list[URLPattern | URLResolver] = [
    re_path(r"(?s)", consumers.NotFound.as_asgi()),
]
"""After every other route: a path no route takes is closed with 4404 (a router with no
route for it raises, and the socket would close with 1011 and a traceback)."""

RELAY_PATH = "/ws/relay/"
relay_app = consumers.RelayConsumer.as_asgi()
"""The workers' socket: its relay key authenticates it, so neither cookies nor an Origin
apply (a worker reaches the server as ``127.0.0.1`` whatever ``ALLOWED_HOSTS`` says)."""

_origin_refused = consumers.OriginRefused.as_asgi()


class _OriginCheck(OriginValidator):  # type: ignore[misc]
    """Channels' check of the ``Origin`` header, refusing as the app's sockets refuse:
    accepted, then closed with 4403 (Channels' own closes before accepting, which a
    browser sees as a failed handshake, 1006)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        raw = next((value.decode("latin-1") for name, value in scope.get("headers", [])
                    if name == b"origin"), None)
        try:
            valid = self.valid_origin(None if raw is None else urlparse(raw))
        except ValueError:  # no URL at all ("http://[::1", a port that is no number)
            valid = False
        if valid:
            return await self.application(scope, receive, send)
        logger.warning("Websocket %s refused: Origin %r is not an allowed host",
                       scope.get("path", "?"), raw)
        return await _origin_refused(scope, receive, send)


def origin_checked(app: Any) -> Any:
    """``app`` behind the Origin check against ``ALLOWED_HOSTS`` (as Channels'
    ``AllowedHostsOriginValidator`` reads them)."""
    return _OriginCheck(app, AllowedHostsOriginValidator(app).allowed_origins)
