"""One schedule as the what-if reports it: operations, waits, idle time, critical path."""

from __future__ import annotations

from typing import Any

from .operations import Plan
from .schedules import HELD, Timing

WAITS_LISTED = 500
"""The longest waits listed (every operation names whom it waited for all the same)."""


def _r(value: float) -> float:
    return round(value, 6)


def schedule(plan: Plan, timing: Timing, total: float | None = None) -> dict[str, Any]:
    """``{total, operations, waits, critical_path}`` (and ``supersteps``) of ``timing``."""
    real = [node for node, kind in enumerate(plan.kind) if kind != "join"]
    if total is None:
        total = max((timing.end[node] for node in real), default=0.0)
    # Rounded once per node, so every interval built from them is rounded already.
    starts = [_r(value) for value in timing.start]
    ends_at = [_r(value) for value in timing.end]
    spans = _spans(plan, starts, ends_at, real)
    ends = _ends(plan, spans)
    joins = _joins(plan, ends)
    operations = [_own_work(plan, timing, node) for node in real if plan.frame[node] == ""]
    for path, frame in plan.frames.items():
        parts = spans.get(path)
        if not path or not parts:
            continue
        first = parts[0][0]
        if timing.name == "recorded":  # from its fork: the recorded wait for a slot is idle
            ready = plan.barriers[str(frame.barrier)].fork
        else:
            ready = min((timing.ready[node] for node in frame.nodes), default=first)
        window = joins[str(frame.barrier)] - min(ready, first)
        busy = sum(end - start for start, end in parts)
        op: dict[str, Any] = {
            "id": path, "path": path, "key": frame.key, "step": frame.step, "kind": "branch",
            "parent": frame.parent or "", "depth": frame.depth,
            "start": first, "end": parts[-1][1],
            "busy": _r(busy), "idle": _r(max(0.0, window - busy)),
            "waited_for": [], "parts": parts,
        }
        if timing.superstep is not None and frame.nodes:
            op["superstep"] = timing.superstep[frame.nodes[0]]
        operations.append(op)
    waits = _node_waits(plan, timing)
    if not (plan.uses_after and timing.name == "local_barriers"):
        # (a graph's supersteps are not joins when each task follows its own predecessors)
        waits += _join_waits(plan, ends)
    waits.sort(key=lambda wait: -wait["wait"])
    by_path = {op["path"]: op for op in operations if op["kind"] == "branch"}
    for wait in waits:
        waiter = by_path.get(wait["path"])
        if waiter is not None:
            waiter["waited_for"] = _merge(waiter["waited_for"], wait["for"])
    for node in real:
        if len(plan.deps[node]) == 1 and plan.kind[plan.deps[node][0]] == "join":
            _after_join(plan, timing, node, by_path)
    out: dict[str, Any] = {"total": _r(total)}
    if timing.superstep is not None:
        out["supersteps"] = timing.supersteps
    operations.sort(key=lambda op: (op["start"], op["depth"], op["path"]))
    out.update(operations=operations, waits=waits[:WAITS_LISTED], waits_count=len(waits),
               critical_path=_critical_path(plan, timing, real))
    return out


def _own_work(plan: Plan, timing: Timing, node: int) -> dict[str, Any]:
    start, end = timing.start[node], timing.end[node]
    op: dict[str, Any] = {
        "id": f"#{node}", "path": "", "key": "", "step": "", "kind": plan.kind[node],
        "parent": "", "depth": 0, "start": _r(start), "end": _r(end),
        "busy": _r(end - start), "idle": 0.0, "waited_for": [],
        "parts": [(_r(start), _r(end))],
    }
    if timing.superstep is not None:
        op["superstep"] = timing.superstep[node]
    return op


def _spans(plan: Plan, starts: list[float], ends: list[float], real: list[int]
           ) -> dict[str, list[tuple[float, float]]]:
    """Each branch's running intervals (its descendants' included), merged, in order."""
    raw: dict[str, list[tuple[float, float]]] = {}
    for node in real:
        path: str | None = plan.frame[node]
        part = (starts[node], ends[node])
        while path:
            raw.setdefault(path, []).append(part)
            frame = plan.frames.get(path)
            path = frame.parent if frame is not None else None
    return {path: _merged(parts) for path, parts in raw.items()}


def _merged(parts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(parts) > 1:
        parts.sort()
    out = [parts[0]]
    for start, end in parts[1:]:
        if start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _ends(plan: Plan, spans: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """When each branch's last node (its descendants' included) ends in this schedule."""
    return {path: parts[-1][1] for path, parts in spans.items()}


def _joins(plan: Plan, ends: dict[str, float]) -> dict[str, float]:
    """When each barrier's last branch ends in this schedule."""
    return {barrier.id: max((ends[path] for path in barrier.branches if path in ends),
                            default=0.0) for barrier in plan.barriers.values()}


def _node_waits(plan: Plan, timing: Timing) -> list[dict[str, Any]]:
    out = []
    for node, held in timing.held_by.items():
        wait = timing.start[node] - timing.ready[node]
        if wait < plan.glue:
            continue
        frame = plan.frames[plan.frame[node]]
        paths = _merge([], [plan.frame[other] for other in held])
        out.append({"path": frame.path, "key": frame.key, "wait": _r(wait), "for": paths,
                    "for_keys": [plan.frames[p].key for p in paths],
                    "at": timing.why[node],
                    "superstep": timing.superstep[node] if timing.superstep else None,
                    "barrier": frame.barrier})
    return out


def _join_waits(plan: Plan, ends: dict[str, float]) -> list[dict[str, Any]]:
    """A branch done before its barrier's join waits there for the siblings still running."""
    out = []
    for barrier in plan.barriers.values():
        done = {path: ends[path] for path in barrier.branches if path in ends}
        if len(done) < 2:
            continue
        order = sorted(done, key=lambda path: -done[path])
        join = done[order[0]]
        for path, end in done.items():
            if join - end < plan.glue:
                continue
            later = [other for other in order[:HELD] if done[other] > end]
            out.append({"path": path, "key": plan.frames[path].key, "wait": _r(join - end),
                        "for": later, "for_keys": [plan.frames[p].key for p in later],
                        "at": "join", "superstep": None, "barrier": barrier.id})
    return out


def _after_join(plan: Plan, timing: Timing, node: int, by_path: dict[str, dict[str, Any]]
                ) -> None:
    """The first node after a join waited for the branches that ended after the first."""
    frame = plan.frames[plan.frame[node]]
    if frame.nodes[:1] != [node] and plan.frame[node] != "":
        return
    join = plan.deps[node][0]
    ends = [(timing.end[dep], dep) for dep in _real_deps(plan, join)]
    if len(ends) < 2:
        return
    first = min(ends)[0]
    late = sorted((item for item in ends if item[0] - first >= plan.glue), reverse=True)
    op = by_path.get(frame.path)
    if op is not None:
        op["waited_for"] = _merge(op["waited_for"], [plan.frame[dep] for _, dep in late][:HELD])


def _real_deps(plan: Plan, node: int) -> list[int]:
    out, stack = [], list(plan.deps[node])
    while stack:
        dep = stack.pop()
        if plan.kind[dep] == "join":
            stack.extend(plan.deps[dep])
        else:
            out.append(dep)
    return out


def _critical_path(plan: Plan, timing: Timing, real: list[int]) -> list[str]:
    if not real:
        return []
    # Of operations ending together, the one its own dependencies started tells the story.
    node = max(real, key=lambda n: (_r(timing.end[n]), timing.why[n] == "", -n))
    chain: list[str] = []
    seen = set()
    while node >= 0 and node not in seen:
        seen.add(node)
        if plan.kind[node] != "join" and plan.frame[node] and (
                not chain or chain[-1] != plan.frame[node]):
            chain.append(plan.frame[node])
        node = timing.cause[node]
    chain.reverse()
    return chain


def _merge(into: list[str], more: list[str]) -> list[str]:
    if not into:
        return list(dict.fromkeys(more))
    return into + [path for path in more if path not in into]
