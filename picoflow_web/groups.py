"""Channel-layer groups: their names, and the runs list's one message.

Senders (the bridge for a run's events, the services for run summaries) and the websocket
consumers must agree on these names; keeping them here lets each side import the names
without importing the other side. Sending a run summary lives here too, so the services
reach Channels only through this module and the bridge stays the one module that touches
both the runtime and Channels.
"""

from __future__ import annotations

from typing import Any

from channels.layers import get_channel_layer

RUNS_GROUP = "runs"
"""Summaries of runs as they start and finish (the runs list)."""


def run_group(run_id: str) -> str:
    """The group of one run's live events."""
    return f"run.{run_id}"


async def runs_send(summary: dict[str, Any]) -> None:
    """Send one run summary to the runs list (consumers' ``run_summary``)."""
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(RUNS_GROUP, {"type": "run.summary", "run": summary})
