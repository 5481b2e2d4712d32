"""ASGI entry point: ``daphne picoflow_web.asgi:application``.

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

from picoflow_web.routing import websocket_urlpatterns

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
