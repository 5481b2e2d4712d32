"""Event lists as the fold takes them: one run's events at a time."""

from __future__ import annotations

from collections.abc import Sequence

from .. import schema as ev


def runs_of(events: Sequence[ev.Event]) -> dict[str, list[ev.Event]]:
    """Group a mixed event list by run id, keeping order."""
    grouped: dict[str, list[ev.Event]] = {}
    for event in events:
        grouped.setdefault(event.run_id, []).append(event)
    return grouped
