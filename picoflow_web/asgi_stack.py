"""The app's ASGI stack around a project's Django application, for a project's ``asgi.py``::

    from picoflow_web.asgi_stack import with_picoflow
    application = with_picoflow(get_asgi_application())

Call it after ``get_asgi_application()`` (Django must be set up before the consumers import
models). It builds the flow engine at once (a bad ``PICOFLOW_FLOWS`` stops Daphne at
start-up), routes ``/ws/runs/...`` to the app's consumers (and any ``websocket_routes`` of
the project) behind the session/auth middleware and an Origin check against
``ALLOWED_HOSTS``, and starts the watchdog that declares silent runs interrupted.
``picoflow_web.asgi`` is this stack around the standalone site.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator

from picoflow_web import relay, watchdog
from picoflow_web.engine import get_engine
from picoflow_web.routing import RELAY_PATH, relay_app, websocket_urlpatterns


def with_picoflow(http_app: Any, websocket_routes: Sequence[Any] = ()) -> Any:
    """``http_app`` for HTTP; the app's websocket routes, then ``websocket_routes``."""
    get_engine()
    relay.SERVES_WEBSOCKETS = True  # browsers listen on this process's channel layer
    browsers = AllowedHostsOriginValidator(
        AuthMiddlewareStack(URLRouter([*websocket_urlpatterns, *websocket_routes])))

    async def websocket(scope: Any, receive: Any, send: Any) -> None:
        app = relay_app if scope.get("path") == RELAY_PATH else browsers
        await app(scope, receive, send)

    return watchdog.watched(ProtocolTypeRouter({"http": http_app, "websocket": websocket}))
