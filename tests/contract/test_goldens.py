"""The committed golden traces are valid, reproducible, and fold to what the runtime did.

Each golden (``tests/golden/<name>.jsonl`` and ``.txt``, written by
``tests/golden/regenerate.py``) is checked three ways: every line validates strictly; a
fresh recording of the same definition gives the same normalised dump; and folding the
committed events gives exactly the state the runtime published — canonically after each
turn, and as each branch saw it when it finished. The browser's fold is checked against
the same files, so the two folds cannot drift apart.

An interrupted turn (its executor died mid-run; the recording appended ``run.interrupted``)
published nothing at the end: its session document is the last one saved before the cut,
so its final state is not compared, but every other check holds. A stopped turn (its cancel
token fired; it ended with ``turn.cancelled``) saved nothing after the stop either: its
document is the state as of its last ``session.saved``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any, get_args

import anyio
import pytest

from runtime import MemorySessionStore, SessionDocument
from runtime import events as ev
from runtime.events import comparable, dump_event, fold, read_jsonl, runs_of, view_at
from tests.golden.goldens import (
    BY_NAME,
    GOLDENS,
    INTERRUPTION_REASON,
    REMOTE_TIMEOUT,
    Golden,
    Recorded,
    dump_text,
    record,
)

pytestmark = pytest.mark.anyio

NAMES = [golden.name for golden in GOLDENS]
WITH_BRANCHES = [name for name in NAMES if name not in ("hotel", "turn_failure")]
REGENERATE = ".venv/bin/python tests/golden/regenerate.py"

_RECORDINGS: dict[str, Recorded] = {}


@pytest.fixture
def anyio_backend() -> str:
    """Goldens record asyncio's order of concurrent events: re-run them on asyncio only."""
    return "asyncio"


async def rerun(golden: Golden) -> Recorded:
    """A fresh recording of ``golden``, made once per test session."""
    if golden.name not in _RECORDINGS:
        recorded = await record(golden)
        if dump_text(recorded.events) != golden.txt_path.read_text("utf-8"):
            # The order of concurrent events is timed (GOLDEN_LATENCY): a stall of the
            # machine longer than the margins can reorder a recording, so a mismatch is
            # recorded once more before it is believed (a real change mismatches twice).
            recorded = await record(golden)
        _RECORDINGS[golden.name] = recorded
    return _RECORDINGS[golden.name]


def committed(golden: Golden) -> dict[str, list[ev.Event]]:
    """The committed events of ``golden``, by run id."""
    return runs_of(read_jsonl(golden.jsonl_path))


def user_state(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """State as events can tell it: no framework fields, no steps left empty by that.

    A session document lists a step with a model override even when its state is empty;
    the fold only knows steps that have state.
    """
    return {step: fields for step, fields in comparable(state).items() if fields}


@pytest.mark.parametrize("name", NAMES)
def test_every_committed_line_validates_strictly_and_round_trips(name: str) -> None:
    golden = BY_NAME[name]
    lines = golden.jsonl_path.read_text("utf-8").splitlines()
    parsed = [ev.parse_event(line) for line in lines]
    assert [dump_event(event) for event in parsed] == lines
    assert [dump_event(event) for event in read_jsonl(golden.jsonl_path)] == lines
    assert list(committed(golden)) == [golden.run_id(i) for i in range(1, len(golden.turns) + 1)]
    assert {event.session_id for event in parsed} == {golden.session_id}


@pytest.mark.parametrize("name", NAMES)
async def test_a_fresh_recording_reproduces_the_committed_dump(name: str) -> None:
    golden = BY_NAME[name]
    recorded = await rerun(golden)
    assert [None if reply is None else reply.success for reply in recorded.replies] == [
        None if turn in golden.interrupted else
        turn not in golden.fails and turn not in golden.stops
        for turn in range(1, len(golden.turns) + 1)], [
        reply and reply.message for reply in recorded.replies]
    assert {turn for turn, reply in enumerate(recorded.replies, 1)
            if reply is not None and reply.error_code == "turn_cancelled"} == set(golden.stops)
    expected = golden.txt_path.read_text("utf-8")
    actual = dump_text(recorded.events)
    diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                        f"committed {golden.txt_path.name}", "fresh run", n=1))
    assert actual == expected, f"regenerate with `{REGENERATE} {name}` if intended:\n{diff}"


@pytest.mark.parametrize("name", NAMES)
async def test_folding_the_committed_events_gives_the_saved_state_of_every_turn(
    name: str,
) -> None:
    golden = BY_NAME[name]
    recorded = await rerun(golden)
    runs = list(committed(golden).values())
    assert len(runs) == len(recorded.docs)
    for events, doc, reply in zip(runs, recorded.docs, recorded.replies, strict=True):
        run = fold(events)
        saved = {record.name: record.state for record in doc.flow.steps}
        assert run.anomalies == []
        assert run.cursor == doc.flow.current_step
        if reply is None:  # interrupted: the document is the last one saved before the cut
            assert (run.status, run.reply, run.error) == ("interrupted", None, None)
            last_save = [e for e in events if isinstance(e, ev.SessionSaved)][-1]
            assert (doc.revision, doc.run_status) == (last_save.revision, "running")
            continue
        if reply.error_code == "turn_cancelled":  # stopped: nothing saved after the stop
            cancelled = events[-1]
            assert isinstance(cancelled, ev.TurnCancelled)
            assert (run.status, run.reply, run.error) == ("cancelled", None, None)
            assert reply.message == f"Stopped: {cancelled.reason}"
            last_save = [e for e in events if isinstance(e, ev.SessionSaved)][-1]
            assert doc.revision == last_save.revision == cancelled.revision
            assert doc.run_status == "running"
            assert user_state(fold(events, last_save.seq).state) == user_state(saved)
            continue
        assert user_state(run.state) == user_state(saved), events[0].run_id
        if reply.success:
            assert run.status == "finished"
            assert run.reply is not None and run.reply["message"] == reply.message
        else:  # the turn failed: the fold says how, as the reply does
            assert (run.status, run.reply) == ("failed", None)
            assert run.error is not None and run.error["code"] == reply.error_code
            assert doc.run_status == "aborted"
        assert run.tokens["total_tokens"] == doc.tokens.total_tokens


@pytest.mark.parametrize("name", WITH_BRANCHES)
async def test_every_branch_view_folds_to_what_the_branch_saw(name: str) -> None:
    golden = BY_NAME[name]
    recorded = await rerun(golden)
    runs = committed(golden)
    fulfilled = {(e.run_id, e.path): e.seq for events in runs.values() for e in events
                 if isinstance(e, ev.BranchFulfilled)}
    # The demos report every successful branch, and only those.
    assert sorted((v.run_id, v.path) for v in recorded.views) == sorted(fulfilled)
    folded = {run_id: fold(events) for run_id, events in runs.items()}
    for view in recorded.views:
        seen = view_at(folded[view.run_id], view.path, fulfilled[(view.run_id, view.path)])
        assert user_state(seen["state"]) == user_state(view.state), (view.run_id, view.path)


def _events(name: str, kind: type[Any]) -> list[Any]:
    return [e for events in committed(BY_NAME[name]).values() for e in events
            if isinstance(e, kind)]


def test_nested_fanout_reduces_in_request_path_order_not_completion_order() -> None:
    outer = next(e for e in _events("nested_fanout", ev.JoinReduced)
                 if e.barrier == "b0" and e.field == "sources")
    assert [item["path"] for item in outer.inputs] == ["0.0", "0.1", "1"]
    assert outer.completion_order == ["1", "0"]  # the archive finder beat the planner
    run = fold(next(iter(committed(BY_NAME["nested_fanout"]).values())))
    assert run.barriers["0/b0"].base == "0"
    # D and E inherit the planner's plan; C, forked beside the planner, cannot see it.
    plan = run.state["Planner"]["plan"]
    for path in ("0.0", "0.1"):
        assert view_at(run, path)["state"]["Planner"]["plan"] == plan
    assert "Planner" not in view_at(run, "1")["state"]
    assert [e.tool for e in _events("nested_fanout", ev.BranchDirectResult)] == ["plan_queries"]


def test_conflict_is_invalidated_with_the_provenance_of_both_writers() -> None:
    (invalid,) = _events("conflict", ev.JoinInvalidated)
    assert invalid.error.code == "parallel_state_conflict"
    assert [(p["key"], p["kind"], p["field"]) for p in invalid.provenance] == [
        ("north", "replace", "venue"), ("south", "replace", "venue")]
    assert not _events("conflict", ev.JoinPublished)
    (events,) = committed(BY_NAME["conflict"]).values()
    assert "VenueScout" not in fold(events).state


def test_atomic_failure_publishes_nothing_and_discards_every_branch() -> None:
    (published,) = _events("atomic_failure", ev.JoinPublished)
    assert published.fields == []
    assert sorted(d["key"] for d in published.discarded) == ["car", "flight", "hotel"]
    (rejected,) = _events("atomic_failure", ev.BranchRejected)
    assert (rejected.key, rejected.cancelled) == ("car", False)


def test_cancellation_tells_running_branches_and_never_starts_queued_ones() -> None:
    (told,) = _events("cancellation", ev.CancelPropagated)
    assert (told.running, told.queued) == (["0", "1"], ["2", "3"])
    (expired,) = _events("cancellation", ev.CancelGraceExpired)
    assert expired.closed == ["1"]
    rejected = {e.key: (e.cancelled, e.started) for e in _events("cancellation",
                                                                 ev.BranchRejected)}
    assert rejected == {"legacy": (True, True), "south": (True, False), "east": (True, False)}
    assert {e.key for e in _events("cancellation", ev.BranchStarted)} == {"north", "legacy"}


def test_ab_timing_pipelines_workers_but_batches_wait_for_the_slowest() -> None:
    first, second = committed(BY_NAME["ab_timing"]).values()
    keys = [[e.key for e in events if isinstance(e, ev.BranchFulfilled) and e.key[1:].isdigit()]
            for events in (first, second)]
    assert keys == [["A1", "A2", "B1", "B2"], ["A1", "B1", "A2", "B2"]]
    offsets = {(e.run_id, e.key): e.offset for events in (first, second) for e in events
               if isinstance(e, ev.BranchFulfilled)}
    # Pipelined, worker A is done long before B1 (10 units); batched, A2 waits for B1.
    assert offsets[("ab_timing-1", "A")] < offsets[("ab_timing-1", "B1")]
    assert offsets[("ab_timing-2", "A2")] > offsets[("ab_timing-2", "B1")]


def test_the_hotel_golden_books_and_completes_the_session() -> None:
    runs = list(committed(BY_NAME["hotel"]).values())
    assert len(runs) == 14
    last = fold(runs[-1])
    assert last.reply is not None and last.reply["completed"] is True
    assert last.state["PresentStep"]["hotel"]["hotelName"] == "Eastbank Esplanade Hotel"
    assert json.loads(last.state["ExploreStep"]["json"])["roomType"] == ["two beds"]


def test_an_interrupted_turn_ends_with_run_interrupted_and_its_branches_still_running() -> None:
    golden = BY_NAME["interrupted"]
    (events,) = committed(golden).values()
    *_, last, interrupted = events
    assert isinstance(interrupted, ev.RunInterrupted)
    # What a dashboard records after the silence, from the last event it stored.
    assert interrupted == ev.interruption(last.model_dump(mode="json"),
                                          now=last.time + REMOTE_TIMEOUT,
                                          silent_for=REMOTE_TIMEOUT, reason=INTERRUPTION_REASON)
    assert (interrupted.seq, interrupted.path, interrupted.silent_for) == (
        last.seq + 1, "", REMOTE_TIMEOUT)
    # The executor died: nothing ended the turn, no branch was rejected, no join ran.
    kinds = {e.type for e in events}
    assert not kinds & {"turn.finished", "turn.failed", "branch.rejected", "join.reduced",
                        "join.published", "join.invalidated"}
    run = fold(events)
    assert (run.status, run.reply, run.error) == ("interrupted", None, None)
    assert run.interruption == {"seq": interrupted.seq, "reason": INTERRUPTION_REASON,
                                "silent_for": REMOTE_TIMEOUT}
    assert {path: (inv.status, inv.interrupted) for path, inv in run.invocations.items()
            if path} == {
        "0": ("running", True),  # the planner, waiting for its finders
        "1": ("running", True),  # the archive finder, beside it
        "0.0": ("fulfilled", False),  # the papers finder reported before the cut
        "0.1": ("running", True),  # the news finder, whose model call the process died in
    }
    assert {bid: (b.outcome, b.interrupted) for bid, b in run.barriers.items()} == {
        "b0": ("open", True), "0/b0": ("open", True)}
    # Up to the cut the fold is the one of a run still running.
    cut = fold(events, last.seq)
    assert (cut.status, cut.interruption) == ("running", None)
    assert not any(inv.interrupted for inv in cut.invocations.values())
    assert cut.state == run.state == {"ResearchDesk": {"topic": "tide pools"}}


class _SlowCheckpoints(MemorySessionStore):
    """A store whose checkpoint saves take three time units, as on a loaded machine."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        if expected_revision == 1:  # the catalogue's checkpoint (revision 2)
            await anyio.sleep(self.seconds)
        return await super().save(doc, expected_revision)


async def test_a_stop_is_timed_from_the_run_so_a_slow_start_does_not_move_it() -> None:
    # Timed from the turn's start, a catalogue three units late moved the Stop before the
    # east wing's first box was scanned, and the recording no longer matched its golden.
    golden = BY_NAME["cancelled"]
    slow = dataclasses.replace(golden, store=lambda: _SlowCheckpoints(3 * golden.latency))
    recorded = await record(slow)
    assert dump_text(recorded.events) == golden.txt_path.read_text("utf-8")


def test_a_stopped_turn_keeps_its_checkpoint_and_the_session_goes_on() -> None:
    golden = BY_NAME["cancelled"]
    stopped, resumed = committed(golden).values()
    stop = golden.stops[1]
    cancelled = stopped[-1]
    assert isinstance(cancelled, ev.TurnCancelled)
    assert (cancelled.reason, cancelled.requested_by) == (stop.reason, stop.by)
    assert not {e.type for e in stopped} & {"turn.finished", "turn.failed", "run.interrupted"}
    # Every barrier was told, running scanners returned, queued ones never started.
    told = {e.barrier: (e.running, e.queued) for e in stopped
            if isinstance(e, ev.CancelPropagated)}
    assert told == {"b1": (["1:0", "1:1"], []), "1:0/b0": (["1:0.1"], ["1:0.2"]),
                    "1:1/b0": (["1:1.0"], ["1:1.1", "1:1.2"])}
    never = {e.key for e in stopped if isinstance(e, ev.BranchRejected)}
    assert never == {"east-3", "west-2", "west-3"}
    assert never.isdisjoint(e.key for e in stopped if isinstance(e, ev.BranchStarted))
    (checkpoint,) = [e for e in stopped if isinstance(e, ev.CheckpointSaved)]
    saves = [e for e in stopped if isinstance(e, ev.SessionSaved)]
    assert saves[-1].seq < stopped.index(next(e for e in stopped
                                              if isinstance(e, ev.CancelRequested)))
    assert cancelled.revision == checkpoint.revision == saves[-1].revision
    run = fold(stopped)
    assert run.cancellation == {"seq": cancelled.seq, "reason": stop.reason,
                                "requested_by": stop.by, "revision": checkpoint.revision}
    # Published by the stopped barrier in memory, never saved: not canonical, but unsaved.
    assert "Scanner" not in run.state
    assert user_state(run.state) == user_state(fold(stopped, saves[-1].seq).state)
    assert [(u["step"], u["field"]) for u in run.unsaved] == [
        ("Archivist", "catalogued_at"), ("Archivist", "wings"), ("Archivist", "stopped"),
        ("Scanner", "pages")]
    # The next turn starts from the checkpoint: the catalogue, no scans.
    loaded = next(e for e in resumed if isinstance(e, ev.SessionLoaded))
    assert loaded.revision == checkpoint.revision  # as stored: loading saves nothing
    assert comparable(loaded.steps) == {"Cataloguer": {"catalogued": ["maps", "letters"]}}
    assert resumed[-1].type == "turn.finished"


def test_every_event_type_appears_in_a_golden() -> None:
    """Each member of the ``Event`` union is in at least one committed golden trace, so
    both folds and the dump are checked on it."""
    union = [cls.model_fields["type"].default for cls in get_args(get_args(ev.Event)[0])]
    assert sorted(union) == sorted(ev.EVENT_TYPES)
    seen = {e.type for golden in GOLDENS for events in committed(golden).values()
            for e in events}
    missing = [kind for kind in union if kind not in seen]
    assert not missing, f"event types without a golden: {', '.join(missing)}"


def test_checkpoints_save_then_roll_back_and_removals_publish() -> None:
    (saved,) = _events("checkpoints", ev.CheckpointSaved)
    (failed,) = _events("checkpoints", ev.CheckpointFailed)
    assert (saved.barrier, saved.revision, failed.barrier) == ("b0", 2, "b1")
    assert failed.error.code == "parallel_checkpoint"
    assert {(e.step, e.field, e.draft) for e in _events("checkpoints", ev.StateRemoved)} == {
        ("CatalogueDesk", "scratch", False), ("Pruner", "stale", True)}
    (published, rolled_back) = _events("checkpoints", ev.JoinPublished)
    assert [(f.field, f.deleted) for f in published.fields if f.step == "Pruner"] == [
        ("stale", True), ("pruned", False)]
    (retried,) = _events("checkpoints", ev.ModelFailed)
    assert (retried.attempt, retried.retrying, retried.error.code) == (1, True,
                                                                       "model_transport")
    (events,) = committed(BY_NAME["checkpoints"]).values()
    run = fold(events)
    assert (run.barriers["b0"].checkpoint_revision, run.barriers["b1"].outcome) == (
        2, "invalidated")
    assert run.conflicts == ["b1"]
    # The failed checkpoint rolled the us prices back; the eu ones and the pruning stay.
    assert run.state["Pricer"] == {"prices": {"eu": "eu: 12.40 EUR"}}
    assert run.state["Pruner"] == {"pruned": True}
    assert "scratch" not in run.state["CatalogueDesk"]
    assert fold(events, rolled_back.seq).state["Pricer"]["prices"] == {
        "eu": "eu: 12.40 EUR", "us": "us: 13.10 USD"}


def test_a_turn_whose_model_is_down_fails_after_its_attempts() -> None:
    failures = _events("turn_failure", ev.ModelFailed)
    assert [(e.attempt, e.retrying) for e in failures] == [(1, True), (2, True), (3, False)]
    (events,) = committed(BY_NAME["turn_failure"]).values()
    assert events[-1].type == "turn.failed"
    run = fold(events)
    assert run.status == "failed"
    assert run.error is not None and run.error["code"] == "model_call_failed"


def test_a_bounded_sink_that_overflows_and_a_broken_sink_are_in_the_stream() -> None:
    reports = [(e.sink, e.first_seq, e.last_seq, e.dropped)
               for e in _events("sink_overflow", ev.SinkOverflowed)]
    assert reports == [
        ("audit (BrokenSinkError('the audit log is full'))", 9, 9, 1),
        ("dashboard", 6, 21, 16),
        ("dashboard", 28, 38, 11),
    ]
    (events,) = committed(BY_NAME["sink_overflow"]).values()
    run = fold(events)
    assert [(o.sink, o.first, o.last) for o in run.overflows] == [r[:3] for r in reports]
    assert run.state["Stocktake"] == {"total": 27}
