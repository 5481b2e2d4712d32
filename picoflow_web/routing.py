"""WebSocket routes, mounted by ``picoflow_web.asgi`` under the ``websocket`` protocol."""

from django.urls import URLPattern, URLResolver, path

from picoflow_web import consumers

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/runs/", consumers.RunsConsumer.as_asgi()),
    path("ws/runs/<str:run_id>/", consumers.RunConsumer.as_asgi()),
    path("ws/relay/", consumers.RelayConsumer.as_asgi()),
]
