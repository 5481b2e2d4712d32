"""compare_runs: two runs' branches matched by (invocation path, branch key), on the goldens.

The A/B timing golden holds two runs of TimingFlow (pipelined, then batched) whose
branches have different paths and keys; the other comparisons are of one run with an
edited copy of itself (an output, tokens, a duration changed; a run cut short), so every
difference is known.
"""

from __future__ import annotations

from typing import Any

from runtime.events import Event, read_jsonl, runs_of
from runtime.whatif import compare_runs, what_if
from tests.golden.goldens import GOLDEN_DIR


def golden_runs(name: str) -> list[list[Event]]:
    return list(runs_of(read_jsonl(GOLDEN_DIR / f"{name}.jsonl")).values())


def as_dicts(events: list[Event]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json") for event in events]


def rows(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["path"], row["key"]): row for row in result["branches"]}


def edited(events: list[Event], path: str, kind: str, **changes: Any) -> list[dict[str, Any]]:
    """``events`` as dicts, with the one event of ``kind`` at ``path`` changed."""
    out = as_dicts(events)
    found = [e for e in out if e["path"] == path and e["type"] == kind]
    assert len(found) == 1, (path, kind)
    found[0].update(changes)
    return out


def test_two_decompositions_of_one_flow_match_by_path_and_key() -> None:
    pipelined, batched = golden_runs("ab_timing")
    result = compare_runs(pipelined, batched)
    assert result["unit"] == "s" and result["same_flow"] is True
    assert (result["a"]["message"], result["b"]["message"]) == ("pipelined", "batched")
    assert result["a"]["run"] == "ab_timing-1" and result["b"]["flow"] == "TimingFlow"
    assert (result["a"]["status"], result["a"]["tokens"]) == ("finished", 16)
    # Pipelined: workers A and B (0, 1) with their stages under them; batched: the stages
    # as the top level's branches, two barriers (0, 1, then 1:0, 1:1). Path "0" is worker A
    # in one and stage A1 in the other: not a match, as its key differs.
    assert [(row["path"], row["key"], row["match"]) for row in result["branches"]] == [
        ("0", "A", "only_a"), ("0.0", "A1", "only_a"), ("0.1:0", "A2", "only_a"),
        ("1", "B", "only_a"), ("1.0", "B1", "only_a"), ("1.1:0", "B2", "only_a"),
        ("0", "A1", "only_b"), ("1", "B1", "only_b"), ("1:0", "A2", "only_b"),
        ("1:1", "B2", "only_b")]
    assert result["missing"] == ["0", "0.0", "0.1:0", "1", "1.0", "1.1:0"]
    assert result["added"] == ["0", "1", "1:0", "1:1"]
    worker = rows(result)[("0", "A")]
    assert worker["b"] is None and worker["changed"] == [] and worker["step"] == "Worker"
    assert worker["a"]["output"] == ["A1 done", "A2 done"]
    assert worker["a"]["tokens"] == 8  # its stages' calls
    assert worker["a"]["published"] == [{"step": "Worker", "field": "completed",
                                         "kind": "contribution",
                                         "value": ["A1 done", "A2 done"]}]
    assert rows(result)[("1:0", "A2")]["b"]["published"] == [
        {"step": "Stage", "field": "outputs", "kind": "contribution", "value": "A2 done"}]
    a, b = result["a"]["duration"], result["b"]["duration"]
    assert result["difference"] == {"duration": round(b - a, 6), "tokens": 0}


def test_a_run_against_itself_changes_nothing() -> None:
    pipelined, _ = golden_runs("ab_timing")
    result = compare_runs(pipelined, as_dicts(pipelined))  # events or their dicts
    assert {row["match"] for row in result["branches"]} == {"both"}
    assert [row["changed"] for row in result["branches"]] == [[]] * 6
    assert result["added"] == result["missing"] == []
    assert result["difference"] == {"duration": 0.0, "tokens": 0}
    assert result["a"] == result["b"]


def test_a_changed_output_and_tokens_are_named_per_branch_and_in_the_totals() -> None:
    pipelined, _ = golden_runs("ab_timing")
    changed = edited(pipelined, "0.1:0", "model.finished", total_tokens=10)
    fulfilled = next(e for e in changed if e["path"] == "0.1:0"
                     and e["type"] == "branch.fulfilled")
    fulfilled["output"] = "A2 redone"
    result = compare_runs(pipelined, changed)
    by_key = rows(result)
    assert by_key[("0.1:0", "A2")]["changed"] == ["tokens", "output"]
    assert (by_key[("0.1:0", "A2")]["a"]["tokens"],
            by_key[("0.1:0", "A2")]["b"]["tokens"]) == (4, 10)
    assert by_key[("0", "A")]["changed"] == ["tokens"]  # its child's calls are its cost
    assert by_key[("1", "B")]["changed"] == [] and by_key[("0.0", "A1")]["changed"] == []
    assert result["difference"]["tokens"] == 6
    assert result["b"]["tokens"] == result["a"]["tokens"] + 6


def test_a_changed_publication_is_named() -> None:
    pipelined, _ = golden_runs("ab_timing")
    changed = as_dicts(pipelined)
    for event in changed:  # every join record that lists A1's contribution
        if event["type"] == "join.reduced":
            for item in event["inputs"]:
                if item["path"] == "0.0":
                    item["value"] = "A1 redone"
    result = compare_runs(pipelined, changed)
    row = rows(result)[("0.0", "A1")]
    assert row["changed"] == ["published"]
    assert row["b"]["published"][0]["value"] == "A1 redone"


def test_a_duration_changes_beyond_jitter_only() -> None:
    pipelined, _ = golden_runs("ab_timing")
    b1 = {e.type: e for e in pipelined if e.path == "1.0"}
    started, finished = b1["branch.started"].offset, b1["branch.fulfilled"].offset
    slower = edited(pipelined, "1.0", "branch.fulfilled",
                    offset=started + 2 * (finished - started))
    jittered = edited(pipelined, "1.0", "branch.fulfilled",
                      offset=started + 1.01 * (finished - started))
    assert rows(compare_runs(pipelined, slower))[("1.0", "B1")]["changed"] == ["duration"]
    assert rows(compare_runs(pipelined, jittered))[("1.0", "B1")]["changed"] == []


def test_a_run_still_going_is_compared_as_far_as_it_went() -> None:
    pipelined, _ = golden_runs("ab_timing")
    cut = [e for e in pipelined if e.seq <= 33]  # B1 done, B2 not yet forked
    result = compare_runs(pipelined, cut)
    assert result["b"]["status"] == "running"
    assert result["missing"] == ["1.1:0"] and result["added"] == []
    worker = rows(result)[("1", "B")]
    assert worker["b"]["status"] == "running" and worker["b"]["duration"] is None
    assert worker["changed"] == ["status", "duration", "tokens", "output", "published"]
    assert result["difference"]["tokens"] == -4


def test_runs_of_different_flows_are_matched_all_the_same() -> None:
    pipelined, _ = golden_runs("ab_timing")
    research = golden_runs("nested_fanout")[0]
    result = compare_runs(pipelined, research)
    assert result["same_flow"] is False
    assert (result["a"]["flow"], result["b"]["flow"]) == ("TimingFlow", "ResearchFlow")
    assert [row["match"] for row in result["branches"]].count("both") == 0
    assert result["added"] == ["0", "0.0", "0.1", "1"]


def test_published_values_of_replacements_and_removals() -> None:
    (run,) = golden_runs("checkpoints")
    pruner = rows(compare_runs(run, run))[("1", "Pruner")]["a"]
    assert pruner["published"] == [
        {"step": "Pruner", "field": "stale", "kind": "removal", "value": None},
        {"step": "Pruner", "field": "pruned", "kind": "replacement", "value": True}]


def test_a_discarded_branch_published_nothing() -> None:
    (run,) = golden_runs("atomic_failure")
    by_key = rows(compare_runs(run, run))
    assert [row["a"]["status"] for row in by_key.values()] == [
        "fulfilled", "fulfilled", "rejected"]
    assert all(row["a"]["published"] == [] for row in by_key.values())


def test_the_timing_is_each_runs_recorded_schedule() -> None:
    pipelined, batched = golden_runs("ab_timing")
    result = compare_runs(pipelined, batched)
    assert result["timing"] == {
        "a": what_if(pipelined).as_dict()["schedules"]["recorded"],
        "b": what_if(batched).as_dict()["schedules"]["recorded"]}


def test_no_events_yet() -> None:
    pipelined, _ = golden_runs("ab_timing")
    result = compare_runs([], pipelined)
    assert result["a"]["duration"] is None and result["a"]["status"] == "running"
    assert result["difference"]["duration"] is None
    assert result["added"] == [row["path"] for row in result["branches"]]
    assert result["timing"]["a"]["total"] == 0.0
    assert [op for op in result["timing"]["a"]["operations"] if op["kind"] == "branch"] == []
