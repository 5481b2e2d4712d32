"""LangGraphTracer on real LangGraph graphs: supersteps are barriers, tasks are branches.

No part of LangGraph is mocked: each test compiles a StateGraph and invokes it with the
tracer as a LangChain callback, then checks the events (validated against the schema and
folded) against what LangGraph itself did.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
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
from runtime.integrations.langgraph import LangGraphTracer
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
            assert chunks[-1] == {"work": {"out": [N - 1]}}
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
