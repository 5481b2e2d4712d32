"""WebSocket routes, mounted by ``picoflow_web.asgi`` under the ``websocket`` protocol."""

from django.urls import URLPattern, URLResolver

websocket_urlpatterns: list[URLPattern | URLResolver] = []
