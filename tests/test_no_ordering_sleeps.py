"""No sleep decides an ordering in the tests.

A test that sleeps so that one thing happens before another passes on an idle machine and
fails on a busy one; it waits for the first thing instead (an event, a gate, a condition
polled by :func:`tests.webhelpers.wait_for`, :func:`tests.webhelpers.wait_until` or
:func:`tests.runtime.helpers.until`). What still sleeps is listed here with the reason: the
polls inside those helpers, work that takes time because its duration is the behaviour under
test (a step slower than the timeout that cuts it, a stall longer than a lease), and paced
workloads whose pace no assertion depends on. A new ``sleep(`` call fails this scan until it
is replaced by a wait, or listed with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

ALLOWED: dict[tuple[str, str], str] = {
    # The polls of the waiting helpers and of servers starting up.
    ("webhelpers.py", "wait_until"): "polls its condition",
    ("webhelpers.py", "wait_for"): "polls its condition",
    ("runtime/helpers.py", "until"): "polls its condition",
    ("webhelpers.py", "redis_server"): "polls until Redis answers",
    ("livedaphne.py", "_wait_until_ready"): "polls until Daphne answers",
    ("packaging/installed.py", "wait_healthy"): "polls until the installed server answers",
    ("flows_pkg/gated.py", "Wait.run_logic"): "a turn in a worker process polls the file "
                                              "gate its test opens",
    ("flows_pkg/streamed.py", "GatedWriterModel.invoke"): "a model in a worker process "
                                                          "polls the file gate its test opens",
    ("flows_pkg/ledgered.py", "FolderModel.invoke"): "a model in a worker process polls the "
                                                     "file gate its test opens",
    ("flows_pkg/ticking.py", "Tick.run_logic"): "polls the pause gate; paces a run that goes "
                                                "on until its test stops it",
    # Durations that are the behaviour under test: deadlines on one clock, far apart.
    ("runtime/helpers.py", "SlowModel.invoke"): "a model call slower than the timeout or stop "
                                                "that cuts it",
    ("runtime/test_turn_cancel.py",
     "test_a_stubborn_branch_closes_at_the_grace_before_the_step_is_stopped_hard.stubborn"):
        "a branch that ignores its token, 50 times longer than the grace that stops it",
    ("runtime/test_barrier_cancel.py",
     "test_a_non_cooperative_branch_past_the_grace_is_rejected_and_publishes_nothing.stubborn"):
        "a branch that ignores its token, 50 times longer than the grace that stops it",
    ("runtime/test_barrier_cancel.py",
     "test_running_cooperative_branches_see_the_cancellation_and_finish_within_grace.coop"):
        "a branch that polls its token: polling is the behaviour under test",
    ("runtime/test_barrier_limits.py",
     "test_a_branch_past_its_timeout_is_rejected_and_its_siblings_follow_the_policy.slow"):
        "a branch far slower than its timeout",
    ("runtime/test_barrier_limits.py", "_budget_barrier.sleeper"):
        "a branch far slower than the budget that stops it",
    ("runtime/test_barrier_limits.py",
     "test_max_concurrency_bounds_running_branches_and_starts_queued_ones_in_order.limited"):
        "the branches' work; what is asserted (starts in order, two at most at once) holds "
        "for any durations",
    ("web/test_leases_stall.py",
     "test_a_database_stall_longer_than_the_lease_does_not_interrupt_a_live_worker"):
        "the database stall under test lasts a lease longer, while a worker starts",
    ("web/test_leases_stall.py", "test_a_round_kept_waiting_by_a_stall_declares_no_run_lost"):
        "the database stall under test outlasts the round's patience",
    ("contract/test_goldens.py", "_SlowCheckpoints.save"):
        "a checkpoint slower than a stop's time, as on a loaded machine: the stop is timed "
        "from the run",
    ("golden/goldens.py", "_play.press_stop"):
        "a golden's stop lands at a time of a run whose steps take their demo time",
    ("golden/flows.py", "Searcher.run_logic"):
        "the finder's search time in the obeyed_cancel golden; its siblings wait on the "
        "token, not on the clock",
    ("golden/flows.py", "Dictation.invoke"):
        "the streamed golden's writing times: contenders two units apart, far over the "
        "interval between two deltas",
    ("self_app.py", "start_self_app.Handler.do_POST"):
        "a child app's answer time, set by the coordinator golden",
    ("flows_pkg/coordinated.py", "Count.run_logic"): "a child's work time, set by its test",
    ("remoteflow.py", "Team.run_logic"): "a branch's work time: the tree grows while watched",
    ("contract/test_fold_properties.py", "Worker.perform"):
        "interleavings Hypothesis generates; the folds must agree whatever they are",
    # Paced workloads and a watched absence.
    ("web/test_websocket.py", "Ticker.run_logic"):
        "a steady stream of small batches for clients to join; no assertion depends on its "
        "pace",
    ("runtime/test_backpressure.py",
     "test_branches_held_by_a_congested_sink_are_woken_once_each_not_once_per_drain"):
        "the slow store drains at a pace; what is asserted counts asks per branch",
    ("runtime/test_dashboard_sink.py", "test_a_congested_sink_holds_the_run_instead_of_dropping"):
        "a held run must not go on: that something does not happen can only be watched for "
        "a while",
}
"""``(module, function)``: why a ``sleep(`` call there decides no ordering."""


def sleep_calls(source: str, filename: str = "<source>") -> list[tuple[str, int]]:
    """``(function, line)`` of every ``sleep(...)`` call (``time.sleep``, ``anyio.sleep``,
    ``asyncio.sleep``, ...), the function named by its dotted path in the module."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, names: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, [*names, child.name])
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "sleep":
                    found.append((".".join(names), child.lineno))
            visit(child, names)

    visit(ast.parse(source, filename), [])
    return found


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_every_sleep_is_listed_with_its_reason(path: Path) -> None:
    module = path.relative_to(TESTS).as_posix()
    calls = sleep_calls(path.read_text(encoding="utf-8"), str(path))
    unlisted = [f"line {line}: sleep in {function or 'the module'}"
                for function, line in calls if (module, function) not in ALLOWED]
    assert unlisted == [], "wait for an event, a gate or a condition instead, or list it"


def test_every_listed_sleep_is_still_there() -> None:
    present = {(path.relative_to(TESTS).as_posix(), function)
               for path in _modules()
               for function, _ in sleep_calls(path.read_text(encoding="utf-8"), str(path))}
    assert sorted(set(ALLOWED) - present) == []


def test_the_scan_names_the_function_around_a_sleep() -> None:
    source = ("import anyio, time\n"
              "class A:\n"
              "    async def run(self):\n"
              "        async def inner():\n"
              "            await anyio.sleep(1)\n"
              "        time.sleep(0)\n"
              "sleep(2)\n")
    assert sleep_calls(source) == [("A.run.inner", 5), ("A.run", 6), ("", 7)]
