"""A barrier's join and its checkpoint: ``join.*`` and ``checkpoint.*``.

A join publishes into the canonical state (a root join: the fold keeps what each field
held before, to roll it back) or into its caller's scope (the caller's view receives it);
it records its reductions, what it applied and what it discarded, which
:mod:`.publication` reads. A ``checkpoint.failed`` rolls a root join's publication back.
An invalidated or rolled-back join is a conflict. An event naming a barrier no fork
announced is an anomaly.
"""

from __future__ import annotations

import copy

from .. import schema as ev
from .model import Handlers, Invocation, RunModel, barrier_of, set_field
from .publication import applied_index


def _reduced(run: RunModel, event: ev.JoinReduced, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is not None:
        barrier.reductions.append(
            {"step": event.step, "field": event.field, "channel": event.channel,
             "inputs": event.inputs, "completion_order": event.completion_order,
             "result": event.result})


def _published(run: RunModel, event: ev.JoinPublished, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is None:
        return
    barrier.outcome, barrier.joined_at = "published", event.offset
    barrier.target = event.target
    barrier.published = [f.model_dump() for f in event.fields]
    barrier.discarded = list(event.discarded)
    barrier.applied = applied_index(barrier)
    barrier.discarded_at = {d.get("index", -1): d for d in barrier.discarded}
    for item in event.fields:
        if event.target == "canonical":
            fields = run.state.get(item.step, {})
            barrier.undo[(item.step, item.field)] = (
                item.field in fields, copy.deepcopy(fields.get(item.field)))
            set_field(run.state, item.step, item.field, item.value, item.deleted)
        elif inv is not None and run.drafts:
            inv.changes.append((event.seq, item.step, item.field, item.value, item.deleted))


def _invalidated(run: RunModel, event: ev.JoinInvalidated, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is None:
        return
    barrier.outcome, barrier.joined_at = "invalidated", event.offset
    barrier.error, barrier.provenance = event.error.model_dump(), list(event.provenance)
    run.conflicts.append(event.barrier)


def _checkpoint_saved(run: RunModel, event: ev.CheckpointSaved, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is not None:
        barrier.checkpoint_revision = event.revision


def _checkpoint_failed(run: RunModel, event: ev.CheckpointFailed,
                       inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is None:
        return
    for (step, name), (present, value) in barrier.undo.items():
        set_field(run.state, step, name, value, not present)
    barrier.outcome, barrier.error = "invalidated", event.error.model_dump()
    barrier.checkpoint_failed = True
    run.conflicts.append(event.barrier)


HANDLERS: Handlers = {
    "join.reduced": _reduced,
    "join.published": _published,
    "join.invalidated": _invalidated,
    "checkpoint.saved": _checkpoint_saved,
    "checkpoint.failed": _checkpoint_failed,
}
