"""ASGI entry point: ``daphne picoflow_web.asgi:application``.

The flow engine is built here, so Daphne refuses to start on a bad ``PICOFLOW_FLOWS``.
HTTP goes to Django; WebSocket connections go through the channels router in
``picoflow_web.routing``, behind the session/auth middleware and an Origin check
against ``ALLOWED_HOSTS``.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picoflow_web.settings")

# Set up Django (apps, settings) before anything that imports models.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator

from picoflow_web import relay, watchdog
from picoflow_web.engine import get_engine
from picoflow_web.routing import websocket_urlpatterns

# Build the flow engine now: a bad PICOFLOW_FLOWS stops Daphne at start-up, with a message
# naming the entry and the reason (picoflow_web.flows.FlowsConfigError).
get_engine()
relay.SERVES_WEBSOCKETS = True  # browsers listen on this process's channel layer

application = watchdog.watched(ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
))
