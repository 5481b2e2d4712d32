"""Channel-layer groups: their names, and the runs list's one message.

Senders (the bridge for a run's events, the services for run summaries) and the websocket
consumers must agree on these names; keeping them here lets each side import the names
without importing the other side. Sending a run summary lives here too, so the services
reach browsers only through this module (and :mod:`picoflow_web.live.relay`, which knows how
to reach them from any process).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from picoflow_web.live import relay
from picoflow_web.live.relay_sender import RawJSON

MESSAGE_BYTES = 256 * 1024
"""About the most characters of events one message to a run page carries (a single larger
event travels alone): websocket servers cap a message's size (Daphne: 1 MiB unless
``--websocket-max-message-size`` says otherwise), and smaller messages let the page draw
while more arrive."""

RUNS_GROUP = "runs"
"""Summaries of runs as they start and finish (the runs list)."""

_READABLE = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""Run ids that make a group name as they are: what Channels takes in a name, short enough
(Channels' names are under 100 characters)."""


def run_group(run_id: str) -> str:
    """The group of one run's live events: ``run.<id>``, or ``run_<sha256 of the id>`` for
    an id Channels would refuse in a name (one stored before ids were checked: a space, a
    non-ASCII letter, a ``/``...), so that no id makes a group call raise. The two forms
    cannot meet: ``run.`` and ``run_`` differ."""
    if _READABLE.fullmatch(run_id):
        return f"run.{run_id}"
    return "run_" + hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()


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
    :mod:`picoflow_web.live.relay_sender`). ``events`` may be their JSON text, as stored: it
    then travels as text to the browser, never parsed on the way."""
    return run_group(run_id), {"type": "run.events", "events": events, "first": first,
                               "upto": upto}
