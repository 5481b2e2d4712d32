"""A run's events as operations with durations and dependencies: the what-if's input.

Every invocation (the top level, each branch) is a *frame*: a sequence of model calls,
tool calls and barriers, in the order it made them. Each call is one *node* with the
duration it took, counted from the end of the frame's previous item (the frame's own work
before a call is part of it, as a flat graph's node runs its code and then its model); a
frame with no call and no barrier is one node. A frame's own work before a fork is the
*lead* of each branch's first nodes (they start that long after what they depend on), so
how long a caller took to fork never becomes an operation of its own. A node depends on
the item before it in its frame; a frame's first item on what its caller had done before
the fork; the item after a barrier on every branch of it (through a *join* node that takes
no time). A request the recorder tagged with ``after`` (LangGraph's edges) depends on
those requests of the caller's previous barrier instead.

A frame's own work after its last join (saving state, returning) is a node when it lasts
:attr:`Plan.glue` or more, else coordination, left out of the computed schedules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GLUE_FLOOR = 0.002
"""Seconds: own work between barriers shorter than this is never scheduled as work."""

GLUE_SHARE = 0.01
"""…nor shorter than this share of the turn."""


@dataclass
class Call:
    """One model call (its attempts together) or tool call of a frame."""

    kind: str
    start: float
    end: float | None = None


@dataclass
class Frame:
    """The top level (path ``""``) or one branch."""

    path: str
    key: str = ""
    step: str = ""
    parent: str | None = None
    barrier: str | None = None
    depth: int = 0
    start: float | None = None
    end: float | None = None
    items: list[Call | str] = field(default_factory=list)
    """Calls, and ids of the barriers it opened, in order."""
    nodes: list[int] = field(default_factory=list)
    """Its own nodes (not its branches')."""


@dataclass
class Barrier:
    id: str
    caller: str
    fork: float
    branches: list[str]
    keys: list[str]
    limit: int | None
    after: dict[str, list[str]] | None
    """Per branch path, the keys of the previous barrier's branches it waits for."""
    join: float | None = None


@dataclass
class Plan:
    """Frames, barriers and the nodes the schedules place."""

    run: str = ""
    flow: str = ""
    complete: bool = False
    total: float = 0.0
    """Recorded: from the turn's start to its end (or to the last event, while it runs)."""
    glue: float = GLUE_FLOOR
    frames: dict[str, Frame] = field(default_factory=dict)
    barriers: dict[str, Barrier] = field(default_factory=dict)
    # nodes, as parallel lists (a 10,000-branch run has tens of thousands)
    frame: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    """model, tool, work, or join (takes no time, never scheduled on its own)."""
    duration: list[float] = field(default_factory=list)
    lead: list[float] = field(default_factory=list)
    """Its callers' own work just before the fork it starts after: it can start that long
    after its dependencies end (a queued branch has done it while it waited)."""
    rec_start: list[float] = field(default_factory=list)
    rec_end: list[float] = field(default_factory=list)
    deps: list[list[int]] = field(default_factory=list)
    join_of: dict[int, str] = field(default_factory=dict)
    """Join node → its barrier."""
    dropped: float = 0.0
    """Seconds of coordination left out of the computed schedules."""
    uses_after: bool = False

    def add(self, frame: str, kind: str, start: float, end: float, deps: list[int]) -> int:
        self.frame.append(frame)
        self.kind.append(kind)
        self.duration.append(max(0.0, end - start))
        self.lead.append(0.0)
        self.rec_start.append(start)
        self.rec_end.append(end)
        self.deps.append(deps)
        return len(self.kind) - 1


def _fields(event: Any) -> Mapping[str, Any]:
    return event if isinstance(event, Mapping) else event.__dict__


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


_ENDS = frozenset({"turn.finished", "turn.failed", "turn.cancelled", "run.interrupted"})

READ = frozenset({
    "turn.started", *_ENDS, "barrier.forked", "barrier.requested", "branch.started",
    "branch.fulfilled", "branch.rejected", "join.published", "join.invalidated",
    "model.started", "model.finished", "model.failed", "tool.started", "tool.finished"})
"""The event types :func:`read` looks at: a store may hand it only these (a fan-out's
state and reduction events are most of its bytes)."""


def read(events: Iterable[Any]) -> Plan:
    """The frames and barriers of one run's turn, its times from the turn's start."""
    plan = Plan()
    root = Frame(path="", start=0.0)
    plan.frames[""] = root
    t0: float | None = None
    last = 0.0
    models: dict[tuple[str, int], Call] = {}
    tools: dict[tuple[str, str], Call] = {}
    for event in events:
        e = _fields(event)
        kind = e["type"]
        if t0 is None:
            t0 = float(e["offset"]) if kind == "turn.started" else None
            if t0 is None:
                continue
            plan.run, plan.flow = str(e["run_id"]), str(e.get("flow") or "")
        at = float(e["offset"]) - t0
        last = max(last, at)
        path = e.get("path", "")
        if kind == "barrier.forked":
            _forked(plan, e, at)
        elif kind == "barrier.requested":
            barrier = plan.barriers.get(e["barrier"])
            caller = plan.frames.get(path)
            if barrier is not None and caller is not None:
                _requested(plan, barrier, caller, e.get("requests") or [])
        elif kind == "branch.started":
            frame = plan.frames.get(path)
            if frame is not None:
                frame.start = at
        elif kind in ("branch.fulfilled", "branch.rejected"):
            frame = plan.frames.get(path)
            if frame is not None and frame.start is not None:
                frame.end = at
        elif kind in ("join.published", "join.invalidated"):
            barrier = plan.barriers.get(e["barrier"])
            if barrier is not None:
                barrier.join = at
        elif kind == "model.started":
            _open(plan, models, (path, e["call"]), "model", at)
        elif kind in ("model.finished", "model.failed"):
            _close(models.get((path, e["call"])), at)
        elif kind == "tool.started":
            _open(plan, tools, (path, e["call_id"]), "tool", at)
        elif kind == "tool.finished":
            _close(tools.get((path, e["call_id"])), at)
        elif kind in _ENDS:
            plan.complete = True
            root.end = at
    if t0 is None:  # no turn yet: nothing to schedule
        return plan
    plan.total = root.end if root.end is not None else last
    root.end = plan.total
    plan.glue = max(GLUE_FLOOR, GLUE_SHARE * plan.total)
    _build(plan, root, [], plan.total)
    return plan


def _forked(plan: Plan, e: Mapping[str, Any], at: float) -> None:
    caller = plan.frames.get(e.get("path", ""))
    if caller is None:
        return
    barrier = plan.barriers[e["barrier"]] = Barrier(
        e["barrier"], caller.path, at, [], [], e.get("max_concurrency"), None)
    _requested(plan, barrier, caller, e.get("requests") or [])
    caller.items.append(e["barrier"])


def _requested(plan: Plan, barrier: Barrier, caller: Frame, requests: list[Any]) -> None:
    """Add a page of ``barrier``'s requests (its fork's, or a ``barrier.requested``'s)."""
    after: dict[str, list[str]] = {}
    for request in requests:
        path, key = str(_get(request, "path")), str(_get(request, "key"))
        barrier.branches.append(path)
        barrier.keys.append(key)
        tagged = _get(request, "after")
        if tagged is not None:
            after[path] = [str(k) for k in tagged]
        plan.frames[path] = Frame(path=path, key=key, step=str(_get(request, "step")),
                                  parent=caller.path, barrier=barrier.id,
                                  depth=caller.depth + 1)
    if after:
        plan.uses_after = True
        barrier.after = {**(barrier.after or {}), **after}


def _open(plan: Plan, calls: dict[Any, Call], key: Any, kind: str, at: float) -> None:
    if key in calls:  # another attempt of the same call
        return
    frame = plan.frames.get(key[0])
    if frame is not None:
        calls[key] = call = Call(kind, at)
        frame.items.append(call)


def _close(call: Call | None, at: float) -> None:
    if call is not None:
        call.end = at


def _build(plan: Plan, frame: Frame, entry: list[int], now: float,
           lead: float = 0.0) -> list[int]:
    """Add ``frame``'s nodes (its branches' too) after ``entry``; return its exits.

    ``lead`` is its callers' own work just before its fork, which it carries into its
    first nodes."""
    if frame.start is None:  # a branch that never started (refused, or cancelled queued)
        return entry
    end = frame.end if frame.end is not None else now
    prev, since, last_call = entry, frame.start, None
    previous: dict[str, list[int]] = {}  # the previous barrier's exits, by branch key
    for item in frame.items:
        if isinstance(item, Call):
            since = min(since, item.start)
            stop = item.end if item.end is not None else now
            last_call = plan.add(frame.path, item.kind, since, stop, prev)
            plan.lead[last_call] = lead
            frame.nodes.append(last_call)
            prev, since, lead = [last_call], max(since, stop), 0.0
            continue
        barrier = plan.barriers[item]
        lead += max(0.0, barrier.fork - since)  # the caller's work before its fork
        last_call = None
        exits: list[int] = []
        by_key: dict[str, list[int]] = {}
        for path, key in zip(barrier.branches, barrier.keys, strict=True):
            wanted = (barrier.after or {}).get(path)
            start = prev if wanted is None else _after(previous, wanted, prev)
            out = _build(plan, plan.frames[path], start, now, lead)
            by_key[key] = out
            exits.extend(out)
        previous, lead = by_key, 0.0
        join_end = barrier.join if barrier.join is not None else now
        # Requests tagged ``after`` skip the join before them, so what ran before it is
        # joined here: a later join or the turn's end still waits for all of it.
        prev = _join(plan, frame, barrier, exits + (prev if barrier.after else []), join_end)
        since = max(since, join_end)
    if last_call is not None:  # the frame ended with a call: its tail is that call's
        tail = max(0.0, end - plan.rec_end[last_call])
        plan.rec_end[last_call] += tail
        plan.duration[last_call] += tail
        return prev
    if not frame.items:
        node = plan.add(frame.path, "work", frame.start, end, prev)
        plan.lead[node] = lead
        frame.nodes.append(node)
        return [node]
    return _work(plan, frame, since, end, prev)


def _work(plan: Plan, frame: Frame, start: float, end: float, prev: list[int]) -> list[int]:
    """The frame's own work after its last join: a node, or dropped as coordination."""
    if end - start < plan.glue:
        plan.dropped += max(0.0, end - start)
        return prev
    node = plan.add(frame.path, "work", start, end, prev)
    frame.nodes.append(node)
    return [node]


def _after(previous: dict[str, list[int]], keys: list[str], fallback: list[int]) -> list[int]:
    found = [node for key in keys for node in previous.get(key, ())]
    return found if found or not keys else fallback


def _join(plan: Plan, frame: Frame, barrier: Barrier, exits: list[int],
          at: float) -> list[int]:
    if len(exits) <= 1:
        return exits
    node = plan.add(frame.path, "join", at, at, exits)
    plan.duration[node] = 0.0
    plan.join_of[node] = barrier.id
    return [node]
