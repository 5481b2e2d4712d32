"""The fold's publication: what became of each branch's writes, from the join records.

The browser derives the same (``publicationOf`` in ``fold.js``); the golden exports and
the generated runs of ``test_fold_properties`` compare the two. These tests pin what the
real runtime's events let the fold tell apart.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from runtime.events import (
    barrier_publication_of,
    fold,
    parse_event,
    publication_of,
    read_jsonl,
    runs_of,
)
from tests.contract.node_fold import first_difference, node_exports, python_export
from tests.contract.test_fold_properties import ATOMIC_FAILURE, SEED_B_FAILS, run_program
from tests.golden.export_fold import GOLDEN_DIR


def _fates(run: Any) -> dict[str, tuple[str, str | None]]:
    return {path: (found.state, found.reason) for path in run.invocations
            if (found := publication_of(run, path)) is not None}


def test_an_atomic_batch_with_a_failure_published_nothing_and_says_why() -> None:
    run = fold(read_jsonl(GOLDEN_DIR / "atomic_failure.jsonl"))
    b0 = barrier_publication_of(run, "b0")
    assert b0 is not None
    assert (b0["state"], b0["counts"]["published"], b0["counts"]["discarded"]) == (
        "nothing", 0, 3)
    assert "atomic policy discarded every branch" in b0["text"]
    assert _fates(run) == {"0": ("discarded", "atomic"), "1": ("discarded", "atomic"),
                           "2": ("discarded", "rejected")}
    hotel = publication_of(run, "1")
    assert hotel is not None and "branch 2 (car) was rejected" in hotel.text


def test_a_caller_that_fails_after_its_inner_join_discards_its_descendants(
    anyio_backend: str,
) -> None:
    events, _ = anyio.run(run_program, SEED_B_FAILS, backend=anyio_backend)
    run = fold(events)
    assert _fates(run) == {"0": ("discarded", "rejected"), "1": ("published", None),
                           "0.0": ("discarded", "caller"), "0.1": ("discarded", "caller")}
    inner = publication_of(run, "0.0")
    assert inner is not None and "failed after this join" in inner.text
    found = barrier_publication_of(run, "0/b0")
    assert found is not None and (found["state"], found["reason"]) == ("discarded", "caller")


def test_a_nested_atomic_failure_does_not_take_its_caller_down(anyio_backend: str) -> None:
    events, _ = anyio.run(run_program, ATOMIC_FAILURE, backend=anyio_backend)
    run = fold(events)
    assert _fates(run) == {"0": ("discarded", "atomic"), "1": ("discarded", "rejected"),
                           "1:0": ("published", None), "1:0.0": ("discarded", "atomic"),
                           "1:0.1": ("discarded", "rejected")}


def test_every_discard_reason_the_goldens_carry() -> None:
    seen: set[str | None] = set()
    for path in sorted(GOLDEN_DIR.glob("*.jsonl")):
        for events in runs_of(read_jsonl(path)).values():
            seen |= {reason for state, reason in _fates(fold(events)).values()
                     if state == "discarded"}
    assert {"rejected", "cancelled", "late", "atomic", "invalidated", "rollback",
            "not-joined"} <= seen, seen


def test_a_branch_the_token_budget_stopped_says_so_in_both_folds() -> None:
    lines = (GOLDEN_DIR / "cancellation.jsonl").read_text("utf-8").splitlines()
    data = [json.loads(line) for line in lines if line.strip()]
    for item in data:  # the queued branch 2 was stopped by a spent budget, not a cancel
        if item["type"] == "branch.rejected" and item["path"] == "2":
            item["error"]["type"] = "BranchBudgetError"
    events = [parse_event(item) for item in data]
    found = publication_of(fold(events), "2")
    assert found is not None and (found.state, found.reason) == ("discarded", "cancelled")
    assert "token budget ran out" in found.text
    expected, stops = python_export(events)
    (got,) = node_exports([(events, stops)])
    assert got == expected, first_difference(expected, got)
