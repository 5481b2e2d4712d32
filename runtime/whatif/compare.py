"""Two runs side by side: their branches matched by invocation path and branch key.

Built from each run's events alone, through the fold (:mod:`runtime.events.fold`): each
run's status, duration and tokens, and per branch its status, duration, tokens, output and
what it published, with what changed between the two; each run's recorded timing comes
from :func:`runtime.whatif.what_if`. ``GET /api/runs/<a>/compare/<b>`` answers the same.

A branch's tokens are those of its own model calls and of its descendants' (a coordinator
costs what its children cost); its ``published`` are the fields of its own writes that its
join (and the joins above it) kept, with the value it wrote. Two runs of different flows
are compared all the same: ``same_flow`` says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime.events import Event, parse_event
from runtime.events.fold import Applied, Barrier, Invocation, RunModel, fold, publication_of

from .operations import read
from .report import schedule
from .schedules import recorded

CHANGES = ("status", "duration", "tokens", "output", "published")
"""What a matched branch's ``changed`` may list, in this order."""

DURATION_TOLERANCE = (0.1, 0.001)
"""A branch's duration counts as changed when the two differ by more than this share of the
longer one *and* by more than this many seconds: two runs of the same work never take
exactly as long, and scheduling jitter is not a change."""


def compare_runs(events_a: Iterable[Event | dict[str, Any]],
                 events_b: Iterable[Event | dict[str, Any]]) -> dict[str, Any]:
    """Run A and run B (each one run's events, in ``seq`` order) side by side; differences
    are B - A. The JSON of ``GET /api/runs/<a>/compare/<b>``."""
    a, b = _Side(_events(events_a)), _Side(_events(events_b))
    a_branches, b_branches = a.branches(), b.branches()
    rows = [_row(path, key, entry_a, b_branches.get((path, key)))
            for (path, key), entry_a in a_branches.items()]
    rows.extend(_row(path, key, None, entry_b) for (path, key), entry_b in b_branches.items()
                if (path, key) not in a_branches)
    return {
        "unit": "s",
        "a": a.summary(),
        "b": b.summary(),
        "same_flow": a.run.flow == b.run.flow,
        "difference": {"duration": _minus(b.duration(), a.duration()),
                       "tokens": b.tokens() - a.tokens()},
        "branches": rows,
        "added": [row["path"] for row in rows if row["match"] == "only_b"],
        "missing": [row["path"] for row in rows if row["match"] == "only_a"],
        "timing": {"a": a.timing(), "b": b.timing()},
    }


def _events(events: Iterable[Event | dict[str, Any]]) -> list[Event]:
    return [e if not isinstance(e, dict) else parse_event(e) for e in events]


class _Side:
    """One run of the comparison: its events and their fold."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.run: RunModel = fold(events)
        self.started: Event | None = next(
            (e for e in events if e.type == "turn.started"), None)

    def summary(self) -> dict[str, Any]:
        started = self.started
        return {"run": self.run.run_id or (self.events[0].run_id if self.events else ""),
                "flow": self.run.flow, "status": self.run.status,
                "duration": self.duration(), "tokens": self.tokens(),
                "started_at": started.time if started is not None else None,
                "message": getattr(started, "message", None)}

    def duration(self) -> float | None:
        """Seconds from the turn's start to its last event (a ``run.interrupted``, declared
        after the silence, does not stretch it); None before the turn started."""
        if self.started is None:
            return None
        offsets = [e.offset for e in self.events if e.type != "run.interrupted"]
        return _round(max(offsets) - self.started.offset)

    def tokens(self) -> int:
        """Tokens the turn's model calls used (the session's earlier turns not counted)."""
        return sum(e.total_tokens for e in self.events if e.type == "model.finished")

    def timing(self) -> dict[str, Any]:
        """The run's recorded schedule, as :func:`runtime.whatif.what_if` reports it."""
        plan = read(self.events)
        return schedule(plan, recorded(plan), plan.total)

    def branches(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every branch, by (path, key), in request-path order."""
        own = _own_tokens(self.run)
        total: dict[str, int] = {}
        for path, tokens in own.items():
            for ancestor in _ancestors(path):
                total[ancestor] = total.get(ancestor, 0) + tokens
        invocations = sorted((inv for path, inv in self.run.invocations.items() if path),
                             key=lambda inv: _path_order(inv.path))
        written = _Written()
        return {(inv.path, inv.key): {"step": inv.step, **self._branch(inv, total, written)}
                for inv in invocations}

    def _branch(self, inv: Invocation, tokens: dict[str, int],
                written: _Written) -> dict[str, Any]:
        duration = (None if inv.started is None or inv.finished is None
                    else _round(inv.finished - inv.started))
        return {"status": inv.status, "duration": duration,
                "tokens": tokens.get(inv.path, 0), "output": inv.output,
                "published": _published(self.run, inv, written)}


def _own_tokens(run: RunModel) -> dict[str, int]:
    return {path: inv.tokens for path, inv in run.invocations.items() if inv.tokens}


def _ancestors(path: str) -> list[str]:
    """``path`` and every invocation above it, up to (not including) the turn."""
    parts = path.split(".") if path else []
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


_FOREIGN = 2**62


def _path_order(path: str) -> tuple[tuple[int, int, str], ...]:
    """Request-path order: per level, the caller's barrier ordinal, then the request index
    (``1:0`` is barrier 1, request 0). A level that is no such pair (a foreign run's path)
    sorts after them, by its text."""
    levels = []
    for level in path.split("."):
        ordinal, _, index = level.rpartition(":")
        try:
            levels.append((int(ordinal or 0), int(index), ""))
        except ValueError:
            levels.append((_FOREIGN, 0, level))
    return tuple(levels)


def _published(run: RunModel, inv: Invocation, written: _Written) -> list[dict[str, Any]]:
    """The fields of ``inv``'s own writes its joins kept (its descendants' are theirs), each
    with the value it wrote (a removal's is None)."""
    found = publication_of(run, inv.path)
    if found is None or found.state not in ("published", "scoped"):
        return []
    records = _records_above(run, inv)
    if found.state == "published":  # the fields are those of the record that reached canonical
        records.reverse()
    out = []
    for item in found.fields:
        if item.origin != inv.path:
            continue
        value = next((v for record in records if (v := written.of(record, item)) is not _NONE),
                     None)
        out.append({"step": item.step, "field": item.field, "kind": item.kind, "value": value})
    return out


_NONE = object()


def _records_above(run: RunModel, inv: Invocation) -> list[Barrier]:
    """The join records of ``inv``'s barrier and of every barrier above it, innermost first."""
    records: list[Barrier] = []
    current: Invocation | None = inv
    while current is not None and current.barrier is not None:
        barrier = run.barriers.get(current.barrier)
        if barrier is None:
            break
        records.append(barrier)
        current = run.invocations.get(barrier.caller) if barrier.caller else None
    return records


class _Written:
    """What each writer wrote, as each join record lists it: indexed once per record, since
    a wide barrier's record lists thousands of writers."""

    def __init__(self) -> None:
        self._index: dict[str, dict[tuple[bool, str, str, str], list[Any]]] = {}

    def of(self, record: Barrier, item: Applied) -> Any:
        """What ``item``'s writer wrote to its field as ``record`` lists it (several
        contributions: their list), or ``_NONE`` when the record does not list it."""
        index = self._index.get(record.id)
        if index is None:
            index = self._index[record.id] = _index(record)
        values = index.get((item.kind == "contribution", item.step, item.field, item.origin))
        if not values:
            return _NONE
        return values[0] if len(values) == 1 else values


def _index(record: Barrier) -> dict[tuple[bool, str, str, str], list[Any]]:
    index: dict[tuple[bool, str, str, str], list[Any]] = {}
    for entry in record.published:
        if entry.get("writer"):
            index.setdefault((False, entry["step"], entry["field"], str(entry["writer"])), [
                None if entry.get("deleted") else entry.get("value")])
    for reduction in record.reductions:
        for input_ in reduction.get("inputs") or []:
            path = input_.get("path") if isinstance(input_, dict) else None
            if isinstance(path, str):
                index.setdefault((True, reduction["step"], reduction["field"], path),
                                 []).append(input_.get("value"))
    return index


def _row(path: str, key: str, a: dict[str, Any] | None,
         b: dict[str, Any] | None) -> dict[str, Any]:
    either = a if a is not None else b
    assert either is not None
    match = "both" if a is not None and b is not None else "only_a" if a is not None \
        else "only_b"
    return {"path": path, "key": key, "step": either["step"], "match": match,
            "a": _side_of(a), "b": _side_of(b),
            "changed": _changed(a, b) if a is not None and b is not None else []}


def _side_of(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if entry is None else {k: v for k, v in entry.items() if k != "step"}


def _changed(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    changed = []
    for name in CHANGES:
        if name == "duration":
            if _durations_differ(a["duration"], b["duration"]):
                changed.append(name)
        elif a[name] != b[name]:
            changed.append(name)
    return changed


def _durations_differ(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is not b
    share, seconds = DURATION_TOLERANCE
    gap = abs(b - a)
    return gap > seconds and gap > share * max(abs(a), abs(b))


def _minus(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None else _round(b - a)


def _round(seconds: float) -> float:
    return round(seconds, 6)


__all__ = ["CHANGES", "DURATION_TOLERANCE", "compare_runs"]
