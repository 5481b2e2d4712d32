"""A branch's life: started, then fulfilled or rejected, and a direct result it returned;
or, in a resumed turn, reused from the ledger (fulfilled at once, marked ``reused``).

A branch event for a path no fork announced is an anomaly (``branch.direct_result`` for
one is ignored: it changes nothing a view reads).
"""

from __future__ import annotations

from .. import schema as ev
from .model import Handlers, Invocation, RunModel, anomaly


def _unknown(run: RunModel, event: ev.Event) -> None:
    anomaly(run, event, f"unknown branch {event.path}")


def _started(run: RunModel, event: ev.BranchStarted, inv: Invocation | None) -> None:
    if inv is None:
        _unknown(run, event)
        return
    inv.status, inv.started = "running", event.offset


def _fulfilled(run: RunModel, event: ev.BranchFulfilled, inv: Invocation | None) -> None:
    if inv is None:
        _unknown(run, event)
        return
    inv.status, inv.finished, inv.output = "fulfilled", event.offset, event.output


def _rejected(run: RunModel, event: ev.BranchRejected, inv: Invocation | None) -> None:
    if inv is None:
        _unknown(run, event)
        return
    inv.status, inv.finished = "rejected", event.offset
    inv.error, inv.cancelled = event.error.model_dump(), event.cancelled


def _reused(run: RunModel, event: ev.BranchReused, inv: Invocation | None) -> None:
    if inv is None:
        _unknown(run, event)
        return
    inv.status, inv.started, inv.finished = "fulfilled", event.offset, event.offset
    inv.output = event.output
    inv.reused = {"run_id": event.original_run_id, "seq": event.original_seq,
                  "tokens": event.total_tokens}
    # Spent once, where it ran: the session counts them, and so does the run's total.
    run.tokens = {k: run.tokens.get(k, 0) + n for k, n in (
        ("input_tokens", event.input_tokens), ("output_tokens", event.output_tokens),
        ("total_tokens", event.total_tokens))}


def _direct_result(run: RunModel, event: ev.BranchDirectResult, inv: Invocation | None) -> None:
    if inv is not None:
        inv.output = event.value


HANDLERS: Handlers = {
    "branch.started": _started,
    "branch.fulfilled": _fulfilled,
    "branch.rejected": _rejected,
    "branch.reused": _reused,
    "branch.direct_result": _direct_result,
}
