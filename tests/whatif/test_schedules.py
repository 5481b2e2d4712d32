"""The what-if's schedulers on hand-made timelines, the seed's table row by row first."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.whatif import what_if
from tests.whatif.timelines import Timeline, langgraph_flat, seed_batched, seed_pipelined


def schedules(events: list[dict[str, Any]], **options: Any) -> dict[str, dict[str, Any]]:
    return what_if(events, **options).as_dict()["schedules"]  # type: ignore[no-any-return]


def op(schedule: dict[str, Any], key: str) -> dict[str, Any]:
    [found] = [o for o in schedule["operations"] if o["key"] == key]
    return found


def times(schedule: dict[str, Any], key: str) -> tuple[float, float]:
    found = op(schedule, key)
    return found["start"], found["end"]


class TestTheSeedsTable:
    """Flat graph under supersteps vs two coordinator workers (parent-owned barriers)."""

    def test_at_0_a1_and_b1_start_in_both(self) -> None:
        s = schedules(seed_pipelined())
        for name in ("supersteps", "local_barriers", "recorded"):
            assert times(s[name], "A1")[0] == 0 and times(s[name], "B1")[0] == 0

    def test_at_1_a1_finishes_a2_waits_for_the_superstep_but_not_for_its_coordinator(
            self) -> None:
        s = schedules(seed_pipelined())
        assert times(s["supersteps"], "A1") == (0, 1)
        assert times(s["supersteps"], "A2")[0] == 10
        assert times(s["local_barriers"], "A2") == (1, 2)
        assert times(s["recorded"], "A2") == (1, 2)

    def test_at_10_b1_finishes_and_the_next_superstep_starts_a2_and_b2(self) -> None:
        s = schedules(seed_pipelined())["supersteps"]
        assert times(s, "B1") == (0, 10)
        assert op(s, "A2")["superstep"] == op(s, "B2")["superstep"] == 2
        assert op(s, "A1")["superstep"] == op(s, "B1")["superstep"] == 1
        assert s["supersteps"] == 2

    def test_at_11_both_finish_the_work(self) -> None:
        s = schedules(seed_pipelined())
        assert s["supersteps"]["total"] == s["local_barriers"]["total"] == 11
        assert s["recorded"]["total"] == 11
        assert times(s["supersteps"], "A2")[1] == times(s["supersteps"], "B2")[1] == 11

    def test_the_wait_names_b1_and_its_superstep(self) -> None:
        s = schedules(seed_pipelined())["supersteps"]
        [wait] = [w for w in s["waits"] if w["at"] == "superstep"]
        assert wait == {"path": "0.1", "key": "A2", "wait": 9, "for": ["1.0"],
                        "for_keys": ["B1"], "at": "superstep", "superstep": 2,
                        "barrier": "0/b1"}
        assert op(s, "A2")["waited_for"] == ["1.0"]
        assert op(s, "B2")["waited_for"] == []

    def test_under_local_barriers_worker_a_waits_only_at_the_outer_join(self) -> None:
        s = schedules(seed_pipelined())["local_barriers"]
        assert not [w for w in s["waits"] if w["at"] == "superstep"]
        [wait] = s["waits"]
        assert (wait["key"], wait["wait"], wait["for_keys"], wait["at"]) == ("A", 9, ["B"], "join")
        assert times(s, "A") == (0, 2)
        assert op(s, "A")["idle"] == 9 and op(s, "B")["idle"] == 0

    def test_idle_time_under_supersteps_is_the_coordinators_wait(self) -> None:
        s = schedules(seed_pipelined())["supersteps"]
        assert op(s, "A")["busy"] == 2 and op(s, "A")["idle"] == 9
        assert op(s, "A2")["idle"] == 9  # ready at 1, ran at 10
        assert op(s, "B")["idle"] == 0

    def test_the_critical_path_is_b1_then_b2(self) -> None:
        s = schedules(seed_pipelined())
        for name in ("supersteps", "local_barriers", "recorded"):
            assert s[name]["critical_path"] == ["1.0", "1.1"], name

    def test_a1_and_b1_in_one_barrier_make_a2_wait_for_b1_under_local_barriers_too(
            self) -> None:
        s = schedules(seed_batched())
        for name in ("local_barriers", "supersteps", "recorded"):
            assert times(s[name], "A2") == (10, 11), name
            assert "1" in op(s[name], "A2")["waited_for"], name
            assert s[name]["total"] == 11
        join = [w for w in s["local_barriers"]["waits"] if w["at"] == "join"]
        assert [(w["key"], w["wait"], w["for_keys"]) for w in join] == [("A1", 9, ["B1"])]


class TestCallersOwnWork:
    def test_a_coordinator_slow_to_fork_delays_its_first_stage_and_adds_no_superstep(
            self) -> None:
        """Worker A takes 0.5 before its first fork (far over the coordination floor)."""
        t = Timeline().fork(0, "", "b0", [("0", "A"), ("1", "B")], step="Worker")
        t.branch("0", "A", "b0", 0, 2.5, calls=[])
        t.fork(0.5, "0", "0/b0", [("0.0", "A1")]).branch("0.0", "A1", "0/b0", 0.5, 1.5)
        t.join(1.5, "0", "0/b0")
        t.fork(1.5, "0", "0/b1", [("0.1", "A2")]).branch("0.1", "A2", "0/b1", 1.5, 2.5)
        t.join(2.5, "0", "0/b1")
        t.branch("1", "B", "b0", 0, 11, calls=[])
        t.fork(0, "1", "1/b0", [("1.0", "B1")]).branch("1.0", "B1", "1/b0", 0, 10)
        t.join(10, "1", "1/b0")
        t.fork(10, "1", "1/b1", [("1.1", "B2")]).branch("1.1", "B2", "1/b1", 10, 11)
        t.join(11, "1", "1/b1")
        s = schedules(t.join(11, "", "b0").finish(11))
        steps = s["supersteps"]
        assert steps["supersteps"] == 2
        assert times(steps, "A1") == (0.5, 1.5) and op(steps, "A1")["superstep"] == 1
        assert times(steps, "A2") == (10, 11) and op(steps, "A2")["waited_for"] == ["1.0"]
        assert times(s["local_barriers"], "A2") == (1.5, 2.5)
        ids = {o["id"] for o in s["recorded"]["operations"]}
        assert ids == {"0", "0.0", "0.1", "1", "1.0", "1.1"}


class TestLangGraphRuns:
    def test_with_the_graphs_edges_local_barriers_let_a2_follow_a1(self) -> None:
        s = schedules(langgraph_flat(edges=True))
        assert times(s["recorded"], "A2") == (10, 11)
        assert times(s["supersteps"], "A2") == (10, 11)
        assert times(s["local_barriers"], "A2") == (1, 2)
        assert s["local_barriers"]["total"] == 11

    def test_a_join_whose_sources_ran_in_different_supersteps_waits_for_both(self) -> None:
        """START→A (10), START→X (1), X→B (1), [A, B]→N: B follows X, N waits for A too."""
        t = Timeline(flow="LangGraph").fork(0, "", "s1", [("0", "A"), ("1", "X")])
        t.branch("0", "A", "s1", 0, 10).branch("1", "X", "s1", 0, 1).join(10, "", "s1")
        t.fork(10, "", "s2", [("1:0", "B")], after={"B": ["X"]})
        t.branch("1:0", "B", "s2", 10, 11).join(11, "", "s2")
        t.fork(11, "", "s3", [("2:0", "N")]).branch("2:0", "N", "s3", 11, 12)
        s = schedules(t.join(12, "", "s3").finish(12))
        assert times(s["local_barriers"], "B") == (1, 2)
        assert times(s["local_barriers"], "N") == (10, 11)
        assert s["local_barriers"]["total"] == 11 and s["supersteps"]["total"] == 12

    def test_without_edges_each_task_waits_for_the_whole_superstep_and_it_says_so(
            self) -> None:
        report = what_if(langgraph_flat(edges=False)).as_dict()
        assert times(report["schedules"]["local_barriers"], "A2") == (10, 11)
        assert any("edges were not recorded" in note for note in report["inferred"])


class TestConcurrencyLimits:
    def limited(self) -> list[dict[str, Any]]:
        t = Timeline().fork(0, "", "b0", [("0", "x"), ("1", "y"), ("2", "z")], limit=2)
        t.branch("0", "x", "b0", 0, 4).branch("1", "y", "b0", 0, 1)
        t.branch("2", "z", "b0", 1, 3)  # took y's slot
        return t.join(4, "", "b0").finish(4)

    def test_a_barriers_limit_holds_in_every_schedule(self) -> None:
        s = schedules(self.limited())
        for name in ("recorded", "local_barriers", "supersteps"):
            assert times(s[name], "z") == (1, 3), name
            [wait] = [w for w in s[name]["waits"] if w["at"] == "slot"]
            assert (wait["key"], wait["for_keys"]) == ("z", ["y"]), name

    def test_a_graph_wide_limit_applies_to_supersteps(self) -> None:
        t = Timeline().fork(0, "", "b0", [("0", "x"), ("1", "y"), ("2", "z")])
        t.branch("0", "x", "b0", 0, 2).branch("1", "y", "b0", 0, 2).branch("2", "z", "b0", 0, 2)
        events = t.join(2, "", "b0").finish(2)
        assert schedules(events)["supersteps"]["total"] == 2
        limited = schedules(events, max_concurrency=2)["supersteps"]
        assert limited["total"] == 4 and times(limited, "z") == (2, 4)


class TestWhereCallsMatter:
    def agent(self) -> list[dict[str, Any]]:
        """One branch's model → tool → model rounds beside one long call."""
        t = Timeline().fork(0, "", "b0", [("0", "agent"), ("1", "slow")])
        t.branch("0", "agent", "b0", 0, 3,
                 calls=[("model", 0, 1), ("tool", 1, 2), ("model", 2, 3)])
        t.branch("1", "slow", "b0", 0, 5)
        return t.join(5, "", "b0").finish(5)

    def test_each_round_of_an_agent_is_a_superstep_of_a_flat_graph(self) -> None:
        s = schedules(self.agent())
        assert s["supersteps"]["supersteps"] == 3
        assert s["supersteps"]["total"] == 7
        assert op(s["supersteps"], "agent")["parts"] == [(0, 1), (5, 7)]
        assert s["local_barriers"]["total"] == 5
        assert op(s["local_barriers"], "agent")["parts"] == [(0, 3)]

    def test_a_rejected_branch_keeps_its_recorded_duration(self) -> None:
        t = Timeline().fork(0, "", "b0", [("0", "ok"), ("1", "bad")])
        t.branch("0", "ok", "b0", 0, 2).branch("1", "bad", "b0", 0, 1, rejected=True)
        s = schedules(t.join(2, "", "b0").finish(2))
        assert times(s["local_barriers"], "bad") == (0, 1)


class TestRunsInProgress:
    def test_a_run_still_running_is_scheduled_as_far_as_it_got(self) -> None:
        t = Timeline().fork(0, "", "b0", [("0", "a"), ("1", "b")])
        t.branch("0", "a", "b0", 0, 2)
        t._add(0, "1", "branch.started", barrier="b0", index=1, key="b", step="Stage")
        t._add(3, "1", "model.started", step="Stage", call=99, attempt=1, model={},
               messages=[], tools=[])
        events = sorted(t.events, key=lambda e: e["offset"])
        report = what_if(events).as_dict()
        assert report["complete"] is False
        assert times(report["schedules"]["recorded"], "b") == (0, 3)
        assert any("still running" in note for note in report["inferred"])

    @pytest.mark.parametrize("events", [[], [{"type": "session.loaded", "offset": 0}]])
    def test_a_run_with_no_turn_yet_has_empty_schedules(self, events: list[Any]) -> None:
        report = what_if(events).as_dict()
        assert report["complete"] is False
        for schedule in report["schedules"].values():
            assert schedule["operations"] == [] and schedule["total"] == 0
