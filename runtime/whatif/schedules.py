"""Three ways to schedule a plan's nodes: as recorded, under graph-wide supersteps, and
under local (parent-owned) barriers.

``supersteps`` is LangGraph's Pregel rule: every node whose dependencies are done starts
at the next superstep, and a superstep ends when all of its nodes end. ``local_barriers``
is PicoFlow's: a node starts as soon as what it depends on is done, so a coordinator
continues as soon as its own join completes. Both keep each barrier's ``max_concurrency``
(a branch holds a slot of its barrier from its first node to its last); ``supersteps``
adds the graph-wide limit LangGraph's ``max_concurrency`` sets, when given.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass, field

from .operations import Plan

HELD = 3
"""How many of the operations a node waited for are named."""


@dataclass
class Timing:
    """Where one schedule places every node, and why each starts when it does."""

    name: str
    start: list[float]
    end: list[float]
    ready: list[float]
    """When its dependencies were done."""
    cause: list[int]
    """The node whose end set its start (-1: none; the turn's start)."""
    why: list[str]
    """``""`` (started when ready), ``superstep``, ``slot`` or ``unexplained``."""
    held_by: dict[int, list[int]] = field(default_factory=dict)
    """Nodes that started after they were ready: the nodes they waited for."""
    superstep: list[int] | None = None
    supersteps: int = 0


def _blank(plan: Plan, name: str) -> Timing:
    n = len(plan.kind)
    return Timing(name, [0.0] * n, [0.0] * n, [0.0] * n, [-1] * n, [""] * n)


def _ready(plan: Plan, timing: Timing, node: int) -> None:
    """When ``node`` could start: its dependencies done, then its lead."""
    best, cause = 0.0, -1
    for dep in plan.deps[node]:
        if timing.end[dep] >= best:
            best, cause = timing.end[dep], dep
    timing.ready[node], timing.cause[node] = best + plan.lead[node], cause


def recorded(plan: Plan) -> Timing:
    """The nodes as they ran. A node that started well after what it depends on waited for
    a slot of its barrier, for a superstep (a LangGraph run's barriers are its
    supersteps), or for nothing the events name: then the operation that ended last
    before it started is named."""
    timing = _blank(plan, "recorded")
    timing.start, timing.end = list(plan.rec_start), list(plan.rec_end)
    slots = _SlotChains(plan)
    real = sorted((end, node) for node, end in enumerate(plan.rec_end)
                  if plan.kind[node] != "join")
    ends = [end for end, _ in real]
    late = "superstep" if plan.flow.startswith("LangGraph") else "unexplained"
    for node in range(len(plan.kind)):
        _ready(plan, timing, node)
        if timing.start[node] - timing.ready[node] < plan.glue or plan.kind[node] == "join":
            continue
        freed = slots.freed_before(node, timing.start[node])
        if freed is not None:
            timing.why[node], timing.cause[node] = "slot", freed
        else:
            timing.why[node] = late
            found = bisect.bisect_right(ends, timing.start[node]) - 1
            while found >= 0 and plan.frame[real[found][1]] == plan.frame[node]:
                found -= 1
            if found >= 0 and ends[found] > timing.ready[node]:
                timing.cause[node] = real[found][1]
        if timing.cause[node] >= 0:
            timing.held_by[node] = [timing.cause[node]]
    return timing


def local_barriers(plan: Plan) -> Timing:
    """Each node as soon as its dependencies and its barriers' slots allow."""
    timing = _blank(plan, "local_barriers")
    chains = _SlotChains(plan)
    if not chains.limited:
        for node in range(len(plan.kind)):
            _ready(plan, timing, node)
            timing.start[node] = timing.ready[node]
            timing.end[node] = timing.start[node] + plan.duration[node]
        return timing
    _Simulation(plan, timing, chains).run()
    return timing


def supersteps(plan: Plan, max_concurrency: int | None = None) -> Timing:
    """Pregel's rule: all ready nodes start together; the slowest ends the superstep."""
    timing = _blank(plan, "supersteps")
    n = len(plan.kind)
    timing.superstep = [0] * n
    succ = _successors(plan)
    left = [len(deps) for deps in plan.deps]
    chains = _SlotChains(plan)
    frontier = [node for node in range(n) if not left[node]]
    for node in frontier:
        _ready(plan, timing, node)
    now, step = 0.0, 0
    done: list[int] = []

    def finish(node: int, at: float) -> None:
        timing.end[node] = at
        for nxt in succ[node]:
            left[nxt] -= 1
            if not left[nxt]:
                _ready(plan, timing, nxt)
                done.append(nxt)

    def settle(nodes: list[int], at: float) -> list[int]:
        """Complete the joins among ``nodes`` (they take no time); the rest start at
        the next superstep."""
        out, queue = [], list(nodes)
        while queue:
            node = queue.pop()
            if plan.kind[node] == "join":
                timing.start[node] = timing.ready[node]
                done.clear()
                finish(node, timing.ready[node])
                queue.extend(done)
            else:
                out.append(node)
        return sorted(out)

    frontier = settle(frontier, 0.0)
    previous: list[int] = []
    while frontier:
        step += 1
        ends = _run_superstep(plan, timing, chains, frontier, now, max_concurrency)
        for node in frontier:
            timing.superstep[node] = step
            if previous and now - timing.ready[node] >= plan.glue:
                timing.why[node] = "superstep"
                timing.held_by[node] = _stragglers(timing, previous, timing.ready[node])
                timing.cause[node] = timing.held_by[node][0]
        done.clear()
        for node in frontier:
            finish(node, timing.end[node])
        nxt = list(done)
        previous, now = frontier, max(ends, default=now)
        frontier = settle(nxt, now)
    timing.supersteps = step
    return timing


def _stragglers(timing: Timing, previous: list[int], ready: float) -> list[int]:
    late = [node for node in previous if timing.end[node] > ready]
    late.sort(key=lambda node: -timing.end[node])
    return late[:HELD]


def _run_superstep(plan: Plan, timing: Timing, chains: _SlotChains, nodes: list[int],
                   now: float, limit: int | None) -> list[float]:
    """Start ``nodes`` at ``now``, each as soon as its limits allow; their ends."""
    groups: dict[tuple[str, ...], deque[int]] = {}
    for node in nodes:
        keys = chains.barriers_of(node) + (("*",) if limit is not None else ())
        if not keys:
            timing.start[node] = max(now, timing.ready[node])
            timing.end[node] = timing.start[node] + plan.duration[node]
            continue
        groups.setdefault(keys, deque()).append(node)
    if groups:
        caps = dict(chains.limit)
        if limit is not None:
            caps["*"] = limit
        _list_schedule(plan, timing, groups, caps, now)
    return [timing.end[node] for node in nodes]


def _list_schedule(plan: Plan, timing: Timing, groups: dict[tuple[str, ...], deque[int]],
                   caps: dict[str, int], now: float) -> None:
    """Start each group's nodes in order while every limit it counts against has room."""
    used = dict.fromkeys(caps, 0)
    holds: dict[int, tuple[str, ...]] = {}
    running: list[tuple[float, int]] = []
    freed_by = -1
    while True:
        for keys, queue in groups.items():
            while queue and all(used[key] < caps[key] for key in keys):
                node = queue.popleft()
                for key in keys:
                    used[key] += 1
                holds[node] = keys
                timing.start[node] = max(now, timing.ready[node])
                timing.end[node] = timing.start[node] + plan.duration[node]
                if freed_by >= 0:
                    timing.why[node], timing.cause[node] = "slot", freed_by
                    timing.held_by[node] = [freed_by]
                heapq.heappush(running, (timing.end[node], node))
        if not running:
            return
        now, freed_by = heapq.heappop(running)
        for key in holds.pop(freed_by):
            used[key] -= 1


def _successors(plan: Plan) -> list[list[int]]:
    succ: list[list[int]] = [[] for _ in plan.kind]
    for node, deps in enumerate(plan.deps):
        for dep in deps:
            succ[dep].append(node)
    return succ


class _SlotChains:
    """For each node, the branches around it whose barrier limits concurrency."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.limit = {b.id: b.limit for b in plan.barriers.values() if b.limit is not None}
        self.limited = bool(self.limit)
        self._chain: dict[str, tuple[str, ...]] = {}
        self._ends: dict[str, tuple[list[float], list[int]]] = {}

    def frames_of(self, node: int) -> tuple[str, ...]:
        """Limited branches around ``node``, outermost first."""
        path = self.plan.frame[node]
        chain = self._chain.get(path)
        if chain is None:
            chain = self._chain[path] = self._walk(path)
        return chain

    def _walk(self, path: str) -> tuple[str, ...]:
        out: list[str] = []
        frame = self.plan.frames.get(path)
        while frame is not None and frame.parent is not None:
            if frame.barrier in self.limit:
                out.append(frame.path)
            frame = self.plan.frames.get(frame.parent)
        return tuple(reversed(out))

    def barriers_of(self, node: int) -> tuple[str, ...]:
        if not self.limited:
            return ()
        return tuple(str(self.plan.frames[path].barrier) for path in self.frames_of(node))

    def freed_before(self, node: int, at: float) -> int | None:
        """The recorded end of a sibling branch that freed the slot ``node`` started in."""
        chain = self.frames_of(node) if self.limited else ()
        if not chain:
            return None
        frame = self.plan.frames[chain[-1]]
        if frame.nodes[:1] != [node] and frame.nodes:
            return None
        ends, lasts = self._ends_of(str(frame.barrier))
        found = bisect.bisect_right(ends, at) - 1
        while found >= 0 and self.plan.frame[lasts[found]] == frame.path:
            found -= 1
        return lasts[found] if found >= 0 else None

    def _ends_of(self, barrier: str) -> tuple[list[float], list[int]]:
        """The barrier's branches' recorded ends, in order, with their last nodes."""
        cached = self._ends.get(barrier)
        if cached is None:
            pairs = sorted((frame.end, frame.nodes[-1]) for path in
                           self.plan.barriers[barrier].branches
                           for frame in [self.plan.frames[path]]
                           if frame.end is not None and frame.nodes)
            cached = self._ends[barrier] = ([e for e, _ in pairs], [n for _, n in pairs])
        return cached


class _Simulation:
    """local_barriers with slots: nodes start in time order, a branch of a limited barrier
    only while it holds one of the barrier's slots."""

    def __init__(self, plan: Plan, timing: Timing, chains: _SlotChains) -> None:
        self.plan, self.timing, self.chains = plan, timing, chains
        self.succ = _successors(plan)
        self.left = [len(deps) for deps in plan.deps]
        self.used = dict.fromkeys(chains.limit, 0)
        self.acquired: set[str] = set()
        self.waiting: dict[str, list[int]] = {}
        self.queues: dict[str, deque[str]] = {b: deque() for b in chains.limit}
        self.remaining: dict[str, int] = {}
        for node in range(len(plan.kind)):
            for path in chains.frames_of(node):
                self.remaining[path] = self.remaining.get(path, 0) + 1
        self.events: list[tuple[float, int]] = []

    def run(self) -> None:
        for node in range(len(self.plan.kind)):
            if not self.left[node]:
                self.try_start(node, 0.0, -1)
        while self.events:
            at, node = heapq.heappop(self.events)
            self.finished(node, at)

    def try_start(self, node: int, at: float, freed_by: int) -> None:
        timing = self.timing
        if freed_by < 0:
            _ready(self.plan, timing, node)
        for path in self.chains.frames_of(node):
            if path in self.acquired:
                continue
            if path in self.waiting:
                self.waiting[path].append(node)
                return
            barrier = str(self.plan.frames[path].barrier)
            if self.used[barrier] >= self.chains.limit[barrier]:
                self.waiting[path] = [node]
                self.queues[barrier].append(path)
                return
            self.used[barrier] += 1
            self.acquired.add(path)
        timing.start[node] = max(at, timing.ready[node])  # a queued branch's lead is done
        timing.end[node] = timing.start[node] + self.plan.duration[node]
        if freed_by >= 0 and at - timing.ready[node] >= self.plan.glue:
            timing.why[node], timing.cause[node] = "slot", freed_by
            timing.held_by[node] = [freed_by]
        heapq.heappush(self.events, (timing.end[node], node))

    def finished(self, node: int, at: float) -> None:
        for path in self.chains.frames_of(node):
            self.remaining[path] -= 1
            if not self.remaining[path]:
                self.release(str(self.plan.frames[path].barrier), node, at)
        for nxt in self.succ[node]:
            self.left[nxt] -= 1
            if not self.left[nxt]:
                self.try_start(nxt, at, -1)

    def release(self, barrier: str, node: int, at: float) -> None:
        self.used[barrier] -= 1
        queue = self.queues[barrier]
        if queue:
            path = queue.popleft()
            self.used[barrier] += 1
            self.acquired.add(path)
            for waiting in self.waiting.pop(path):
                self.try_start(waiting, at, node)
