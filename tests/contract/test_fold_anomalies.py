"""Bad input: both folds record the same anomalies and never raise.

The traces are ``tests/js/bad_traces.json``, written by ``tests/contract/bad_traces.py``
(which says what each one is). Here the Python fold folds them; the same file is folded by
the browser's fold in ``tests/js/fold_anomalies.test.mjs``, and both folds' exports of
every trace are compared through node.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime import events as ev
from tests.contract.bad_traces import OUT, bad_traces, dumps
from tests.contract.node_fold import first_difference, node_exports, python_export

TRACES: dict[str, dict[str, Any]] = json.loads(OUT.read_text("utf-8"))
REGENERATE = ".venv/bin/python tests/contract/bad_traces.py"


def events_of(name: str) -> list[ev.Event]:
    return [ev.parse_event(data) for data in TRACES[name]["events"]]


def anomalies(run: ev.RunModel) -> list[dict[str, Any]]:
    return [{"seq": a.seq, "message": a.message} for a in run.anomalies]


def test_the_committed_bad_traces_are_current() -> None:
    assert OUT.read_text("utf-8") == dumps(bad_traces()), f"stale: run `{REGENERATE}`"


@pytest.mark.parametrize("name", list(TRACES))
def test_the_fold_records_the_anomalies_and_does_not_raise(name: str) -> None:
    events = events_of(name)
    run = ev.fold(events)
    assert anomalies(run) == TRACES[name]["anomalies"]
    assert run.status == TRACES[name].get("status", "finished")
    for path in run.invocations:
        ev.view_at(run, path)  # every view can be read, whatever the events said
    for seq in range(-1, events[-1].seq + 2):
        ev.fold(events, seq)


@pytest.mark.parametrize("name", list(TRACES))
def test_folding_event_by_event_equals_folding_at_once(name: str) -> None:
    events = events_of(name)
    run = ev.new_run()
    applied = [ev.apply_event(run, event) for event in events]
    assert run == ev.fold(events)
    newest = [-1]
    for event in events:
        newest.append(max(newest[-1], event.seq))
    assert applied == [e.seq > before for e, before in zip(events, newest, strict=False)]


def test_a_resent_or_late_event_is_ignored() -> None:
    run = ev.fold(events_of("sequence"))
    assert run.state["W"] == {"x": 2}
    assert ev.view_at(run, "0")["state"]["W"] == {"x": 2}
    assert [c[3] for c in run.invocations["0"].drafts] == [1, 2]


def test_an_unknown_base_reads_as_empty() -> None:
    run = ev.fold(events_of("unknown-invocation"))
    assert ev.view_at(run, "7.0")["state"] == {"W": {"z": 3}}
    assert run.invocations["7.0"].status == "fulfilled"
    assert "7" not in run.invocations
    cycle = ev.fold(events_of("fork-rules"))
    assert ev.view_at(cycle, "0")["state"] == {"W": {"x": 1}}


def test_nothing_after_run_interrupted_is_applied() -> None:
    events = events_of("after-interruption")
    run = ev.fold(events)
    assert (run.status, run.reply) == ("interrupted", None)
    assert run.interruption == {"seq": 6, "reason": "no events or heartbeats for 30 s",
                                "silent_for": 30.0}
    assert run.last_seq == 12
    assert (run.invocations["1"].status, run.invocations["1"].interrupted) == ("running", True)
    assert (run.invocations["0"].status, run.invocations["0"].interrupted) == (
        "fulfilled", False)
    assert run.invocations["1"].drafts == [] and run.invocations["1"].output is None
    assert (run.barriers["b0"].outcome, run.barriers["b0"].interrupted) == ("open", True)
    assert run.state == {"Top": {"a": 1}}
    at_interruption = ev.fold(events, 6)
    assert at_interruption.anomalies == []
    assert (at_interruption.invocations, at_interruption.barriers) == (run.invocations,
                                                                       run.barriers)
    ended = ev.fold(events_of("interrupted-after-the-end"))
    assert (ended.status, ended.interruption) == ("finished", None)


def test_real_runs_record_no_anomalies() -> None:
    from tests.golden.goldens import GOLDENS

    for golden in GOLDENS:
        for run_id, events in ev.runs_of(ev.read_jsonl(golden.jsonl_path)).items():
            assert ev.fold(events).anomalies == [], run_id


def test_a_fold_without_drafts_keeps_the_same_canonical_state_and_reduces_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The dashboard's record of a remote session reads the canonical state alone; a fold
    # that kept drafts would hold k growing copies of a list one branch appends to k times.
    import importlib

    from tests.golden.goldens import GOLDENS

    # The module whose reduce_one the fold calls, by its import name.
    fold_module = importlib.import_module("runtime.events.fold.reduce")
    whole = {run_id: ev.fold(events) for golden in GOLDENS
             for run_id, events in ev.runs_of(ev.read_jsonl(golden.jsonl_path)).items()}
    assert any(inv.changes for run in whole.values() for inv in run.invocations.values())

    def no_reducing(*args: Any) -> Any:
        raise AssertionError("a fold without drafts reduced a contribution")

    monkeypatch.setattr(fold_module, "reduce_one", no_reducing)
    for golden in GOLDENS:
        for run_id, events in ev.runs_of(ev.read_jsonl(golden.jsonl_path)).items():
            lean, full = ev.fold(events, drafts=False), whole[run_id]
            assert (lean.state, lean.cursor, lean.tokens, lean.status, lean.reply) == (
                full.state, full.cursor, full.tokens, full.status, full.reply), run_id
            assert [inv.status for inv in lean.invocations.values()] == \
                [inv.status for inv in full.invocations.values()]
            assert all(not inv.changes and not inv.drafts
                       for inv in lean.invocations.values())
            if len(lean.invocations) > 1:
                with pytest.raises(ValueError, match="drafts=False"):
                    ev.view_at(lean, next(p for p in lean.invocations if p))


def test_both_folds_export_every_bad_trace_the_same() -> None:
    exported = [python_export(events_of(name)) for name in TRACES]
    from_node = node_exports([(events_of(name), stops) for name, (_, stops) in
                              zip(TRACES, exported, strict=True)])
    for name, (python, _), node in zip(TRACES, exported, from_node, strict=True):
        assert python["anomalies"] == TRACES[name]["anomalies"]
        assert python == node, f"{name}: {first_difference(python, node)}"
