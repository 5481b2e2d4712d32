"""Folding one run's events, in ``seq`` order, into its run model.

Each event family has its module (:mod:`.turn`, :mod:`.state`, :mod:`.barrier`,
:mod:`.join`, :mod:`.branch`, :mod:`.calls`, :mod:`.concurrent`) with a table of handlers
by event ``type``; the fold looks the event's type up in their union and hands it the
event, as a Channels consumer dispatches on a message's type. A family is read on its own,
and a new event type is one entry in one table. A type no family handles changes
nothing but the last applied ``seq``.

What holds for every event is decided here, before any handler: an event at or below the
last applied ``seq`` (a duplicate, or out of order) is ignored; a jump in ``seq`` is
recorded as the events missing; after ``run.interrupted`` an event is only recorded as an
anomaly. Bad input never raises: like the browser's fold, this one records what it cannot
place as an :class:`~.model.Anomaly` and goes on.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import schema as ev
from . import barrier, branch, calls, concurrent, join, state, turn
from .model import Handlers, RunModel, anomaly, new_run


def _union(*tables: Handlers) -> Handlers:
    merged: Handlers = {}
    for table in tables:
        if twice := merged.keys() & table.keys():
            raise ValueError(f"event types handled by two families: {sorted(twice)}")
        merged.update(table)
    return merged


HANDLERS = _union(turn.HANDLERS, state.HANDLERS, barrier.HANDLERS, join.HANDLERS,
                  branch.HANDLERS, calls.HANDLERS, concurrent.HANDLERS)
"""Every family's handler, by event ``type``."""


def fold(events: Iterable[ev.Event], upto: int | None = None, *,
         drafts: bool = True) -> RunModel:
    """Fold one run's events (in ``seq`` order) up to and including ``upto``.

    With ``drafts=False`` the branches' drafts are not kept (nor reduced: one branch's k
    contributions to an append channel keep k growing copies of the list, O(k²) time and
    memory), for a reader that wants the canonical state alone: the dashboard's record of
    a remote session.
    """
    run = new_run(drafts=drafts)
    for event in events:
        if upto is not None and event.seq > upto:
            break
        apply_event(run, event)
    return run


def apply_event(run: RunModel, event: ev.Event) -> bool:
    """Apply one event to ``run``; returns False when it was ignored (``seq`` not after the
    last applied one: a resent or out-of-order event). After ``run.interrupted`` an event is
    only recorded as an anomaly: it takes its ``seq`` but changes nothing else."""
    if event.seq <= run.last_seq:
        return False
    if event.seq != run.last_seq + 1 and run.last_seq >= 0:
        anomaly(run, event, f"events {run.last_seq + 1}..{event.seq - 1} missing")
    if run.interruption is not None:
        anomaly(run, event, f"{event.type} after run.interrupted")
    elif (handler := HANDLERS.get(event.type)) is not None:
        handler(run, event, run.invocations.get(event.path))
    run.last_seq = event.seq
    return True
