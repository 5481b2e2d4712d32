"""A stopped turn's canonical state is what the session store holds, in both folds.

Nothing is saved after a turn's cancel token fires, so ``turn.cancelled`` puts the
canonical state back to the state as of the last ``session.saved`` (or ``session.loaded``)
and keeps what the events published in memory since then apart, as ``unsaved``; a branch
whose publication reached only memory says so. The browser's fold must agree.
"""

from __future__ import annotations

from typing import Any

from runtime import events as ev
from runtime.events import comparable, fold, publication_of, read_jsonl
from tests.contract.node_fold import first_difference, node_exports, python_export
from tests.golden.export_fold import GOLDEN_DIR


def _trace() -> list[ev.Event]:
    """A turn that saves ``Desk.topic``, then publishes a root join and writes
    ``Desk.done`` and removes ``Desk.old`` in memory, and is stopped."""
    items: list[dict[str, Any]] = []

    def add(type_: str, path: str = "", **fields: Any) -> None:
        items.append({"v": 1, "run_id": "r1", "session_id": "s1", "seq": len(items),
                      "time": 0.0, "offset": len(items) / 10, "path": path, "type": type_,
                      **fields})

    add("turn.started", flow="F", message="go")
    add("session.loaded", new_session=False, revision=4, current_step="Desk",
        steps={"Desk": {"old": 1}}, context={}, tokens={})
    add("state.replaced", step="Desk", field="topic", value="tides", base=None, draft=False)
    add("session.saved", revision=5, reason="crossing")
    add("barrier.forked", barrier="b0", caller_step="Desk", policy="retain-successes",
        checkpoint="none", max_concurrency=None, branch_timeout=None, token_budget=None,
        base="canonical", requests=[{"index": 0, "path": "0", "step": "W", "key": "a",
                                     "params": {}, "user_message": None}])
    add("branch.started", "0", barrier="b0", index=0, key="a", step="W")
    add("state.replaced", "0", step="W", field="notes", value=["a"], base=None, draft=True)
    add("branch.fulfilled", "0", barrier="b0", index=0, key="a", output="ok")
    add("join.published", barrier="b0", target="canonical", discarded=[], fields=[
        {"step": "W", "field": "notes", "value": ["a"], "deleted": False, "writer": "0"}])
    add("state.replaced", step="Desk", field="done", value=True, base=None, draft=False)
    add("state.removed", step="Desk", field="old", base=None, draft=False)
    add("turn.cancelled", reason="Stop", requested_by="ada", revision=5)
    return [ev.parse_event(item) for item in items]


def test_a_stopped_turn_keeps_the_saved_state_and_lists_what_memory_had() -> None:
    events = _trace()
    run = fold(events)
    assert run.state == {"Desk": {"old": 1, "topic": "tides"}}  # revision 5, as stored
    assert run.unsaved == [
        {"step": "Desk", "field": "done", "value": True, "deleted": False},
        {"step": "Desk", "field": "old", "value": None, "deleted": True},
        {"step": "W", "field": "notes", "value": ["a"], "deleted": False}]
    found = publication_of(run, "0")
    assert found is not None and found.state == "published"
    assert found.text == "Published in memory, not saved: the turn was stopped."
    # Before the stop, memory is what the turn's final save would have written.
    before = fold(events, events[-2].seq)
    assert before.state == {"Desk": {"topic": "tides", "done": True}, "W": {"notes": ["a"]}}
    assert before.unsaved == []


def test_the_browser_fold_keeps_the_same_state_and_unsaved_fields() -> None:
    events = _trace()
    python, stops = python_export(events)
    (node,) = node_exports([(events, stops)])
    assert "unsaved" in python
    assert first_difference(python, node) is None


def test_the_stopped_a_b_turn_shows_revision_one_and_keeps_a_s_chain_apart() -> None:
    # The case: TimingFlow "pipelined" stopped once A's chain was done. The
    # session stays at revision 1 (no step state); A1 and A2 were only ever in memory.
    events = read_jsonl(GOLDEN_DIR / "stopped_turn.jsonl")
    run = fold(events)
    assert run.cancellation is not None and run.cancellation["revision"] == 1
    assert comparable(run.state) == {}
    unsaved = {(u["step"], u["field"]): u["value"] for u in run.unsaved}
    assert unsaved[("Stage", "outputs")] == {"A1": "A1 done", "A2": "A2 done"}
    found = publication_of(run, "0.0")
    assert found is not None
    assert found.text == "Published in memory, not saved: the turn was stopped."


def test_obeying_branches_end_after_the_request_in_the_obeyed_cancel_golden() -> None:
    events = read_jsonl(GOLDEN_DIR / "obeyed_cancel.jsonl")
    order = [(e.type, e.path) for e in events if e.type in (
        "cancel.requested", "branch.fulfilled", "branch.rejected")]
    assert order == [("cancel.requested", ""), ("branch.fulfilled", "0"),
                     ("branch.fulfilled", "1"), ("branch.rejected", "2"),
                     ("branch.rejected", "3")]
    rejected = [e for e in events if isinstance(e, ev.BranchRejected)]
    assert [(e.cancelled, e.started) for e in rejected] == [(True, True), (True, False)]
