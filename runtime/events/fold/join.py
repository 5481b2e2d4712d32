"""A barrier's join and its checkpoint: ``join.*`` and ``checkpoint.*``.

A join publishes into the canonical state (a root join: the fold keeps what each field
held before, to roll it back) or into its caller's scope (the caller's view receives it);
it records its reductions, what it applied and what it discarded, which
:mod:`.publication` reads; a ``list.continued`` appends the next page of such a list (or
of a cancellation's) to the event before it. A ``checkpoint.failed`` rolls a root
join's publication back.
An invalidated or rolled-back join is a conflict. An event naming a barrier no fork
announced is an anomaly.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import schema as ev
from .model import Handlers, Invocation, RunModel, anomaly, barrier_of, set_field
from .publication import applied_index


def _reduced(run: RunModel, event: ev.JoinReduced, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is not None:
        barrier.reductions.append(
            {"step": event.step, "field": event.field, "channel": event.channel,
             "inputs": list(event.inputs),
             "completion_order": list(event.completion_order),
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


def _continued(run: RunModel, event: ev.ListContinued, inv: Invocation | None) -> None:
    """The next page of a list of the paged event before it, appended where that event's
    fold keeps the list (the cancellation's paths mark the branches they name)."""
    if (barrier := barrier_of(run, event, event.barrier)) is None:
        return
    of, name, items = event.of, event.name, event.items
    held: list[Any] | None = None
    if of == "join.reduced" and barrier.reductions and name in (
            "inputs", "completion_order"):
        held = barrier.reductions[-1][name]
    elif of == "join.published" and name == "discarded":
        held = barrier.discarded
        barrier.discarded_at.update((d.get("index", -1), d) for d in items)
    elif of == "join.invalidated" and name == "provenance":
        held = barrier.provenance
    elif of == "cancel.grace_expired" and name == "closed":
        for closed in items:
            if (late := run.invocations.get(closed)) is not None:
                late.lost_rights = True
        return
    elif of == "cancel.propagated" and name in ("running", "queued"):
        return
    if held is None:
        anomaly(run, event, f"barrier {event.barrier}: no {of} {name} to continue")
        return
    if event.first != len(held):
        anomaly(run, event, f"barrier {event.barrier}: {of} {name} continues from "
                            f"{event.first}, not {len(held)}")
    held.extend(items)


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
    "list.continued": _continued,
    "checkpoint.saved": _checkpoint_saved,
    "checkpoint.failed": _checkpoint_failed,
}
