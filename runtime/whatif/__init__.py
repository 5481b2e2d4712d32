"""What a recorded run would have cost under another scheduling model, from its events.

:func:`what_if` reads one run's events (no re-execution) and places the same work three
ways: ``recorded`` (as it ran), ``supersteps`` (a flat graph under LangGraph's graph-wide
supersteps) and ``local_barriers`` (parent-owned barriers, each coordinator continuing as
soon as its own join completes)::

    from runtime.whatif import what_if
    report = what_if(events).as_dict()
    report["schedules"]["supersteps"]["total"]

Each schedule gives its total, every operation's start and end, every wait and whom it
waited for, each branch's idle time and the critical path. :func:`compare_runs` sets two
runs of one flow side by side.

================  =========================================================================
``operations``    events → frames, barriers and nodes with durations and dependencies
``schedules``     the three schedulers
``report``        a schedule as JSON: operations, waits, idle time, critical path
``text``          the report in sentences (``summary``)
``compare``       two runs, branch by branch
================  =========================================================================
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from . import schedules
from .operations import READ, Plan, read
from .report import schedule
from .text import summary

__all__ = ["READ", "WhatIf", "compare_runs", "what_if"]


@dataclass
class WhatIf:
    """The three schedules of one run."""

    plan: Plan
    max_concurrency: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The answer of ``GET /api/runs/<id>/whatif``."""
        plan = self.plan
        with _no_collection():
            return self._as_dict(plan)

    def _as_dict(self, plan: Plan) -> dict[str, Any]:
        report = {
            "unit": "s", "run": plan.run, "flow": plan.flow, "complete": plan.complete,
            "inferred": inferred(plan),
            "schedules": {
                "recorded": schedule(plan, schedules.recorded(plan), plan.total),
                "supersteps": schedule(plan, schedules.supersteps(plan, self.max_concurrency)),
                "local_barriers": schedule(plan, schedules.local_barriers(plan)),
            },
        }
        report["summary"] = summary(report)
        return report


def what_if(events: Iterable[Any], *, max_concurrency: int | None = None) -> WhatIf:
    """The what-if of one run's turn: ``events`` are its events in order (models or the
    dicts their JSON parses to; only those of the types in :data:`READ` matter).
    ``max_concurrency`` is the graph-wide limit of the ``supersteps`` schedule (LangGraph's
    config value of that name)."""
    with _no_collection():
        return WhatIf(read(events), max_concurrency)


@contextmanager
def _no_collection() -> Iterator[None]:
    """Hold the cyclic collector off: a large run's schedules are hundreds of thousands
    of small acyclic objects, each allocation burst of which would trigger a full
    collection that finds no garbage."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def inferred(plan: Plan) -> list[str]:
    """What the schedules assume that the events do not say."""
    notes = [
        "Each model or tool call is one operation (a node of the flat graph); a branch's "
        "own work before a call counts with that call, and a caller's own work before a "
        "fork delays its branches' first operations as much. Durations are as recorded in "
        "every schedule.",
    ]
    if plan.dropped > 0:
        notes.append(f"Own work after a join shorter than {plan.glue * 1000:.0f} ms is "
                     f"coordination, left out of the supersteps and local-barriers schedules "
                     f"({plan.dropped * 1000:.1f} ms in all).")
    if plan.flow.startswith("LangGraph"):
        notes.append(
            "Recorded from LangGraph: each superstep is a barrier, each task a branch. "
            + ("Which task each task waited for comes from the graph's edges."
               if plan.uses_after else
               "The graph's edges were not recorded (traced without the graph), so each "
               "task is taken to wait for every task of the superstep before it: local "
               "barriers cannot do better than supersteps here."))
    if plan.flow.startswith("OpenTelemetry"):
        notes.append("Recorded from OpenTelemetry spans: child spans that overlapped in time "
                     "are taken as one barrier's branches, the others as a sequence.")
    if not plan.complete:
        notes.append("The turn is still running (or its end was not recorded): what is "
                     "still running ends at the last recorded event.")
    return notes


def compare_runs(events_a: Iterable[Any], events_b: Iterable[Any]) -> dict[str, Any]:
    """Two runs side by side: see :mod:`runtime.whatif.compare`."""
    from .compare import compare_runs as compare

    with _no_collection():
        return compare(events_a, events_b)
