"""A barrier's fork and its cancellation: ``barrier.forked``, ``barrier.requested`` and
``cancel.*``.

A fork announces its branches (their invocations start ``queued``; a wide fork's later
pages of requests, ``barrier.requested``, announce the rest) and, when its base is
the canonical state, keeps that state as of the fork for its branches' views. A fork that
reuses a barrier id or an invocation path, comes from an invocation no fork announced, or
whose base is not its caller is an anomaly (applied as far as it can be); so is a
``cancel.*`` or a page of requests naming a barrier no fork announced, and a page that
does not follow the requests announced so far.
"""

from __future__ import annotations

import copy

from .. import schema as ev
from .model import Barrier, Handlers, Invocation, RunModel, anomaly, barrier_of


def _forked(run: RunModel, event: ev.BarrierForked, inv: Invocation | None) -> None:
    if event.barrier in run.barriers:
        anomaly(run, event, f"barrier {event.barrier} forked again")
    if inv is None:
        anomaly(run, event, f"fork from unknown invocation {event.path}")
    expected = event.path or "canonical"
    if event.base != expected:
        anomaly(run, event, f"barrier {event.barrier} has base {event.base}, not {expected}")
    run.barriers[event.barrier] = Barrier(
        id=event.barrier, caller=event.path, caller_step=event.caller_step,
        policy=event.policy, checkpoint=event.checkpoint, base=event.base,
        forked_seq=event.seq, forked_at=event.offset,
        branches=[r.path for r in event.requests],
        base_state=copy.deepcopy(run.state) if event.base == "canonical" else None,
    )
    if inv is not None:
        inv.barriers.append(event.barrier)
    _announce(run, event, event.barrier, event.requests)


def _announce(run: RunModel, event: ev.Event, barrier: str,
              requests: list[ev.BranchRequest]) -> None:
    for request in requests:
        if request.path in run.invocations:
            anomaly(run, event, f"barrier {barrier} reuses path {request.path}")
        run.invocations[request.path] = Invocation(
            path=request.path, step=request.step, key=request.key,
            index=request.index, barrier=barrier)


def _requested(run: RunModel, event: ev.BarrierRequested, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is None:
        return
    if event.first != len(barrier.branches):
        anomaly(run, event, f"barrier {event.barrier} requests from {event.first}, not "
                            f"{len(barrier.branches)}")
    barrier.branches.extend(r.path for r in event.requests)
    _announce(run, event, event.barrier, event.requests)


def _cancel_requested(run: RunModel, event: ev.CancelRequested, inv: Invocation | None) -> None:
    if (barrier := barrier_of(run, event, event.barrier)) is not None:
        barrier.cancel_reason = event.reason


def _cancel_propagated(run: RunModel, event: ev.CancelPropagated,
                       inv: Invocation | None) -> None:
    barrier_of(run, event, event.barrier)


def _grace_expired(run: RunModel, event: ev.CancelGraceExpired, inv: Invocation | None) -> None:
    if barrier_of(run, event, event.barrier) is not None:
        for closed in event.closed:
            if (late := run.invocations.get(closed)) is not None:
                late.lost_rights = True


HANDLERS: Handlers = {
    "barrier.forked": _forked,
    "barrier.requested": _requested,
    "cancel.requested": _cancel_requested,
    "cancel.propagated": _cancel_propagated,
    "cancel.grace_expired": _grace_expired,
}
