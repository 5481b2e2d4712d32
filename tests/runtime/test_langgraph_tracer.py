"""LangGraphTracer on real LangGraph graphs: supersteps are barriers, tasks are branches.

No part of LangGraph is mocked: each test compiles a StateGraph and invokes it with the
tracer as a LangChain callback, then checks the events (validated against the schema and
folded) against what LangGraph itself did.
"""

from __future__ import annotations

import asyncio
import json
import operator
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal, TypedDict
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import InvalidUpdateError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from runtime.events import (
    Event,
    MemorySink,
    RunModel,
    fold,
    parse_event,
    publication_of,
    runs_of,
)
from runtime.events import bus as bus_module
from runtime.events.sinks import dump_event
from runtime.integrations.langgraph import LangGraphTracer
from runtime.integrations.langgraph import _tracer as tracer_module
from runtime.integrations.langgraph._bus import ReplayBus
from runtime.integrations.langgraph._edges import Previous, Topology, predecessors, senders_of
from runtime.integrations.langgraph_demos import ab_graph
from runtime.whatif import what_if
from tests.contract.node_fold import first_difference, node_exports, python_export
from tests.runtime.ingest_server import IngestServer

N = 20


@pytest.fixture
def anyio_backend() -> str:
    """LangGraph's async API runs on asyncio only."""
    return "asyncio"


class FanState(TypedDict, total=False):
    topic: str
    out: Annotated[list[int], operator.add]


def fan_out_graph(gates: list[asyncio.Event] | None = None) -> Any:
    """START -> plan -> N x Send("work") into an operator.add channel.

    With ``gates``, task i finishes only after task i+1 did: they complete in reverse
    order of their Send index."""

    def plan(state: FanState) -> FanState:
        return {"topic": "fan"}

    def route(state: FanState) -> list[Send]:
        return [Send("work", {"i": i}) for i in range(N)]

    async def work(arg: dict[str, int]) -> FanState:
        i = arg["i"]
        if gates is not None:
            if i < N - 1:
                await gates[i + 1].wait()
            gates[i].set()
        return {"out": [i]}

    def work_sync(arg: dict[str, int]) -> FanState:
        return {"out": [arg["i"]]}

    builder = StateGraph(FanState)
    builder.add_node("plan", plan)
    builder.add_node("work", work if gates is not None else work_sync)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", route, ["work"])
    builder.add_edge("work", END)
    return builder.compile()


def checked(events: list[Event]) -> RunModel:
    """Every event validates strictly (as stored JSON) and the run folds cleanly."""
    assert [e.seq for e in events] == list(range(len(events)))
    for event in events:
        assert parse_event(event.model_dump_json()) == event
    offsets = [e.offset for e in events]
    assert offsets == sorted(offsets)
    run = fold(events)
    assert run.anomalies == []
    return run


def of_type(events: list[Event], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


@pytest.mark.anyio
async def test_a_send_fan_out_is_one_barrier_reduced_in_task_order() -> None:
    gates = [asyncio.Event() for _ in range(N)]
    graph = fan_out_graph(gates)
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    result = await graph.ainvoke({"out": []}, config={"callbacks": [tracer]})
    assert result["out"] == list(range(N))

    events = sink.events
    run = checked(events)
    assert run.status == "finished" and run.run_id == tracer.last_run_id
    assert run.flow == "LangGraph"
    assert [b.branches for b in run.barriers.values()] == [
        ["0"], [f"1:{i}" for i in range(N)]]
    fork = of_type(events, "barrier.forked")[1]
    assert [(r.step, r.key, r.params) for r in fork.requests] == [
        ("work", f"work:{i}", {"i": i}) for i in range(N)]
    assert all(run.invocations[f"1:{i}"].status == "fulfilled" for i in range(N))
    [reduced] = of_type(events, "join.reduced")
    assert reduced.channel == "add" and reduced.field == "out" and reduced.initial == []
    assert [item["key"] for item in reduced.inputs] == [f"work:{i}" for i in range(N)]
    assert [item["value"] for item in reduced.inputs] == [[i] for i in range(N)]
    assert reduced.completion_order == [f"1:{i}" for i in reversed(range(N))]
    assert reduced.result == result["out"]
    assert run.state == {"state": {"out": list(range(N)), "topic": "fan"}}
    # The superstep barrier: every branch of the fan-out starts after plan's branch ended.
    plan_end = run.invocations["0"].finished
    assert plan_end is not None
    assert all((run.invocations[f"1:{i}"].started or 0) >= plan_end for i in range(N))


def test_sync_invoke_and_stream_record_the_same_barriers() -> None:
    graph = fan_out_graph()
    for call in ("invoke", "stream"):
        sink = MemorySink()
        tracer = LangGraphTracer(graph, sinks=[sink])
        # At most 3 tasks at once: tasks end before their siblings start.
        config: Any = {"callbacks": [tracer], "max_concurrency": 3}
        if call == "invoke":
            assert graph.invoke({"out": []}, config=config)["out"] == list(range(N))
        else:
            chunks = list(graph.stream({"out": []}, config=config))
            # One update per task, in the order the pool's threads finished them.
            works = [chunk["work"]["out"] for chunk in chunks if "work" in chunk]
            assert sorted(works) == [[i] for i in range(N)]
        run = checked(sink.events)
        assert run.status == "finished", call
        assert len(run.barriers["b1"].branches) == N
        [reduced] = run.barriers["b1"].reductions
        assert [item["value"] for item in reduced["inputs"]] == [[i] for i in range(N)]
        assert run.state["state"]["out"] == list(range(N))


@pytest.mark.anyio
async def test_astream_is_one_run_per_invocation() -> None:
    graph = fan_out_graph()
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    runs = []
    for _ in range(2):
        async for _chunk in graph.astream({"out": []}, config={"callbacks": [tracer]}):
            pass
        runs.append(tracer.last_run_id)
    assert len(set(runs)) == 2
    by_run = {run_id: [e for e in sink.events if e.run_id == run_id] for run_id in runs}
    for events in by_run.values():
        assert checked(events).status == "finished"


class PickState(TypedDict, total=False):
    pick: str


def two_writers_graph() -> Any:
    builder = StateGraph(PickState)
    builder.add_node("north", lambda state: {"pick": "Lakeside Lodge"})
    builder.add_node("south", lambda state: {"pick": "Riverside Hall"})
    builder.add_edge(START, "north")
    builder.add_edge(START, "south")
    builder.add_edge("north", END)
    builder.add_edge("south", END)
    return builder.compile()


@pytest.mark.parametrize("with_graph", [True, False])
def test_two_writes_to_a_last_value_key_invalidate_the_join_naming_both(
        with_graph: bool) -> None:
    graph = two_writers_graph()
    sink = MemorySink()
    tracer = LangGraphTracer(graph if with_graph else None, sinks=[sink])
    with pytest.raises(InvalidUpdateError):
        graph.invoke({}, config={"callbacks": [tracer]})
    run = checked(sink.events)
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "InvalidUpdateError"
    [invalidated] = of_type(sink.events, "join.invalidated")
    assert [(p["key"], p["field"], p["value"]) for p in invalidated.provenance] == [
        ("north", "pick", "Lakeside Lodge"), ("south", "pick", "Riverside Hall")]
    assert "north" in invalidated.error.message and "south" in invalidated.error.message
    assert run.conflicts == ["b0"]
    # Our runtime's code for two replacements of one field, so the page explains it; the
    # fix is LangGraph's (the page shows the event's own fix when it carries one).
    assert invalidated.error.code == run.error["code"] == "parallel_state_conflict"
    assert "Can receive only one value per step" in run.error["message"]
    for error in (invalidated.error.extra, run.error["extra"]):
        assert error["field"] == "pick" and len(error["provenance"]) == 2
        assert "Annotated[" in error["fix"] and "one node" in error["fix"]
    assert run.state == {"state": {}}


class Boom(Exception):
    pass


@pytest.mark.anyio
async def test_a_raising_node_is_a_rejected_branch_and_the_turn_fails() -> None:
    async def fine(state: PickState) -> PickState:
        return {"pick": "fine"}

    async def broken(state: PickState) -> PickState:
        raise Boom("no rooms left")

    builder = StateGraph(PickState)
    builder.add_node("broken", broken)
    builder.add_node("fine", fine)
    builder.add_edge(START, "broken")
    builder.add_edge(START, "fine")
    graph = builder.compile()
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    with pytest.raises(Boom):
        await graph.ainvoke({}, config={"callbacks": [tracer]})
    run = checked(sink.events)
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "Boom"
    broken_branch = run.invocations["0"]
    assert (broken_branch.key, broken_branch.status) == ("broken", "rejected")
    assert broken_branch.error is not None and broken_branch.error["message"] == "no rooms left"
    barrier = run.barriers["b0"]
    assert barrier.published == []
    assert {d["key"] for d in barrier.discarded} == {"broken", "fine"}
    assert run.state == {"state": {}}


def test_with_no_sinks_it_ships_to_the_dashboard_of_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with IngestServer() as server:
        monkeypatch.setenv("PICOFLOW_DASHBOARD_URL", server.url)
        monkeypatch.setenv("PICOFLOW_DASHBOARD_TOKEN", server.token)
        graph = fan_out_graph()
        tracer = LangGraphTracer(graph)
        graph.invoke({"out": []}, config={"callbacks": [tracer]})
        assert tracer.close()
        run_id = tracer.last_run_id
        assert run_id is not None
        stored = server.stored[run_id]
        assert stored[0].type == "turn.started" and stored[-1].type == "turn.finished"
        assert fold(stored).barriers["b1"].outcome == "published"
        # The dashboard labels the run's origin "LangGraph" by this header.
        sources = {r.headers.get("PicoFlow-Origin-Source") for r in server.requests}
        assert sources == {"LangGraph"}


@pytest.fixture(autouse=True)
def _no_dashboard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A developer's own dashboard variables must not receive the tests' runs."""
    monkeypatch.delenv("PICOFLOW_DASHBOARD_URL", raising=False)
    monkeypatch.delenv("PICOFLOW_DASHBOARD_TOKEN", raising=False)
    yield


@pytest.mark.anyio
async def test_both_folds_agree_on_traced_runs() -> None:
    """The browser's fold (through node) exports the same runs as the Python fold."""
    sink = MemorySink()
    gates = [asyncio.Event() for _ in range(N)]
    fan = fan_out_graph(gates)
    await fan.ainvoke({"out": []}, config={"callbacks": [LangGraphTracer(fan, sinks=[sink])]})
    conflict = two_writers_graph()
    with pytest.raises(InvalidUpdateError):
        await conflict.ainvoke({}, config={"callbacks": [LangGraphTracer(conflict,
                                                                          sinks=[sink])]})
    nested = StateGraph(FanState)
    nested.add_node("sub", fan_out_graph())
    nested.add_edge(START, "sub")
    outer = nested.compile()
    await outer.ainvoke({"out": []}, config={"callbacks": [LangGraphTracer(outer,
                                                                           sinks=[sink])]})
    runs = list(runs_of(sink.events).values())
    assert len(runs) == 3
    assert len(fold(runs[2]).barriers) == 3  # sub, and its plan and work supersteps
    exports = [python_export(events) for events in runs]
    node = node_exports([(events, stops) for events, (_, stops) in zip(runs, exports,
                                                                        strict=True)])
    for (python, _), from_node in zip(exports, node, strict=True):
        assert first_difference(python, from_node) is None


class AskState(TypedDict, total=False):
    question: str
    answer: str


def test_an_interrupt_and_its_resume_are_two_turns_of_one_session() -> None:
    def ask(state: AskState) -> AskState:
        return {"answer": interrupt({"question": state["question"]})}

    builder = StateGraph(AskState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    graph = builder.compile(checkpointer=InMemorySaver(), name="venue-asker")
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    config: Any = {"callbacks": [tracer], "configurable": {"thread_id": "offsite-1"}}
    first = graph.invoke({"question": "Which venue?"}, config=config)
    assert "__interrupt__" in first
    first_run = tracer.last_run_id
    assert graph.invoke(Command(resume="Lakeside Lodge"), config=config) == {
        "question": "Which venue?", "answer": "Lakeside Lodge"}
    second_run = tracer.last_run_id
    assert first_run != second_run

    runs = runs_of(sink.events)
    asked, resumed = checked(runs[first_run]), checked(runs[second_run])
    assert asked.session_id == resumed.session_id == "offsite-1"
    assert asked.flow == resumed.flow == "LangGraph: venue-asker"
    assert asked.status == "finished" and asked.reply is not None
    assert asked.reply["completed"] is False
    assert json.loads(asked.reply["message"]) == {"interrupts": [{"question": "Which venue?"}]}
    branch = asked.invocations["0"]
    assert branch.status == "rejected" and branch.error is not None
    assert (branch.key, branch.error["code"]) == ("ask", "interrupted")
    assert asked.state == {"state": {"question": "Which venue?"}}

    assert runs[second_run][0].message == 'resume: "Lakeside Lodge"'
    assert resumed.reply is not None and resumed.reply["completed"] is True
    assert resumed.invocations["0"].status == "fulfilled"
    assert resumed.state == {"state": {"question": "Which venue?", "answer": "Lakeside Lodge"}}


def test_a_subgraph_is_a_nested_barrier_in_the_branch_that_ran_it() -> None:
    def leaf(name: str) -> Any:
        return lambda state: {"out": [name]}

    inner = StateGraph(FanState)
    inner.add_node("x", lambda state: {"out": ["x"], "topic": "from x"})
    inner.add_node("y", leaf("y"))
    inner.add_edge(START, "x")
    inner.add_edge(START, "y")
    builder = StateGraph(FanState)
    builder.add_node("sub", inner.compile())
    builder.add_node("other", leaf("o"))
    builder.add_edge(START, "sub")
    builder.add_edge(START, "other")
    graph = builder.compile()
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    assert graph.invoke({"out": []}, config={"callbacks": [tracer]}) == {
        "out": ["o", "x", "y"], "topic": "from x"}

    run = checked(sink.events)
    assert run.status == "finished"
    outer = run.barriers["b0"]
    assert [run.invocations[p].key for p in outer.branches] == ["other", "sub"]
    sub_path = outer.branches[1]
    assert run.invocations[sub_path].barriers == [f"{sub_path}/b0"]
    nested = run.barriers[f"{sub_path}/b0"]
    assert (nested.caller, nested.base, nested.target) == (sub_path, sub_path, "caller-scope")
    assert [run.invocations[p].key for p in nested.branches] == ["x", "y"]
    assert all(run.invocations[p].status == "fulfilled" for p in nested.branches)
    [reduced] = nested.reductions
    assert [i["value"] for i in reduced["inputs"]] == [["x"], ["y"]]
    assert reduced["result"] == ["x", "y"]
    fork = next(e for e in sink.events if e.type == "barrier.forked"
                and e.barrier == nested.id)
    started = next(e for e in sink.events if e.type == "branch.started"
                   and e.path == sub_path)
    ended = next(e for e in sink.events if e.type == "branch.fulfilled"
                 and e.path == sub_path)
    assert started.seq < fork.seq < ended.seq
    assert run.state == {"state": {"out": ["o", "x", "y"], "topic": "from x"}}
    # The subgraph's published state reaches the parent as the sub task's writes: the
    # outer join names the inner branches those values came from.
    x_path, y_path = nested.branches
    [outer_reduced] = outer.reductions
    assert [(i["path"], i["value"]) for i in outer_reduced["inputs"]] == [
        ("0", ["o"]), (x_path, ["x"]), (y_path, ["y"])]
    assert {f["field"]: f["writer"] for f in outer.published} == {
        "out": None, "topic": x_path}
    for path in (x_path, y_path, sub_path, outer.branches[0]):
        found = publication_of(run, path)
        assert found is not None and found.state == "published", (path, found)


class ChatState(TypedDict, total=False):
    question: str
    reply: str


@pytest.mark.anyio
async def test_a_chat_model_called_in_a_node_is_a_model_call_of_its_branch() -> None:
    model = FakeMessagesListChatModel(responses=[AIMessage(
        content="Lakeside Lodge", usage_metadata={"input_tokens": 7, "output_tokens": 3,
                                                  "total_tokens": 10})])

    async def answer(state: ChatState) -> ChatState:
        reply = await model.ainvoke([HumanMessage(state["question"])])
        return {"reply": str(reply.content)}

    builder = StateGraph(ChatState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    graph = builder.compile()
    sink = MemorySink()
    await graph.ainvoke({"question": "Which venue?"},
                        config={"callbacks": [LangGraphTracer(graph, sinks=[sink])]})
    run = checked(sink.events)
    [started] = of_type(sink.events, "model.started")
    [finished] = of_type(sink.events, "model.finished")
    assert (started.path, started.step, started.call) == ("0", "answer", 1)
    assert started.messages == [{"type": "human", "content": "Which venue?"}]
    assert (finished.path, finished.content, finished.total_tokens) == (
        "0", "Lakeside Lodge", 10)
    assert run.tokens == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    assert run.invocations["0"].tokens == 10
    assert run.state == {"state": {"question": "Which venue?", "reply": "Lakeside Lodge"}}


def test_the_input_step_of_a_conditional_edge_from_start_is_the_turns_input() -> None:
    """A conditional edge from START makes LangGraph run a ``__start__`` task; its writes
    are the invocation's input, so they are the turn's initial state, not a barrier."""

    def route(state: FanState) -> list[Send]:
        return [Send("work", {"i": i}) for i in range(3)]

    builder = StateGraph(FanState)
    builder.add_node("work", lambda arg: {"out": [arg["i"]]})
    builder.add_conditional_edges(START, route, ["work"])
    graph = builder.compile()
    sink = MemorySink()
    result = graph.invoke({"out": [100]},
                          config={"callbacks": [LangGraphTracer(graph, sinks=[sink])]})
    assert result == {"out": [100, 0, 1, 2]}

    run = checked(sink.events)
    assert list(run.barriers) == ["b0"]
    assert [run.invocations[p].key for p in run.barriers["b0"].branches] == [
        "work:0", "work:1", "work:2"]
    [reduced] = of_type(sink.events, "join.reduced")
    assert reduced.initial == [100] and reduced.result == result["out"]
    assert run.state == {"state": result}


def test_checkpoints_the_checkpointer_saved_are_checkpoint_saved_of_their_barriers() -> None:
    builder = StateGraph(PickState)
    builder.add_node("first", lambda state: {"pick": "Lakeside Lodge"})
    builder.add_node("second", lambda state: {"pick": "Riverside Hall"})
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    graph: Any = builder.compile(checkpointer=InMemorySaver())
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    config: Any = {"callbacks": [tracer], "configurable": {"thread_id": "offsite-2"}}
    thread: Any = {"configurable": {"thread_id": "offsite-2"}}
    runs: list[str] = []
    for _ in range(2):
        graph.invoke({}, config=config)
        assert tracer.last_run_id is not None
        runs.append(tracer.last_run_id)
        # LangGraph's own record of the supersteps it saved, newest first.
        steps = [c.metadata["step"] for c in graph.get_state_history(thread)
                 if c.metadata["source"] == "loop"][:2]
        events = runs_of(sink.events)[runs[-1]]
        run = checked(events)
        saved = of_type(events, "checkpoint.saved")
        assert [(e.barrier, e.revision) for e in saved] == [
            ("b0", steps[1]), ("b1", steps[0])]
        assert [run.barriers[b].checkpoint_revision for b in ("b0", "b1")] == steps[::-1]
        joined = {e.barrier: e.seq for e in of_type(events, "join.published")}
        assert all(e.seq > joined[e.barrier] for e in saved)
    assert len(set(runs)) == 2


def test_without_a_checkpointer_nothing_is_saved() -> None:
    sink = MemorySink()
    graph = fan_out_graph()
    graph.invoke({"out": []}, config={"callbacks": [LangGraphTracer(graph, sinks=[sink])],
                                      "configurable": {"thread_id": "t"}})
    assert of_type(sink.events, "checkpoint.saved") == []


# -- what each task waited for (BranchRequest.after) -------------------------------------------


def requests_by_barrier(events: list[Event]) -> list[list[tuple[str, list[str] | None]]]:
    """Each fork's requests as (key, after), in barrier order."""
    return [[(r.key, r.after) for r in e.requests] for e in of_type(events, "barrier.forked")]


def stored_requests(events: list[Event]) -> list[dict[str, Any]]:
    """Every fork's requests as the sinks write them (JSON)."""
    return [r for e in of_type(events, "barrier.forked")
            for r in json.loads(dump_event(e))["requests"]]


@pytest.mark.anyio
@pytest.mark.parametrize("with_graph", [True, False])
async def test_the_seeds_flat_graph_records_which_task_each_task_waited_for(
        with_graph: bool) -> None:
    graph = ab_graph(unit=0)
    sink = MemorySink()
    tracer = LangGraphTracer(graph if with_graph else None, sinks=[sink])
    await graph.ainvoke({"done": []}, config={"callbacks": [tracer]})
    checked(sink.events)
    # A2 was triggered by A1 alone, B2 by B1: LangGraph's superstep made A2 wait for B1.
    after = [["A1"], ["B1"]] if with_graph else [None, None]
    assert requests_by_barrier(sink.events) == [
        [("A1", None), ("B1", None)], [("A2", after[0]), ("B2", after[1])]]
    stored = stored_requests(sink.events)
    if with_graph:
        assert [r.get("after") for r in stored] == [None, None, ["A1"], ["B1"]]
        assert ["after" in r for r in stored] == [False, False, True, True]
    else:  # unknown without the graph's edges: not in the events at all
        assert all("after" not in r for r in stored)


def test_a_fan_in_after_a_send_fan_out_waited_for_every_send_task() -> None:
    builder = StateGraph(FanState)
    builder.add_node("plan", lambda state: {"topic": "fan"})
    builder.add_node("work", lambda arg: {"out": [arg["i"]]})
    builder.add_node("gather", lambda state: {"topic": "gathered"})
    builder.add_edge(START, "plan")
    builder.add_conditional_edges(
        "plan", lambda state: [Send("work", {"i": i}) for i in range(N)], ["work"])
    builder.add_edge("work", "gather")
    graph = builder.compile()
    sink = MemorySink()
    graph.invoke({"out": []}, config={"callbacks": [LangGraphTracer(graph, sinks=[sink])]})
    checked(sink.events)
    sends = [f"work:{i}" for i in range(N)]
    assert requests_by_barrier(sink.events) == [
        [("plan", None)], [(key, ["plan"]) for key in sends], [("gather", sends)]]


class RouteState(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


def test_conditional_edges_and_commands_are_routes_and_an_earlier_join_source_is_unknown(
        ) -> None:
    def node(name: str) -> Any:
        return lambda state: {"done": [name]}

    def finish(state: RouteState) -> Command[Literal["last", "other_last"]]:
        return Command(goto="last", update={"done": ["finish"]})

    builder = StateGraph(RouteState)
    for name in ("router", "side", "x", "y", "z", "joined", "last", "other_last"):
        builder.add_node(name, node(name))
    builder.add_node("finish", finish)
    builder.add_edge(START, "router")
    builder.add_edge(START, "side")
    builder.add_conditional_edges("router", lambda state: "go_x", {"go_x": "x", "go_y": "y"})
    builder.add_edge("side", "z")
    builder.add_edge("x", "finish")
    builder.add_edge(["side", "x"], "joined")  # side ran a superstep before x
    builder.add_edge("joined", END)
    graph = builder.compile()
    sink = MemorySink()
    graph.invoke({"done": []}, config={"callbacks": [LangGraphTracer(graph, sinks=[sink])]})
    checked(sink.events)
    assert requests_by_barrier(sink.events) == [
        [("router", None), ("side", None)],
        [("x", ["router"]), ("z", ["side"])],
        # z has no edge out, so it may route anywhere by returning a Command.
        [("finish", ["x", "z"]), ("joined", None)],
        [("last", ["finish"])]]


class Clock:
    """A monotonic clock the test moves: a node sets the time it ends at."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    time = staticmethod(time.time)


class NodeEnds(BaseCallbackHandler):
    """Sets ``ended[node]`` once a node's task ended (after the tracer saw it end)."""

    run_inline = True

    def __init__(self) -> None:
        self.ended: dict[str, asyncio.Event] = {}
        self.nodes: dict[UUID, str] = {}

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        node = (metadata or {}).get("langgraph_node")
        if node is not None and kwargs.get("name") == node:
            self.nodes[run_id] = node

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self.nodes:
            self.event(self.nodes[run_id]).set()

    def event(self, node: str) -> asyncio.Event:
        return self.ended.setdefault(node, asyncio.Event())


@pytest.mark.anyio
async def test_the_what_if_of_the_seeds_flat_graph_lets_a2_follow_a1_under_local_barriers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's table, recorded from LangGraph: A1 1 unit, B1 10, A2 1, B2 1.

    The clock is the test's, in units: both tasks of a superstep start, then the short one
    moves the clock to its end and ends, then the long one (which waited until the
    tracer had recorded that end) moves it to its own; so the recorded times are the
    seed's exactly."""
    clock, ends = Clock(), NodeEnds()
    # Every stamp of the traced run reads the test's clock: the tracer's callbacks, the
    # bus's start, and the events the bus stamps itself (turn.started, turn.finished).
    monkeypatch.setattr(tracer_module, "time", clock)
    monkeypatch.setattr(bus_module, "time", clock)
    monkeypatch.setattr(ReplayBus, "emit", lambda bus, cls, path="", **fields: bus.emit_at(
        clock.now, cls, path, **fields))
    started = {name: asyncio.Event() for name in ("B1", "B2")}

    def short(name: str, sibling: str, until: float) -> Any:
        async def run(state: RouteState) -> RouteState:
            await started[sibling].wait()  # both tasks started at the superstep's time
            clock.now = until
            return {"done": [name]}
        return run

    def long(name: str, sibling: str, until: float) -> Any:
        async def run(state: RouteState) -> RouteState:
            started[name].set()
            await ends.event(sibling).wait()
            clock.now = until
            return {"done": [name]}
        return run

    builder = StateGraph(RouteState)
    builder.add_node("A1", short("A1", "B1", 1.0))
    builder.add_node("B1", long("B1", "A1", 10.0))
    builder.add_node("A2", short("A2", "B2", 11.0))
    builder.add_node("B2", long("B2", "A2", 11.0))
    builder.add_edge(START, "A1")
    builder.add_edge(START, "B1")
    builder.add_edge("A1", "A2")
    builder.add_edge("B1", "B2")
    graph = builder.compile()
    sink = MemorySink()
    tracer = LangGraphTracer(graph, sinks=[sink])
    await graph.ainvoke({"done": []}, config={"callbacks": [tracer, ends]})
    checked(sink.events)

    report = what_if(sink.events).as_dict()
    schedules = report["schedules"]
    ops = {name: {op["key"]: op for op in s["operations"] if op["kind"] == "branch"}
           for name, s in schedules.items()}
    for name in ("recorded", "supersteps"):  # A2 waits for B1: the superstep barrier
        assert (ops[name]["A2"]["start"], ops[name]["B1"]["end"]) == (10.0, 10.0), name
        assert schedules[name]["total"] == pytest.approx(11.0)
    local = ops["local_barriers"]  # A2 follows A1, as in our runtime
    assert [(local[k]["start"], local[k]["end"]) for k in ("A1", "A2", "B1", "B2")] == [
        (0.0, 1.0), (1.0, 2.0), (0.0, 10.0), (10.0, 11.0)]
    assert schedules["local_barriers"]["total"] == pytest.approx(11.0)
    [wait] = [w for w in schedules["supersteps"]["waits"] if w["key"] == "A2"]
    assert wait["for_keys"] == ["B1"] and wait["wait"] == pytest.approx(9.0)
    # Under local barriers A2 waits for nothing to start (only its barrier's join waits
    # for B2, as the invocation's end does).
    assert [w["at"] for w in schedules["local_barriers"]["waits"] if w["key"] == "A2"] \
        in ([], ["join"])
    assert local["B1"]["path"] not in local["A2"]["waited_for"]


def test_each_send_task_waited_for_the_task_that_sent_it() -> None:
    def work(arg: dict[str, int]) -> Command[Any]:
        i = arg["i"]  # the even ones send a follow-up through their Command
        return Command(update={"out": [i]}, goto=[Send("follow", {"i": i})] if i % 2 == 0
                       else [])

    builder = StateGraph(FanState)
    builder.add_node("p1", lambda state: {})
    builder.add_node("p2", lambda state: {})
    builder.add_node("work", work)
    builder.add_node("follow", lambda arg: {"out": [100 + arg["i"]]})
    builder.add_edge(START, "p1")
    builder.add_edge(START, "p2")
    builder.add_conditional_edges("p1", lambda s: [Send("work", {"i": i}) for i in (0, 1)])
    builder.add_conditional_edges("p2", lambda s: [Send("work", {"i": i}) for i in (2, 3, 4)])
    builder.add_edge("follow", END)
    graph = builder.compile()
    sink = MemorySink()
    result = graph.invoke({"out": []}, config={"callbacks": [LangGraphTracer(graph,
                                                                              sinks=[sink])]})
    assert result["out"] == [0, 1, 2, 3, 4, 100, 102, 104]
    checked(sink.events)
    assert requests_by_barrier(sink.events) == [
        [("p1", None), ("p2", None)],
        [("work:0", ["p1"]), ("work:1", ["p1"]), ("work:2", ["p2"]), ("work:3", ["p2"]),
         ("work:4", ["p2"])],
        [("follow:0", ["work:0"]), ("follow:1", ["work:2"]), ("follow:2", ["work:4"])]]


def test_a_send_whose_sender_the_callbacks_did_not_show_waits_for_every_possible_sender(
        ) -> None:
    topology = Topology(targets={"plan": None, "side": frozenset({"end"})},
                        senders=frozenset({"plan"}), joins={}, deferred=frozenset())
    unseen = [Previous("plan", "plan"), Previous("side", "side")]
    assert senders_of(unseen, [(0, "work")]) is None
    assert predecessors(topology, unseen, "work", push=True) == ["plan"]
    # Every task could have sent it: the same as waiting for the whole superstep, which
    # is what unknown means (and no list of every key on every request).
    everyone = [Previous("plan", f"plan:{i}") for i in range(3)]
    assert predecessors(topology, everyone, "work", push=True) is None
    # Sends that do not account for the PUSH tasks exactly name no sender.
    shown = [Previous("plan", "plan", ("work", "work"))]
    assert senders_of(shown, [(0, "work"), (1, "work")]) == {0: "plan", 1: "plan"}
    assert senders_of(shown, [(0, "work")]) is None
    assert senders_of(shown, [(0, "work"), (1, "other")]) is None
