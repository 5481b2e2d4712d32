"""The app's ASGI stack around a project's Django application, for a project's ``asgi.py``::

    from picoflow_web.asgi_stack import with_picoflow
    application = with_picoflow(get_asgi_application())

Call it after ``get_asgi_application()`` (Django must be set up before the consumers import
models). It builds the flow engine at once (a bad ``PICOFLOW_FLOWS`` stops Daphne at
start-up), routes ``/ws/runs/...`` to the app's consumers (and any ``websocket_routes`` of
the project) behind the session/auth middleware and an Origin check against
``ALLOWED_HOSTS`` (a refused socket is closed with 4403: see :mod:`picoflow_web.live.consumers`),
starts the watchdog that declares silent runs interrupted, and, under Daphne, answers
over-long request lines and headers with 414/431 (:mod:`picoflow_web.live.http_limits`).
``picoflow_web.asgi`` is this stack around the standalone site.

It puts the parts together (the engine of ``execute``, the sockets of ``live``, the
watchdog of ``record``), so it sits above them all, beside ``asgi`` and ``urls``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter

from picoflow_web.execute.engine import get_engine
from picoflow_web.live import http_limits, relay
from picoflow_web.live.routing import (
    RELAY_PATH,
    not_found,
    origin_checked,
    relay_app,
    websocket_urlpatterns,
)
from picoflow_web.record import watchdog


def with_picoflow(http_app: Any, websocket_routes: Sequence[Any] = ()) -> Any:
    """``http_app`` for HTTP; the app's websocket routes, then ``websocket_routes``."""
    get_engine()
    relay.SERVES_WEBSOCKETS = True  # browsers listen on this process's channel layer
    http_limits.install()  # under Daphne: 414/431 for over-long request lines and headers
    browsers = origin_checked(AuthMiddlewareStack(
        URLRouter([*websocket_urlpatterns, *websocket_routes, *not_found])))

    async def websocket(scope: Any, receive: Any, send: Any) -> None:
        app = relay_app if scope.get("path") == RELAY_PATH else browsers
        await app(scope, receive, send)

    return watchdog.watched(ProtocolTypeRouter({"http": http_app, "websocket": websocket}))
