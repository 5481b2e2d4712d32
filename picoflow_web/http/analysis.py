"""Analyses of stored runs: a run's what-if schedules, and two runs side by side.

``GET /api/runs/<id>/whatif`` (``?max_concurrency=N``: the graph-wide limit of the
supersteps schedule) answers :func:`runtime.whatif.what_if`'s report of the run's stored
events; ``GET /api/runs/<a>/compare/<b>`` answers :func:`runtime.whatif.compare_runs` of
two runs' events. Both read what is stored (nothing re-runs), under the same access
rules as the other run endpoints: a run the reader may not see is not found. The
computation runs in a worker thread, off the event loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse

from picoflow_web.data import selectors
from picoflow_web.errors import InputError, NotFound
from picoflow_web.http import bodies
from picoflow_web.http.api import api_view
from picoflow_web.http.bodies import answer
from runtime.whatif import READ, compare_runs, what_if

MAX_CONCURRENCY = 2**31
"""The largest ``max_concurrency`` taken (more is as good as none)."""

_READ_PAGE = 50_000
"""Events read per query: a run of any size, in few round trips."""

_DIGITS = re.compile(r"[0-9]+")


def max_concurrency_param(raw: str | None) -> int | None:
    """``?max_concurrency=``: absent, or a positive integer in plain digits (400
    ``bad_parameter`` otherwise, an empty one included)."""
    if raw is None:
        return None
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= MAX_CONCURRENCY:
        raise InputError(f"max_concurrency must be an integer from 1 to {MAX_CONCURRENCY}.",
                         error_code="bad_parameter")
    return int(raw)


async def _readable_run(request: HttpRequest, run_id: str) -> Any:
    readable = request.access.readable()  # type: ignore[attr-defined]
    run = await selectors.run_get(run_id, projects=readable)
    if run is None:
        raise NotFound(f"No run {run_id!r}.")
    return run


async def _events_of(run_id: str, types: Collection[str] | None = None
                     ) -> list[dict[str, Any]]:
    """The run's stored events (of ``types`` only, when given), in order, as parsed JSON
    (validated when stored)."""
    events: list[dict[str, Any]] = []
    after = -1
    while True:
        rows = await selectors.run_event_texts_after(run_id, after, _READ_PAGE, types=types)
        events.extend(json.loads(text) for _, text in rows)
        if len(rows) < _READ_PAGE:
            return events
        after = rows[-1][0]


def _named(report: dict[str, Any], run: Any) -> dict[str, Any]:
    """``report`` with the run's id and flow from its row where its events named none yet
    (a run still queued)."""
    report["run"] = report["run"] or run.id
    report["flow"] = report["flow"] or run.flow
    return report


def _what_if(run: Any, events: list[dict[str, Any]], limit: int | None) -> HttpResponse:
    report = _named(what_if(events, max_concurrency=limit).as_dict(), run)
    return answer(_checked_what_if(report))


def _checked_what_if(report: dict[str, Any]) -> bodies.WhatIf:
    """The answer's model, checked on a sample: the envelope and each schedule with its
    first operation and wait validate in full (a lost field still fails here, on the
    server), and the rest, built by the same code, is taken as it is. Validating every one
    of a 10,000-branch run's 30,000 operations would cost most of what computing them
    does."""
    sample = {**report, "schedules": {
        name: _sampled(schedule) for name, schedule in report["schedules"].items()}}
    bodies.WhatIf.model_validate(sample)
    built = report["schedules"]
    schedules = bodies.WhatIfSchedules.model_construct(
        recorded=bodies.WhatIfSchedule.model_construct(**built["recorded"]),
        supersteps=bodies.WhatIfSchedule.model_construct(**built["supersteps"]),
        local_barriers=bodies.WhatIfSchedule.model_construct(**built["local_barriers"]))
    return bodies.WhatIf.model_construct(**{**report, "schedules": schedules})


def _sampled(schedule: dict[str, Any]) -> dict[str, Any]:
    return {**schedule, "operations": schedule["operations"][:1],
            "waits": schedule["waits"][:1]}


def _checked_comparison(result: dict[str, Any]) -> bodies.Comparison:
    """The answer's model, checked on a sample as :func:`_checked_what_if` is: every field
    of the envelope, the first branch of each kind of match, and each timing's first
    operation and wait."""
    firsts: dict[str, dict[str, Any]] = {}
    for branch in result["branches"]:
        firsts.setdefault(branch["match"], branch)
    timing = result["timing"]
    bodies.Comparison.model_validate({
        **result, "branches": list(firsts.values()),
        "timing": {"a": _sampled(timing["a"]), "b": _sampled(timing["b"])}})
    return bodies.Comparison.model_construct(**{
        **result,
        "a": bodies.ComparedRun.model_construct(**result["a"]),
        "b": bodies.ComparedRun.model_construct(**result["b"]),
        "difference": bodies.ComparedDifference.model_construct(**result["difference"]),
        "branches": [_branch(branch) for branch in result["branches"]],
        "timing": bodies.ComparedTiming.model_construct(
            a=bodies.WhatIfSchedule.model_construct(**timing["a"]),
            b=bodies.WhatIfSchedule.model_construct(**timing["b"]))})


def _branch(branch: dict[str, Any]) -> bodies.ComparedBranch:
    sides = {side: None if branch[side] is None else
             bodies.ComparedBranchSide.model_construct(**branch[side]) for side in ("a", "b")}
    return bodies.ComparedBranch.model_construct(**{**branch, **sides})


def _compare(first: Any, events_a: list[dict[str, Any]], second: Any,
             events_b: list[dict[str, Any]]) -> HttpResponse:
    result = compare_runs(events_a, events_b)
    a, b = _named(result["a"], first), _named(result["b"], second)
    result["same_flow"] = a["flow"] == b["flow"]
    return answer(_checked_comparison(result))


@api_view("GET")
async def run_whatif(request: HttpRequest, run_id: str) -> HttpResponse:
    """``GET /api/runs/<id>/whatif``: the run recorded, under graph-wide supersteps and
    under local barriers, on one time axis (seconds from the turn's start)."""
    limit = max_concurrency_param(request.GET.get("max_concurrency"))
    run = await _readable_run(request, run_id)
    events = await _events_of(run.id, READ)
    return await sync_to_async(_what_if, thread_sensitive=False)(run, events, limit)


@api_view("GET")
async def run_compare(request: HttpRequest, run_id: str, other_id: str) -> HttpResponse:
    """``GET /api/runs/<a>/compare/<b>``: run A and run B side by side, their branches
    matched by invocation path and branch key; differences are B - A."""
    first = await _readable_run(request, run_id)
    second = await _readable_run(request, other_id)
    events_a, events_b = await _events_of(first.id), await _events_of(second.id)
    return await sync_to_async(_compare, thread_sensitive=False)(first, events_a, second,
                                                                 events_b)


__all__ = ["MAX_CONCURRENCY", "max_concurrency_param", "run_compare", "run_whatif"]
