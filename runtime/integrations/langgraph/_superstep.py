"""One LangGraph superstep as one barrier: its fork, its branches and its join.

A :class:`Scope` is one Pregel loop (the invocation's, or a subgraph's inside a task); it
collects the callbacks of its open superstep, and :meth:`Scope.close` makes them a
:class:`Superstep`, which :func:`render` turns into events once the tasks are known. A
subgraph's supersteps are rendered inside the branch of the task that ran it (a nested
barrier: its base is that branch, its join publishes into that branch's scope).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.errors import GraphInterrupt

from runtime import events as ev

from ._bus import ReplayBus
from ._edges import Previous, Topology, predecessors, senders_of
from ._models import render_end, render_start
from ._values import Cancelled, Reducer, error_info, plain, reduce, reducer_name, sort_key

STATE_STEP = "state"
"""The step the graph state lives under in the events (LangGraph's state has no steps)."""

CONFLICT_CODE = "parallel_state_conflict"
"""The error code of two writes to one ``LastValue`` key in a superstep: the code of our
runtime's ``ParallelStateConflictError`` (two branches replaced one field)."""


@dataclass(eq=False)
class Task:
    """One LangGraph task (one branch), as its callbacks told it."""

    scope: Scope
    node: str
    lg_path: tuple[Any, ...]
    given: Any
    started: float
    depth: int
    """How deep its checkpoint namespace is (0: a task of the invocation's graph)."""
    ended: float | None = None
    writes: Any = None
    error: BaseException | None = None
    index: int = -1
    key: str = ""
    path: str = ""
    sub: Scope | None = None
    """The subgraph loop it ran (the last one, when it ran several)."""
    after: list[str] | None = None
    """The keys of the previous superstep's tasks it waited for (None: unknown)."""
    sends: list[str] = field(default_factory=list)
    """The nodes of the ``Send``s it returned (its routing functions', its ``Command``'s)."""

    @property
    def push(self) -> bool:
        """A PUSH task (a ``Send``'s), not a node's PULL task."""
        return self.lg_path[:1] == ("__pregel_push",) and len(self.lg_path) > 1

    @property
    def own_key(self) -> str:
        """Its branch key: its node, or ``node:index`` for a ``Send``'s task."""
        return f"{self.node}:{self.lg_path[1]}" if self.push else self.node


Piece = tuple[str, str, Any]
"""One write a value came from: the writer's path and key, and what it wrote."""


@dataclass(eq=False)
class Scope:
    """One Pregel loop: the invocation's (``owner`` None) or a subgraph's in a task."""

    state: dict[str, Any]
    reducers: dict[str, Reducer]
    known: frozenset[str]
    owner: Task | None = None
    topology: Topology | None = None
    """Its graph's edges (None: unknown, and so are its tasks' predecessors)."""
    superstep: int | None = None
    tasks: list[Task] = field(default_factory=list)
    log: list[tuple[str, Any]] = field(default_factory=list)
    """("start" | "end", Task), ("nested", Superstep) and ("model" | "model_end",
    ModelCall) in callback order."""
    barriers: int = 0
    initial: dict[str, Any] = field(default_factory=dict)
    """The state it started from (a subgraph's: its input)."""
    origins: dict[str, tuple[bool, list[Piece]]] = field(default_factory=dict)
    """A subgraph's keys its joins published, and the writes their values came from:
    reduced in order onto the initial value, or onto nothing when the flag says a
    replacement reset it (kept for subgraphs only)."""
    previous: tuple[int | None, Sequence[Previous]] = (None, ())
    """The last closed superstep's step number, and its tasks."""

    def __post_init__(self) -> None:
        self.initial = dict(self.state)

    def close(self, *, failing: bool) -> Superstep:
        """The open superstep's record; the scope is ready for the next one."""
        done = Superstep(self, self.barriers, sorted(self.tasks, key=lambda t: sort_key(
            t.lg_path)), self.log, failing, self.superstep)
        number, before = self.previous
        if number is None or self.superstep != number + 1:
            before = ()  # only the superstep right before can have triggered a task
        sent = senders_of(before, [(t.lg_path[1], t.node) for t in done.tasks if t.push])
        for task in done.tasks:
            task.after = predecessors(self.topology, before, task.node, push=task.push,
                                      sender=(sent or {}).get(task.lg_path[1])
                                      if task.push else None)
        self.previous = (self.superstep, [Previous(t.node, t.own_key, tuple(t.sends))
                                          for t in done.tasks])
        self.barriers += 1
        self.tasks, self.log, self.superstep = [], [], None
        return done

    def writes(self, task: Task) -> list[tuple[str, Any]]:
        """The state keys a task's output writes (a node returns a dict of updates)."""
        if not isinstance(task.writes, Mapping):
            return []
        return [(str(k), v) for k, v in task.writes.items()
                if (k in self.known if self.known else not str(k).startswith("__"))]


@dataclass(eq=False)
class Superstep:
    scope: Scope
    ordinal: int
    tasks: list[Task]
    """In LangGraph's task order."""
    log: list[tuple[str, Any]]
    failing: bool
    """The invocation failed as this superstep ended (LangGraph raised)."""
    number: int | None = None
    """LangGraph's step number of it (``langgraph_step``)."""

    @property
    def barrier(self) -> str:
        """Its barrier's id."""
        caller = self.scope.owner.path if self.scope.owner is not None else ""
        return f"{caller}/b{self.ordinal}" if caller else f"b{self.ordinal}"


def render(bus: ReplayBus, step: Superstep, now: float) -> ev.ErrorInfo | None:
    """Emit ``step`` as a barrier: fork, its branches' callbacks in order (a subgraph's
    supersteps inside its task's branch), then the join. Returns the error of the first
    ``join.invalidated`` it emitted (a nested one included), if any."""
    scope, tasks, k, barrier = step.scope, step.tasks, step.ordinal, step.barrier
    caller = scope.owner.path if scope.owner is not None else ""
    for index, task in enumerate(tasks):
        task.index = index
        task.key = task.own_key
        own = str(index) if k == 0 else f"{k}:{index}"
        task.path = f"{caller}.{own}" if caller else own
    request = ev.record_maker(ev.BranchRequest)
    first = min((t.started for t in tasks), default=now)
    requests = [request(index=t.index, path=t.path, step=t.node, key=t.key,
                        params=plain(t.given), user_message=None, after=t.after)
                for t in tasks]
    pages = ev.fork_pages(requests)
    bus.emit_at(first, ev.BarrierForked, caller, barrier=barrier,
                caller_step=scope.owner.node if scope.owner is not None else STATE_STEP,
                requests=pages[0], policy="atomic", checkpoint="none", max_concurrency=None,
                branch_timeout=None, token_budget=None, base=caller or "canonical",
                count=len(requests) if len(pages) > 1 else None)
    for page in pages[1:]:
        bus.emit_at(first, ev.BarrierRequested, caller, barrier=barrier,
                    first=page[0].index, requests=page)
    views: dict[str, dict[str, Any]] = {t.path: {} for t in tasks}
    conflict: ev.ErrorInfo | None = None
    for what, item in step.log:
        if what == "nested":
            conflict = render(bus, item, now) or conflict
        elif what == "model":
            render_start(bus, item)
        elif what == "model_end":
            render_end(bus, item)
        elif what == "start":
            bus.emit_at(item.started, ev.BranchStarted, item.path, barrier=barrier,
                        index=item.index, key=item.key, step=item.node)
        else:
            _branch_end(bus, scope, barrier, item, views[item.path])
    last = max((t.ended for t in tasks if t.ended is not None), default=first)
    for task in (t for t in tasks if t.ended is None):  # cancelled when a sibling failed
        task.error = Cancelled("cancelled: a task of its superstep failed")
        bus.emit_at(last, ev.BranchRejected, task.path, barrier=barrier, index=task.index,
                    key=task.key, error=ev.error_info(task.error), cancelled=True,
                    started=True)
    failed = [t for t in tasks if t.error is not None]
    target = "caller-scope" if caller else "canonical"
    if failed:
        _paged(bus, last, ev.JoinPublished, caller, barrier,
               {"discarded": _discarded(tasks, failed[0])}, target=target, fields=[])
        return conflict
    invalid = _conflict(bus, step, barrier, caller, last)
    if invalid is None:
        _join(bus, step, barrier, caller, target, last)
    return invalid


def _branch_end(bus: ReplayBus, scope: Scope, barrier: str, task: Task,
                view: dict[str, Any]) -> None:
    at = task.ended or 0.0
    if task.error is not None:
        bus.emit_at(at, ev.BranchRejected, task.path, barrier=barrier, index=task.index,
                    key=task.key, error=error_info(task.error), cancelled=False,
                    started=True)
        return
    for order, (name, value) in enumerate(scope.writes(task), start=1):
        before = view.get(name, scope.state.get(name))
        reducer = scope.reducers.get(name)
        if reducer is not None:
            view[name] = reduce(reducer, before, value)
            bus.emit_at(at, ev.StateContributed, task.path, step=STATE_STEP, field=name,
                        value=plain(value), order=order, draft=True, channel=None,
                        result=plain(view[name]))
        else:
            view[name] = value
            bus.emit_at(at, ev.StateReplaced, task.path, step=STATE_STEP, field=name,
                        value=plain(value), base=plain(before), draft=True)
    bus.emit_at(at, ev.BranchFulfilled, task.path, barrier=barrier, index=task.index,
                key=task.key, output=plain(task.writes))


def _conflict(bus: ReplayBus, step: Superstep, barrier: str, caller: str, at: float
              ) -> ev.ErrorInfo | None:
    """``join.invalidated`` for the first non-reducer key two tasks wrote; its error if
    so. The code is our runtime's for two replacements of one field (the page explains
    it), the fix LangGraph's."""
    scope = step.scope
    writers: dict[str, list[tuple[Task, Any]]] = {}
    for task in step.tasks:
        for name, value in scope.writes(task):
            if name not in scope.reducers:
                writers.setdefault(name, []).append((task, value))
    for name, found in writers.items():
        # Without the graph's channels, two writers conflict only if LangGraph said so.
        if len(found) < 2 or (not scope.known and not step.failing):
            continue
        who = ", ".join(f"{t.path} ({t.key})" for t, _ in found)
        provenance = [{"path": t.path, "key": t.key, "step": STATE_STEP, "field": name,
                       "kind": "replace", "value": plain(v),
                       "base": plain(scope.state.get(name))} for t, v in found]
        error = ev.ErrorInfo(
            type="InvalidUpdateError", code=CONFLICT_CODE,
            message=f"Tasks {who} all wrote {name!r}, a LastValue channel, in one "
                    "superstep; LangGraph accepts one value per step.",
            extra={"step": STATE_STEP, "field": name, "provenance": provenance,
                   "fix": f"Give {name!r} a reducer in the state schema "
                          f"({name}: Annotated[T, operator.add], or add_messages for "
                          "messages), or have one node write it per superstep."})
        _paged(bus, at, ev.JoinInvalidated, caller, barrier, {"provenance": provenance},
               error=error)
        return error
    return None


def _join(bus: ReplayBus, step: Superstep, barrier: str, caller: str, target: str,
          at: float) -> None:
    scope, published = step.scope, ev.record_maker(ev.PublishedField)
    written: dict[str, list[tuple[Task, Any]]] = {}
    for task in step.tasks:
        for name, value in scope.writes(task):
            written.setdefault(name, []).append((task, value))
    fields = []
    finished = sorted((t for t in step.tasks if t.ended is not None),
                      key=lambda t: t.ended or 0.0)
    for name, found in written.items():
        reducer = scope.reducers.get(name)
        if reducer is None and (len(found) == 1 or scope.known):
            task, value = found[-1]
            came = _pieces(task, name, value)
            scope.state[name] = value
            if scope.owner is not None:
                scope.origins[name] = (True, came)
            # A subgraph's value names the inner branch that wrote it, as a nested join's
            # publication does in our runtime.
            fields.append(published(step=STATE_STEP, field=name, value=plain(value),
                                    deleted=False,
                                    writer=came[0][0] if len(came) == 1 else task.path))
            continue
        initial, result = scope.state.get(name), None
        inputs: list[Piece] = [(t.path, t.key, v) for t, v in found]
        if reducer is not None:
            result = _reduced(reducer, initial, inputs)
            split = [p for t, v in found for p in _pieces(t, name, v)]
            # The inner writes stand for a subgraph's returned value when they reduce to
            # the same result (a list concatenation does, any reducer may not).
            if [p[0] for p in split] != [p[0] for p in inputs] \
                    and plain(_reduced(reducer, initial, split)) == plain(result):
                inputs = split
        paths = {t.path for t, _ in found}
        _paged(bus, at, ev.JoinReduced, caller, barrier, {
            "inputs": [{"path": path, "key": key, "value": plain(v)} for path, key, v in inputs],
            "completion_order": [t.path for t in finished if t.path in paths]},
            step=STATE_STEP, field=name, channel=reducer_name(reducer), initial=plain(initial),
            result=plain(result))
        if reducer is not None:  # an unknown reducer's result is not in the callbacks
            scope.state[name] = result
            if scope.owner is not None:
                before = scope.origins.get(name, (False, []))
                scope.origins[name] = (before[0], before[1] + inputs)
            fields.append(published(step=STATE_STEP, field=name, value=plain(result),
                                    deleted=False, writer=None))
        else:
            scope.origins.pop(name, None)
    bus.emit_at(at, ev.JoinPublished, caller, barrier=barrier, target=target, fields=fields,
                discarded=[])


def _paged(bus: ReplayBus, at: float, cls: type[Any], caller: str, barrier: str,
           lists: dict[str, list[Any]], **fields: Any) -> None:
    """``cls`` with its per-branch ``lists`` in pages, as the runtime's joins record them
    (``list.continued`` events after it), so that no event grows with a superstep's width."""
    heads, counts, rest = ev.paged_lists(lists)
    bus.emit_at(at, cls, caller, barrier=barrier, **fields, **heads, counts=counts)
    of = cls.model_fields["type"].default
    for name, first, items in rest:
        bus.emit_at(at, ev.ListContinued, caller, barrier=barrier, of=of, name=name,
                    first=first, items=items)


def _reduced(reducer: Reducer, initial: Any, inputs: list[Piece]) -> Any:
    result = initial
    for _, _, value in inputs:
        result = reduce(reducer, result, value)
    return result


def _pieces(task: Task, name: str, value: Any) -> list[Piece]:
    """The writes ``task``'s write of ``name`` came from: its own, or, when it returned
    the state of a subgraph it ran (LangGraph's output of a subgraph node), the subgraph's
    input value (the task's) then the inner writes its joins published."""
    sub = task.sub
    own: list[Piece] = [(task.path, task.key, value)]
    if sub is None or name not in sub.origins or plain(sub.state.get(name)) != plain(value):
        return own
    replaced, found = sub.origins[name]
    start = None if replaced else sub.initial.get(name)
    empty = start is None or (isinstance(start, list | tuple | dict | str) and not start)
    return ([] if empty else [(task.path, task.key, start)]) + found


def _discarded(tasks: list[Task], culprit: Task) -> list[dict[str, Any]]:
    if isinstance(culprit.error, GraphInterrupt):
        # LangGraph keeps the siblings' writes pending: they publish when the thread
        # resumes and the interrupted task ends, in a later turn.
        why = (f"interrupted: branch {culprit.index} ({culprit.key}) called interrupt(); "
               "the superstep joins when the thread resumes")
    else:
        why = f"atomic: branch {culprit.index} ({culprit.key}) was rejected"
    return [{"index": t.index, "key": t.key,
             "reason": "rejected" if t.error is not None else why} for t in tasks]
