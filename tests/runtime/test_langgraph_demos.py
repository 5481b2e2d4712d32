"""The LangGraph demos (runtime/integrations/langgraph_demos.py) run for real, traced.

Each demo graph is a real compiled LangGraph graph invoked with ``ainvoke`` under
``LangGraphTracer`` into a :class:`MemorySink`; what the debugger must show is asserted on
the recorded events, by their order (``seq``), never by wall-clock bounds: the seed's A/B
graph puts A2 after B1 (the superstep barrier), the ``Send`` demo is one barrier with one
branch per task reduced in task order, and the conflict demo is a ``join.invalidated``
naming both writers and a failed turn. The command line runs once in a subprocess, as the
LangGraph tutorial (docs/tutorials/langgraph.md) tells users to run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.errors import InvalidUpdateError

from runtime.events import schema as ev
from runtime.events import values
from runtime.events.fold import fold
from runtime.events.sinks import MemorySink, read_jsonl
from runtime.integrations import langgraph_demos as demos
from tests.runtime.ingest_server import IngestServer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
UNIT = 0.02
"""Seconds per unit: the A/B order follows from the barrier, not from the sleeps."""


@pytest.fixture
def anyio_backend() -> str:
    """LangGraph's async runner is asyncio's."""
    return "asyncio"


async def traced(demo: str, **kwargs: Any) -> tuple[Any, list[ev.Event], Any]:
    sink = MemorySink()
    tracer, output = await demos.run_demo(demo, sinks=[sink], **kwargs)
    events = sink.of_run(tracer.last_run_id)
    assert events, f"{demo}: the tracer recorded nothing for {tracer.last_run_id}"
    assert [e.seq for e in events] == list(range(len(events)))
    return tracer, events, output


def of_type(events: list[ev.Event], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def node_of(forked: ev.BarrierForked, path: str) -> str:
    """The node a branch of ``forked`` runs (its request's ``step``)."""
    (request,) = [r for r in forked.requests if r.path == path]
    return request.step


def branches_by_node(events: list[ev.Event]) -> dict[str, dict[str, Any]]:
    """node name -> {barrier, path, started, ended} (ended: fulfilled or rejected event)."""
    found: dict[str, dict[str, Any]] = {}
    for forked in of_type(events, ev.BarrierForked):
        for request in forked.requests:
            found[request.step] = {"barrier": forked.barrier, "path": request.path}
    for branch in found.values():
        (branch["started"],) = [e for e in of_type(events, ev.BranchStarted)
                                if e.path == branch["path"]]
        (branch["ended"],) = [e for e in events
                              if isinstance(e, ev.BranchFulfilled | ev.BranchRejected)
                              and e.path == branch["path"]]
    return found


def assert_folds(events: list[ev.Event]) -> None:
    run = fold(events)
    assert not run.anomalies, run.anomalies


async def test_ab_graph_output_is_the_seeds_order() -> None:
    output = await demos.ab_graph(UNIT).ainvoke({"done": []})
    assert sorted(output["done"][:2]) == ["A1", "B1"]
    assert sorted(output["done"][2:]) == ["A2", "B2"]


async def test_ab_demo_a2_starts_after_b1_ends() -> None:
    _, events, output = await traced("ab", unit=UNIT)
    assert len(output["done"]) == 4
    forks = of_type(events, ev.BarrierForked)
    assert [sorted(r.step for r in f.requests) for f in forks] == [["A1", "B1"], ["A2", "B2"]]
    nodes = branches_by_node(events)
    assert nodes["A2"]["barrier"] == nodes["B2"]["barrier"] != nodes["A1"]["barrier"]
    # The superstep barrier: A2 depends on A1 alone, yet starts only after B1 ended, and
    # its barrier is forked only after both branches of the first one ended.
    assert nodes["A2"]["started"].seq > nodes["B1"]["ended"].seq
    assert nodes["A2"]["started"].offset >= nodes["B1"]["ended"].offset
    assert forks[1].seq > max(nodes["A1"]["ended"].seq, nodes["B1"]["ended"].seq)
    # In the seed's units (lower bounds only: a sleep lasts at least its units): A2 was
    # ready at 1 unit, when A1 ended, and started at 10, when B1 did; the turn ends at 11.
    def units(event: ev.Event) -> float:
        return event.offset / UNIT

    assert units(nodes["A1"]["ended"]) >= 1
    assert units(nodes["A2"]["started"]) >= 10
    assert units(events[-1]) >= 11
    assert all(isinstance(nodes[n]["ended"], ev.BranchFulfilled) for n in nodes)
    assert isinstance(events[0], ev.TurnStarted)
    assert isinstance(events[-1], ev.TurnFinished)
    assert_folds(events)


async def test_send_graph_reduces_in_task_order() -> None:
    output = await demos.send_graph(50, UNIT).ainvoke({"items": []})
    assert output["items"] == list(range(50))


async def test_send_demo_is_one_barrier_of_200_branches_reduced_in_task_order() -> None:
    _, events, output = await traced("send", unit=0.05, tasks=200)
    assert output["items"] == list(range(200))
    # LangGraph's input step (its `__start__` task, which routes the Sends) is no barrier.
    forks = of_type(events, ev.BarrierForked)
    assert [f.requests[0].step for f in forks] == ["work"]
    (fork,) = forks
    assert len(fork.requests) == 200
    assert [r.index for r in fork.requests] == list(range(200))
    paths = [r.path for r in fork.requests]
    started = [e for e in of_type(events, ev.BranchStarted) if e.barrier == fork.barrier]
    fulfilled = [e for e in of_type(events, ev.BranchFulfilled) if e.barrier == fork.barrier]
    assert sorted(e.path for e in started) == sorted(paths)
    assert sorted(e.path for e in fulfilled) == sorted(paths)

    (reduced,) = [e for e in of_type(events, ev.JoinReduced)
                  if e.barrier == fork.barrier and e.field == "items"]
    assert [i["path"] for i in reduced.inputs] == paths  # task order
    assert [i["value"] for i in reduced.inputs] == [[i] for i in range(200)]
    assert sorted(reduced.completion_order) == sorted(paths)
    # Later tasks sleep less: they finished out of task order, the reducer did not care.
    assert reduced.completion_order != paths
    assert reduced.completion_order == [e.path for e in fulfilled]
    assert reduced.result == list(range(200))
    assert isinstance(events[-1], ev.TurnFinished)
    assert_folds(events)


async def test_a_superstep_wider_than_a_page_is_recorded_in_pages_before_its_branches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(values, "FORK_PAGE", 64)
    _, events, output = await traced("send", unit=0.005, tasks=200)
    assert output["items"] == list(range(200))
    (fork,) = of_type(events, ev.BarrierForked)
    pages = of_type(events, ev.BarrierRequested)
    assert (fork.count, len(fork.requests)) == (200, 64)
    assert [(p.first, len(p.requests)) for p in pages] == [(64, 64), (128, 64), (192, 8)]
    assert [p.seq for p in pages] == [fork.seq + 1, fork.seq + 2, fork.seq + 3]
    requests = [*fork.requests, *(r for p in pages for r in p.requests)]
    assert [r.index for r in requests] == list(range(200))
    assert min(e.seq for e in of_type(events, ev.BranchStarted)) > pages[-1].seq
    run = fold(events)
    assert run.barriers[fork.barrier].branches == [r.path for r in requests]
    assert_folds(events)


async def test_conflict_graph_raises_invalid_update_error() -> None:
    with pytest.raises(InvalidUpdateError, match="one value per step"):
        await demos.conflict_graph(UNIT).ainvoke({"winner": "nobody"})


async def test_conflict_demo_is_an_invalidated_join_naming_both_writers() -> None:
    _, events, output = await traced("conflict", unit=UNIT)
    assert isinstance(output, InvalidUpdateError)
    (fork,) = of_type(events, ev.BarrierForked)
    assert sorted(r.step for r in fork.requests) == ["left", "right"]
    (invalid,) = of_type(events, ev.JoinInvalidated)
    assert invalid.barrier == fork.barrier
    writers = {node_of(fork, p["path"]) if "path" in p else None: p
               for p in invalid.provenance}
    assert {"left", "right"} <= set(writers), invalid.provenance
    assert "winner" in repr(invalid.provenance)
    assert "'left'" in repr(writers["left"]) and "'right'" in repr(writers["right"])
    assert not of_type(events, ev.JoinPublished)
    assert isinstance(events[-1], ev.TurnFailed)
    assert_folds(events)


def test_run_page_needs_url_and_token() -> None:
    env = {"PICOFLOW_DASHBOARD_URL": "http://dash.example:8000/", "PICOFLOW_DASHBOARD_TOKEN": "t"}
    assert demos.run_page("r1", env) == "http://dash.example:8000/runs/r1/"
    assert demos.run_page("r1", {**env, "PICOFLOW_DASHBOARD_TOKEN": ""}) is None
    assert demos.run_page("r1", {}) is None


def command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtime.integrations.langgraph_demos", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PICOFLOW_DASHBOARD_")}


def printed(stdout: str, label: str) -> str:
    (line,) = [x for x in stdout.splitlines() if x.startswith(f"{label}: ")]
    return line.removeprefix(f"{label}: ")


@pytest.mark.parametrize("demo", demos.DEMOS)
def test_command_ships_each_demo_to_the_dashboard_of_the_environment(demo: str) -> None:
    with IngestServer() as server:
        env = {**clean_env(), "PICOFLOW_DASHBOARD_URL": server.url,
               "PICOFLOW_DASHBOARD_TOKEN": server.token}
        done = command(demo, "--unit", "0.01", "--tasks", "20", env=env)
    assert done.returncode == 0, done.stderr
    run_id = printed(done.stdout, "run")
    assert printed(done.stdout, "page") == f"{server.url}/runs/{run_id}/"
    (stored,) = server.stored
    assert stored == run_id
    events = server.stored[run_id]
    assert [e.seq for e in events] == list(range(len(events)))
    assert isinstance(events[0], ev.TurnStarted)
    last = ev.TurnFailed if demo == "conflict" else ev.TurnFinished
    assert isinstance(events[-1], last)
    assert server.status[run_id] == ("failed" if demo == "conflict" else "finished")


def test_command_writes_jsonl_without_a_dashboard(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    done = command("send", "--unit", "0", "--tasks", "20", "--jsonl", str(out), env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "page: " not in done.stdout
    run_id = printed(done.stdout, "run")
    events = [e for e in read_jsonl(out) if e.run_id == run_id]
    assert isinstance(events[0], ev.TurnStarted) and isinstance(events[-1], ev.TurnFinished)
    (reduced,) = [e for e in of_type(events, ev.JoinReduced) if e.field == "items"
                  and len(e.inputs) == 20]
    assert reduced.result == list(range(20))
