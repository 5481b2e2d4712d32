"""Which tasks of the previous superstep a task waited for, from the graph's edges.

A superstep's task list says when a task ran, not why: LangGraph starts every task of
superstep k+1 after the whole of superstep k, whichever of them triggered it. The edges of
the graph's builder say which nodes can trigger which, so a task's predecessors are the
previous superstep's tasks of the nodes that can route to it. That is what
``BranchRequest.after`` records, and what a schedule with local barriers (each task
waiting for its own triggers only) is computed from.

The relation over-approximates, never under-: a conditional edge or a ``Command`` counts
as routing to every node it could reach, whatever it chose in this run. A dependency this
cannot place in the previous superstep (a join whose other source ran earlier, a
deferred node) is unknown (None), not guessed.

``Send`` tasks are exact when the callbacks showed every ``Send``: LangGraph numbers the
next superstep's PUSH tasks in the order it applies the writes (its task order), so the
``Send``s each task's routing function or ``Command`` returned, concatenated in that
order, say which task sent the PUSH task of each index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.types import Command, Send


@dataclass(frozen=True)
class Topology:
    """Who can trigger whom in one ``StateGraph``."""

    targets: Mapping[str, frozenset[str] | None]
    """The nodes each node can route to (None: any node, as an unlabelled conditional
    edge or a ``Command`` without declared destinations can)."""
    senders: frozenset[str]
    """Nodes that can ``Send``: those with conditional edges or ``Command``s."""
    joins: Mapping[str, tuple[frozenset[str], ...]]
    """Each node's waiting edges (``add_edge([a, b], node)``): the sources of each."""
    deferred: frozenset[str]
    """Nodes added with ``defer=True``: they run when nothing else is left to run."""


def topology_of(graph: Any) -> Topology | None:
    """The topology of a compiled ``StateGraph`` (None: not one, or unreadable)."""
    builder = getattr(graph, "builder", None)
    nodes = getattr(builder, "nodes", None)
    if not isinstance(nodes, Mapping):
        return None
    try:
        return _read(builder, nodes)
    except Exception:  # a builder of another shape: the dependencies are unknown
        return None


def _read(builder: Any, nodes: Mapping[str, Any]) -> Topology:
    static: dict[str, set[str]] = {}
    for src, dst in getattr(builder, "edges", ()):
        static.setdefault(str(src), set()).add(str(dst))
    joins: dict[str, list[frozenset[str]]] = {}
    for starts, dst in getattr(builder, "waiting_edges", ()):
        joins.setdefault(str(dst), []).append(frozenset(str(s) for s in starts))
        for src in starts:
            static.setdefault(str(src), set()).add(str(dst))
    branches: Mapping[str, Mapping[str, Any]] = getattr(builder, "branches", {})
    targets: dict[str, frozenset[str] | None] = {}
    senders: set[str] = set()
    for name, spec in nodes.items():
        reach = set(static.get(name, ()))
        declared = _names(getattr(spec, "ends", None))
        handler = getattr(spec, "error_handler_node", None)
        if handler:
            reach.add(str(handler))
        routes = [_names(getattr(b, "ends", None)) for b in branches.get(name, {}).values()]
        if declared or routes:
            senders.add(name)
        for found in (declared, *routes):
            reach |= found
        # An unlabelled conditional edge may go anywhere; so may a node with no edge out,
        # which ends the graph or routes by returning a Command.
        anywhere = any(not found for found in routes) or not reach
        if not reach:
            senders.add(name)
        targets[name] = None if anywhere else frozenset(reach)
    return Topology(
        targets=targets, senders=frozenset(senders),
        joins={dst: tuple(found) for dst, found in joins.items()},
        deferred=frozenset(n for n, spec in nodes.items() if getattr(spec, "defer", False)))


def _names(ends: Any) -> set[str]:
    """A node's or a branch's declared destinations (a path map's values)."""
    if isinstance(ends, Mapping):
        return {str(v) for v in ends.values()}
    if isinstance(ends, Iterable) and not isinstance(ends, str | bytes):
        return {str(v) for v in ends}
    return set()


def sends_in(value: Any) -> list[str]:
    """The nodes of the ``Send``s a routing function or a node returned, in order."""
    if isinstance(value, Send):
        return [str(value.node)]
    if isinstance(value, Command):
        return sends_in(value.goto) if value.graph is None else []
    if isinstance(value, list | tuple):
        return [node for item in value for node in sends_in(item)]
    return []


@dataclass(frozen=True)
class Previous:
    """One task of the previous superstep, as its successors' predecessors."""

    node: str
    key: str
    sends: tuple[str, ...] = ()
    """The nodes of the ``Send``s it returned (through its routing functions or a
    ``Command``), in order."""


def senders_of(previous: Sequence[Previous], pushes: Sequence[tuple[Any, str]]
               ) -> dict[int, str] | None:
    """The key of the task that sent each PUSH task (``(index, node)``), when the
    ``Send``s the previous tasks returned account for exactly these tasks; else None."""
    sent = [(task.key, node) for task in previous for node in task.sends]
    if not sent or len(sent) != len(pushes):
        return None
    found: dict[int, str] = {}
    for index, node in pushes:
        if not isinstance(index, int) or not 0 <= index < len(sent) \
                or sent[index][1] != node or index in found:
            return None
        found[index] = sent[index][0]
    return found


def predecessors(topology: Topology | None, previous: Sequence[Previous], node: str, *,
                 push: bool, sender: str | None = None) -> list[str] | None:
    """The keys of the ``previous`` superstep's tasks (in task order) that a task of
    ``node`` waited for; None when unknown or none of them could have.

    A PULL task waits for the tasks whose node can route to its node. A PUSH task (a
    ``Send``) waits for its ``sender`` when known, else for the tasks that can ``Send``;
    when none can, or all of them could, it is unknown.
    """
    if topology is None or not previous or node in topology.deferred:
        return None
    if push:
        if sender is not None:
            return [sender]
        found = [t.key for t in previous if t.node in topology.senders]
        return found if 0 < len(found) < len(previous) else None
    ran = {t.node for t in previous}
    if any(not sources <= ran for sources in topology.joins.get(node, ())):
        return None  # a join source may have run before the previous superstep
    found = [t.key for t in previous
             if (reach := topology.targets.get(t.node, frozenset())) is None or node in reach]
    return found or None
