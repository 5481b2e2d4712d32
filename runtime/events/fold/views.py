"""Views: what an invocation could read at a given moment, from the folded run.

A branch's view at sequence number N is its barrier's fork-time base — the canonical
state as of ``barrier.forked``, or the calling branch's own view as of then — overlaid
with its own drafts up to N and the publications its inner joins made into its scope up
to N. Siblings' drafts and what their inner joins published into their scopes, up to N,
are listed as invisible to it (``kind`` ``draft`` or ``join``): a sibling's nested results
reach no one but that sibling until its own join. A base the events do not
tell (a fork from an unknown invocation, or a cycle of them) reads as empty.
"""

from __future__ import annotations

import copy
from typing import Any

from .model import Barrier, RunModel, State, set_field


def view_at(run: RunModel, path: str, seq: int | None = None) -> dict[str, Any]:
    """What invocation ``path`` could read at ``seq`` (default: the end of the fold).

    Returns ``{"state": {step: {field: value}}, "own": [...], "invisible": [...]}``: the
    visible state, the changes that came from the invocation itself or its inner joins,
    and the changes its siblings had by then, their own drafts and their inner joins'
    publications (which it could not see). Raises
    ``KeyError`` for a path the run never announced. A fork-time base the events do not
    tell (a fork from an unknown invocation, recorded as an anomaly) reads as empty.
    """
    if not run.drafts:
        raise ValueError("This run was folded with drafts=False: it keeps no views.")
    return _view(run, path, seq, frozenset())


def _view(run: RunModel, path: str, seq: int | None, seen: frozenset[str]) -> dict[str, Any]:
    limit = run.last_seq if seq is None else seq
    if path == "":
        return {"state": copy.deepcopy(run.state), "own": [], "invisible": []}
    inv = run.invocations[path]
    assert inv.barrier is not None
    barrier = run.barriers[inv.barrier]
    state = _base_state(run, barrier, seen | {path})
    own = [c for c in inv.changes if c[0] <= limit]
    for _, step, name, value, deleted in own:
        set_field(state, step, name, value, deleted)
    invisible = [
        {"path": other, "step": step, "field": name, "value": value, "deleted": deleted,
         "kind": "draft" if seq_ in drafted else "join"}
        for other in barrier.branches if other != path and other in run.invocations
        for drafted in [{c[0] for c in run.invocations[other].drafts}]
        for seq_, step, name, value, deleted in run.invocations[other].changes if seq_ <= limit
    ]
    return {
        "state": state,
        "own": [{"seq": s, "step": st, "field": f, "value": v, "deleted": d}
                for s, st, f, v, d in own],
        "invisible": invisible,
    }


def _base_state(run: RunModel, barrier: Barrier, seen: frozenset[str]) -> State:
    if barrier.base == "canonical":
        return copy.deepcopy(barrier.base_state or {})
    if barrier.base in seen or (barrier.base and barrier.base not in run.invocations):
        return {}  # the events do not tell this base (unknown caller, or a cycle)
    return _view(run, barrier.base, barrier.forked_seq, seen)["state"]  # type: ignore[no-any-return]


def field_at(run: RunModel, path: str, step: str, name: str, limit: int,
             seen: frozenset[str] = frozenset()) -> tuple[bool, Any]:
    """``(present, value)`` of one field in invocation ``path``'s view before ``limit``:
    its last own change or received publication, else its fork-time base (the canonical
    state then, or its caller's view then)."""
    inv = run.invocations.get(path)
    if inv is None:
        return False, None
    for seq, step_, field_, value, deleted in reversed(inv.changes):
        if seq < limit and step_ == step and field_ == name:
            return not deleted, value
    barrier = run.barriers.get(inv.barrier) if inv.barrier is not None else None
    if barrier is None:
        return False, None
    if barrier.base == "canonical":
        fields = (barrier.base_state or {}).get(step, {})
        return name in fields, fields.get(name)
    if barrier.base in seen or barrier.base not in run.invocations:
        return False, None  # the events do not tell this base (unknown caller, or a cycle)
    return field_at(run, barrier.base, step, name, barrier.forked_seq, seen | {path})
