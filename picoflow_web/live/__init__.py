"""Live updates: channel-layer groups, the relay, websocket consumers, the ASGI stack."""
