"""Channel-layer groups: their names, and the runs list's one message.

Senders (the bridge for a run's events, the services for run summaries) and the websocket
consumers must agree on these names; keeping them here lets each side import the names
without importing the other side. Sending a run summary lives here too, so the services
reach browsers only through this module (and :mod:`picoflow_web.relay`, which knows how
to reach them from any process).
"""

from __future__ import annotations

from typing import Any

from picoflow_web import relay
from picoflow_web.relay_sender import RawJSON

RUNS_GROUP = "runs"
"""Summaries of runs as they start and finish (the runs list)."""


def run_group(run_id: str) -> str:
    """The group of one run's live events."""
    return f"run.{run_id}"


async def runs_send(summary: dict[str, Any]) -> None:
    """Send one run summary to the runs list (consumers' ``run_summary``)."""
    await relay.publish([summary_message(summary)])


def summary_message(summary: dict[str, Any]) -> relay.Message:
    """The runs list's message about one run."""
    return RUNS_GROUP, {"type": "run.summary", "run": summary}


def events_message(run_id: str, events: list[dict[str, Any]] | RawJSON, first: int,
                   upto: int) -> relay.Message:
    """A run page's message with a stored batch of its events, seqs ``first`` to ``upto``
    (what a consumer reads back if the events cannot travel: see
    :mod:`picoflow_web.relay_sender`). ``events`` may be their JSON text, as stored: it
    then travels as text to the browser, never parsed on the way."""
    return run_group(run_id), {"type": "run.events", "events": events, "first": first,
                               "upto": upto}
