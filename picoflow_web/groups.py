"""Channel-layer group names: what senders publish to and consumers subscribe to.

Senders (the bridge for a run's events, the services for run summaries) and the websocket
consumers must agree on these names; keeping them here lets each side import the names
without importing the other side.
"""

from __future__ import annotations

RUNS_GROUP = "runs"
"""Summaries of runs as they start and finish (the runs list)."""


def run_group(run_id: str) -> str:
    """The group of one run's live events."""
    return f"run.{run_id}"
