"""The callback handler: LangChain's callbacks of a LangGraph run, sorted into scopes."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langgraph.checkpoint.base import BaseCheckpointSaver

from runtime import events as ev
from runtime.engine import dashboard_from_env

from ._bus import ReplayBus
from ._edges import sends_in, topology_of
from ._models import ModelCall, describe, messages_of, tools_of
from ._superstep import STATE_STEP, Scope, Task, render
from ._values import channels_of, interrupts, plain, reduce, subgraph_of, turn_error

INPUT_NODE = "__start__"
"""The node LangGraph runs its input step as (with callbacks when START has a conditional
edge): not a task of the run."""


@dataclass(eq=False)
class _Invocation:
    """One top-level invocation: one run, one turn."""

    bus: ReplayBus
    scope: Scope
    interrupts: list[Any] = field(default_factory=list)
    """What the tasks that called ``interrupt()`` asked, in task order."""
    calls: int = 0
    """Chat model calls so far."""
    conflict: ev.ErrorInfo | None = None
    """The first ``join.invalidated`` of the turn's supersteps."""
    thread: Any = None
    since: Any = None
    """The id of the thread's checkpoint the invocation started from."""
    barriers: dict[int, str] = field(default_factory=dict)
    """The barrier of each of the graph's supersteps, by LangGraph's step number."""


@dataclass(frozen=True, eq=False)
class _Where:
    """Where a LangChain run id belongs: its invocation, the innermost Pregel loop and
    task around it, and whether it is that loop's own run or that task's."""

    root: UUID
    scope: Scope
    task: Task | None = None
    loop: bool = False
    """It is ``scope``'s Pregel run (the invocation, or a subgraph)."""
    is_task: bool = False


SOURCE = "LangGraph"
"""The origin the dashboard shows for the runs the tracer ships to it."""


class LangGraphTracer(BaseCallbackHandler):
    """Records compiled LangGraph graphs' invocations as PicoFlow runs.

    Args:
        graph: the compiled graph, whose channels say which keys have reducers (None:
            inferred, see :mod:`runtime.integrations.langgraph`).
        sinks: where the events go; None ships them to the dashboard that
            ``PICOFLOW_DASHBOARD_URL`` and ``PICOFLOW_DASHBOARD_TOKEN`` name, as
            :class:`~runtime.FlowEngine` does (nowhere when they are unset), with the
            origin :data:`SOURCE`.
    """

    run_inline = True  # on asyncio: called on the loop in order, not from a thread
    raise_error = False

    def __init__(self, graph: Any = None, *, sinks: Iterable[ev.EventSink] | None = None
                 ) -> None:
        super().__init__()
        self.dashboard = dashboard_from_env(source=SOURCE) if sinks is None else None
        """The dashboard sink of the environment (``sinks=None``); :meth:`close` closes
        it."""
        self.sinks: list[ev.EventSink] = list(sinks) if sinks is not None else (
            [self.dashboard] if self.dashboard is not None else [])
        self.graph = graph
        self.reducers, self.known = channels_of(graph)
        self.topology = topology_of(graph)
        self.last_run_id: str | None = None
        """The run id of the last invocation that started."""
        self._lock = threading.Lock()  # a sync invocation calls back from a thread pool
        self._runs: dict[UUID, _Invocation] = {}
        self._where: dict[UUID, _Where] = {}
        self._calls: dict[UUID, tuple[UUID, ModelCall]] = {}

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send what the dashboard sink holds; True when all of it was answered in time."""
        return self.dashboard.flush(timeout) if self.dashboard is not None else True

    def close(self, timeout: float | None = None) -> bool:
        """Flush and close the dashboard sink (``sinks=None``), giving up after ``timeout``
        seconds (None: ``PICOFLOW_DASHBOARD_CLOSE_TIMEOUT``, default 5)."""
        return self.dashboard.close(timeout) if self.dashboard is not None else True

    # -- LangChain callbacks ---------------------------------------------------------------

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        now = time.monotonic()
        meta = metadata or {}
        with self._lock:
            where = self._where.get(parent_run_id) if parent_run_id is not None else None
            if where is None:
                if "langgraph_node" not in meta:
                    self._begin(run_id, inputs, meta, kwargs.get("name"))
                return
            step = meta.get("langgraph_step")
            depth = str(meta.get("langgraph_checkpoint_ns") or "").count("|")
            scope = where.scope
            if isinstance(step, int) and not where.loop and where.task is not None \
                    and depth > where.task.depth:
                # The parent is a subgraph's Pregel run inside that task.
                assert parent_run_id is not None
                scope = self._subgraph(where.task, inputs)
                self._where[parent_run_id] = _Where(where.root, scope, where.task, loop=True)
            elif not (where.loop and isinstance(step, int)):
                self._where[run_id] = _Where(where.root, scope, where.task)
                return
            if meta.get("langgraph_node") == INPUT_NODE:
                # LangGraph's input step: its writes are the input the scope's state
                # already starts from, and its routing is no user work.
                self._where[run_id] = _Where(where.root, scope)
                return
            if scope.superstep is not None and scope.superstep != step:
                self._closed(where.root, scope, failing=False)
            scope.superstep = step
            task = Task(scope=scope, node=str(meta.get("langgraph_node")),
                        lg_path=tuple(meta.get("langgraph_path") or ("__pregel_pull", "")),
                        given=inputs, started=now, depth=depth)
            scope.tasks.append(task)
            scope.log.append(("start", task))
            self._where[run_id] = _Where(where.root, scope, task, is_task=True)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        self._ended(run_id, outputs, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID,
                       parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._ended(run_id, None, error)

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: Any, *,
                            run_id: UUID, parent_run_id: UUID | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        now = time.monotonic()
        with self._lock:
            where = self._where.get(parent_run_id) if parent_run_id is not None else None
            if where is None or where.task is None or where.root not in self._runs:
                return  # a model called outside any task of a traced graph
            inv = self._runs[where.root]
            inv.calls += 1
            invocation = kwargs.get("invocation_params") or {}
            call = ModelCall(task=where.task, call=inv.calls,
                             model=describe(serialized, metadata or {}, invocation),
                             messages=messages_of(messages), tools=tools_of(invocation),
                             started=now)
            self._calls[run_id] = (where.root, call)
            where.task.scope.log.append(("model", call))

    def on_llm_end(self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                   **kwargs: Any) -> None:
        self._model_ended(run_id, response, None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID,
                     parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._model_ended(run_id, None, error)

    def _model_ended(self, run_id: UUID, response: Any, error: BaseException | None) -> None:
        now = time.monotonic()
        with self._lock:
            found = self._calls.pop(run_id, None)
            if found is None:
                return
            call = found[1]
            call.ended, call.response, call.error = now, response, error
            call.task.scope.log.append(("model_end", call))

    # -- invocations, subgraphs, tasks -----------------------------------------------------

    def _begin(self, run_id: UUID, inputs: Any, meta: Mapping[str, Any], name: Any) -> None:
        thread = meta.get("thread_id")
        session = str(thread) if thread is not None and ev.is_valid_id(str(thread)) \
            else uuid.uuid4().hex
        bus = ReplayBus(self.sinks, session_id=session)
        saved, since = self._saved_state(thread)
        state = dict(saved or {})
        for key, value in (inputs.items() if isinstance(inputs, Mapping) else ()):
            reducer = self.reducers.get(key)
            state[key] = reduce(reducer, state.get(key), value) if reducer else value
        scope = Scope(state=state, reducers=self.reducers, known=self.known,
                      topology=self.topology)
        self._runs[run_id] = _Invocation(bus=bus, scope=scope, thread=thread, since=since)
        self._where[run_id] = _Where(run_id, scope, loop=True)
        self.last_run_id = bus.run_id
        resume = getattr(inputs, "resume", None) if not isinstance(inputs, Mapping) else None
        message = None if resume is None else ev.safe_text(
            "resume: " + json.dumps(plain(resume), default=repr))
        # The flow says where the run came from, and which graph when it has a name.
        flow = "LangGraph" if name in (None, "", "LangGraph") else f"LangGraph: {name}"
        bus.emit(ev.TurnStarted, flow=ev.safe_text(flow), message=message)
        bus.emit(ev.SessionLoaded, new_session=saved is None, revision=0, current_step=None,
                 steps={STATE_STEP: plain(state)}, context={},
                 tokens={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0})

    def _saved_state(self, thread: Any) -> tuple[dict[str, Any] | None, Any]:
        """The thread's state as the graph's checkpointer holds it (None: no checkpoint,
        no checkpointer, or one that cannot be read from here, such as an async-only
        saver read on the event loop), and that checkpoint's id."""
        if thread is None or not isinstance(self._saver(), BaseCheckpointSaver):
            return None, None
        try:
            snapshot = self.graph.get_state({"configurable": {"thread_id": thread}})
        except Exception:  # the turn is recorded from its input alone
            return None, None
        values = getattr(snapshot, "values", None)
        since = ((getattr(snapshot, "config", None) or {}).get("configurable") or {}).get(
            "checkpoint_id")
        return (dict(values) if isinstance(values, Mapping) and values else None), since

    def _saver(self) -> Any:
        return getattr(self.graph, "checkpointer", None)

    def _checkpoints(self, inv: _Invocation) -> None:
        """``checkpoint.saved`` for each superstep whose checkpoint the graph's
        checkpointer holds (LangGraph saves without a callback: read as the invocation
        ends, newest back to the one it started from)."""
        saver = self._saver()
        if inv.thread is None or not inv.barriers or not isinstance(saver,
                                                                    BaseCheckpointSaver):
            return
        saved: list[int] = []
        try:
            for item in saver.list({"configurable": {"thread_id": inv.thread,
                                                     "checkpoint_ns": ""}}):
                if item.config["configurable"].get("checkpoint_id") == inv.since:
                    break
                meta = item.metadata or {}
                if meta.get("source") == "loop" and isinstance(meta.get("step"), int):
                    saved.append(meta["step"])
        except Exception:  # a saver that cannot be read from here (async-only on the loop)
            return
        for number in reversed(saved):
            if number in inv.barriers:
                inv.bus.emit(ev.CheckpointSaved, barrier=inv.barriers[number],
                             revision=number)

    def _subgraph(self, owner: Task, inputs: Any) -> Scope:
        """A subgraph's loop inside ``owner``: its channels if the graph lists it (else its
        parent's stand in), its state the input of its first task."""
        sub = subgraph_of(self.graph, owner.node)
        reducers, known = channels_of(sub) if sub is not None else (
            owner.scope.reducers, owner.scope.known)
        state = dict(inputs) if isinstance(inputs, Mapping) else {}
        owner.sub = Scope(state=state, reducers=reducers, known=known, owner=owner,
                          topology=topology_of(sub))
        return owner.sub

    def _ended(self, run_id: UUID, outputs: Any, error: BaseException | None) -> None:
        now = time.monotonic()
        with self._lock:
            where = self._where.get(run_id)
            if where is None:
                return
            if run_id == where.root:
                self._finish(where.root, outputs, error)
            elif where.loop:  # a subgraph returned: its last superstep is complete
                if where.scope.superstep is not None:
                    self._closed(where.root, where.scope, failing=error is not None)
            elif where.is_task and where.task is not None and where.task.ended is None:
                task = where.task
                task.ended, task.writes, task.error = now, outputs, error
                task.sends += sends_in(outputs)
                task.scope.log.append(("end", task))
            elif where.task is not None and error is None:
                # A run inside a task: its routing functions return its Sends.
                where.task.sends += sends_in(outputs)

    def _closed(self, root: UUID, scope: Scope, *, failing: bool) -> None:
        """Close ``scope``'s superstep: emit it, or keep it in its owner's record (a
        subgraph's barrier is emitted inside the branch of the task that ran it)."""
        step = scope.close(failing=failing)
        if scope.owner is not None:
            scope.owner.scope.log.append(("nested", step))
            return
        inv = self._runs[root]
        if step.number is not None:
            inv.barriers[step.number] = step.barrier
        inv.interrupts += [asked for task in step.tasks for asked in interrupts(task.error)]
        inv.conflict = render(inv.bus, step, time.monotonic()) or inv.conflict

    def _finish(self, root: UUID, outputs: Any, error: BaseException | None) -> None:
        inv = self._runs.pop(root)
        if inv.scope.superstep is not None:
            self._runs[root] = inv
            self._closed(root, inv.scope, failing=error is not None)
            del self._runs[root]
        self._checkpoints(inv)
        if error is None:
            # An interrupted invocation returns normally; the thread resumes in a later one.
            said = {"interrupts": inv.interrupts} if inv.interrupts else outputs
            inv.bus.emit(ev.TurnFinished, success=True, completed=not inv.interrupts,
                         message=ev.safe_text(json.dumps(plain(said), default=repr)),
                         content_type="application/json")
        else:
            inv.bus.emit(ev.TurnFailed, error=turn_error(error, inv.conflict))
        self._where = {k: w for k, w in self._where.items() if w.root != root}
        self._calls = {k: c for k, c in self._calls.items() if c[0] != root}
