"""The what-if's sentences say what the schedules computed."""

from __future__ import annotations

from runtime.whatif import what_if
from runtime.whatif.text import seconds, summary
from tests.whatif.timelines import langgraph_flat, seed_batched, seed_pipelined


def test_the_seeds_answer_in_words() -> None:
    lines = what_if(seed_pipelined()).as_dict()["summary"]
    assert lines[0].startswith("Recorded: 11.0 s. Under graph-wide supersteps: 11.0 s "
                               "(about the same, 2 supersteps).")
    assert ("Under graph-wide supersteps, A2 would start at 10.0 s instead of 1.0 s: it "
            "waits 9.0 s for B1 at superstep 2.") in lines
    assert not any(line.startswith("Under local barriers,") for line in lines)


def test_one_barrier_per_stage_is_named_as_the_join_a2_waits_behind() -> None:
    lines = what_if(seed_batched()).as_dict()["summary"]
    assert lines[-1] == ("As recorded, A1 waits 9.0 s for B1 at the join of b0: what "
                         "follows that join waits with it.")


def test_a_langgraph_run_names_what_local_barriers_would_save() -> None:
    lines = what_if(langgraph_flat(edges=True)).as_dict()["summary"]
    assert ("Under local barriers, A2 would start at 1.0 s instead of 10.0 s: under "
            "graph-wide supersteps it waits 9.0 s for B1 at superstep 2.") in lines


def test_a_longer_total_is_said_to_be_longer() -> None:
    report = what_if(seed_pipelined()).as_dict()
    report["schedules"]["supersteps"]["total"] = 13.5
    assert "Under graph-wide supersteps: 13.5 s (2.5 s longer, 2 supersteps)." in summary(
        report)[0]


def test_durations_read_at_their_scale() -> None:
    assert [seconds(v) for v in (9.04, 0.45, 0.0008)] == ["9.0 s", "450 ms", "0.8 ms"]


def test_an_empty_run_says_so() -> None:
    assert summary(what_if([]).as_dict()) == [
        "Nothing to schedule yet: the run has no recorded turn."]
