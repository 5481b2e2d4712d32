"""WebSocket routes, mounted by ``picoflow_web.asgi`` under the ``websocket`` protocol."""

from django.urls import URLPattern, URLResolver, path

from picoflow_web import consumers

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/runs/", consumers.RunsConsumer.as_asgi()),
    path("ws/runs/<str:run_id>/", consumers.RunConsumer.as_asgi()),
]
"""The browsers' sockets: behind the session/auth middleware and the Origin check."""

RELAY_PATH = "/ws/relay/"
relay_app = consumers.RelayConsumer.as_asgi()
"""The workers' socket: its relay key authenticates it, so neither cookies nor an Origin
apply (a worker reaches the server as ``127.0.0.1`` whatever ``ALLOWED_HOSTS`` says)."""
