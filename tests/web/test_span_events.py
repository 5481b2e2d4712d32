"""Spans as a run's events (picoflow_web.record.span_events): overlapping children are an
inferred barrier, sequential ones stay sequential, GenAI and tool spans are calls, errors
reject branches and fail calls and turns; the events fold without anomalies, whatever
order the spans came in; our own export comes back as the same barrier tree."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from picoflow_web.record.span_events import PENDING_ROOT, Span, clusters, derive, tree
from runtime.events import fold, parse_event, values

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
TRACE = "0af7651916cd43dd8448eb211c80319c"
MS = 1_000_000
T0 = 1_700_000_000_000 * MS


def span(span_id: str, parent: str, name: str, start: int, end: int, **more: Any) -> Span:
    return Span(span_id=span_id.rjust(16, "0"), parent_span_id=parent.rjust(16, "0")
                if parent else "", name=name, start=T0 + start * MS, end=T0 + end * MS,
                resource={"service.name": "agent"}, **more)


def fan_out() -> list[Span]:
    """A root, six overlapping tool children and one GenAI span after them."""
    spans = [span("1", "", "agent", 0, 100)]
    spans += [span(f"{i + 2}", "1", "search", 10 + i, 40 + i,
                   attributes={"gen_ai.operation.name": "execute_tool",
                               "gen_ai.tool.name": "search"}) for i in range(6)]
    spans.append(span("9", "1", "chat gpt-x", 50, 90, attributes={
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
        "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 5,
        "gen_ai.input.messages": '[{"role": "user", "content": "hi"}]'}))
    return spans


def folded(spans: list[Span], **kwargs: Any) -> Any:
    events = derive(TRACE, TRACE, spans, **kwargs)
    assert [e.seq for e in events] == list(range(len(events)))  # type: ignore[attr-defined]
    offsets = [e.offset for e in events]  # type: ignore[attr-defined]
    assert offsets == sorted(offsets)
    model = fold(events)  # type: ignore[arg-type]
    assert model.anomalies == []
    return events, model


def test_six_overlapping_children_are_one_barrier_of_six_branches_and_a_model_call() -> None:
    events, model = folded(fan_out())
    assert model.status == "finished" and model.flow == "OpenTelemetry:agent"
    assert list(model.barriers) == ["b0"]
    barrier = model.barriers["b0"]
    assert barrier.branches == ["0", "1", "2", "3", "4", "5"]
    assert barrier.outcome == "published"
    keys = [model.invocations[p].key for p in barrier.branches]
    assert keys == [f"search:{i}" for i in range(6)]
    assert all(model.invocations[p].status == "fulfilled" for p in barrier.branches)
    assert model.tokens == {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17}
    started = next(e for e in events if e.type == "model.started")
    assert started.model["name"] == "gpt-x"  # type: ignore[attr-defined]
    assert started.messages == [{"role": "user", "content": "hi"}]  # type: ignore[attr-defined]
    assert sum(e.type == "tool.started" for e in events) == 6
    assert events[0].time == T0 / 1e9  # type: ignore[attr-defined]


def test_the_same_spans_in_any_order_give_the_same_events() -> None:
    spans = fan_out()
    expected = [e.model_dump() for e in derive(TRACE, TRACE, spans)]
    for seed in range(5):
        shuffled = spans[:]
        random.Random(seed).shuffle(shuffled)
        assert [e.model_dump() for e in derive(TRACE, TRACE, shuffled)] == expected


def test_sequential_children_stay_sequential() -> None:
    spans = [span("1", "", "root", 0, 100), span("2", "1", "plan", 0, 30),
             span("3", "1", "act", 30, 60), span("4", "1", "report", 70, 90)]
    events, model = folded(spans)
    assert model.barriers == {}
    assert [e.step for e in events if e.type == "step.entered"] == [  # type: ignore[attr-defined]
        "root", "plan", "act", "report"]


def test_a_failed_branch_is_rejected_and_an_error_root_fails_the_turn() -> None:
    spans = [span("1", "", "root", 0, 100, status_code=2, status_message="boom"),
             span("2", "1", "a", 10, 50),
             span("3", "1", "b", 20, 60, events=[{"name": "exception", "time": T0, "attributes": {
                 "exception.type": "KeyError", "exception.message": "k"}}])]
    _, model = folded(spans)
    assert model.status == "failed" and model.error["message"] == "boom"
    branch = model.invocations["1"]
    assert branch.status == "rejected" and branch.error["type"] == "KeyError"
    assert model.barriers["b0"].discarded == [{"index": 1, "key": "b", "reason": "rejected"}]


def test_nested_overlap_is_a_nested_barrier_and_a_child_clock_before_its_parent_is_moved() -> None:
    spans = [span("1", "", "root", 0, 100), span("2", "1", "left", 10, 80),
             span("3", "1", "right", 10, 80), span("4", "2", "x", 5, 40),
             span("5", "2", "y", 20, 50)]
    _, model = folded(spans)
    assert set(model.barriers) == {"b0", "0/b0"}
    assert model.barriers["0/b0"].branches == ["0.0", "0.1"]


def test_without_its_root_the_turn_stays_open_and_the_orphans_are_its_children() -> None:
    spans = [span("2", "1", "a", 10, 50), span("3", "1", "b", 20, 60)]
    events, model = folded(spans, ended=False)
    assert model.status == "running"
    assert events[-1].type != "turn.finished"
    assert model.barriers["b0"].branches == ["0", "1"]
    root, _ = tree(spans)
    assert root.span.name == PENDING_ROOT and [c.span.name for c in root.children] == ["a", "b"]


def test_spans_that_start_after_the_stored_ones_only_add_events_at_the_end() -> None:
    first = [span("2", "1", "a", 10, 50)]
    later = [*first, span("3", "1", "b", 60, 70)]
    before = [e.model_dump() for e in derive(TRACE, TRACE, first, ended=False)]
    after = [e.model_dump() for e in derive(TRACE, TRACE, later, ended=False)]
    assert after[:len(before)] == before and len(after) > len(before)


def test_clusters_group_only_what_overlaps() -> None:
    spans = [span("1", "", "r", 0, 100), span("2", "1", "a", 0, 10), span("3", "1", "b", 10, 20),
             span("4", "1", "c", 15, 30), span("5", "1", "d", 40, 50)]
    root, _ = tree(spans)
    assert [[n.span.name for n in group] for group in clusters(root.children)] == [
        ["a"], ["b", "c"], ["d"]]


def test_a_barrier_span_of_our_own_export_forks_its_children_even_one_at_a_time() -> None:
    spans = [span("1", "", "turn", 0, 100),
             span("2", "1", "barrier b0", 10, 60, attributes={"picoflow.barrier.id": "b0"})]
    spans += [span(f"{i + 3}", "2", f"branch {i}", 10 + 15 * i, 20 + 15 * i, attributes={
        "picoflow.branch.key": f"k{i}", "picoflow.branch.step": "Worker"}) for i in range(3)]
    events, model = folded(spans)
    assert list(model.barriers) == ["b0"] and model.barriers["b0"].caller == ""
    assert [model.invocations[p].key for p in model.barriers["b0"].branches] == ["k0", "k1", "k2"]
    assert {model.invocations[p].step for p in model.barriers["b0"].branches} == {"Worker"}
    assert [e.step for e in events if e.type == "step.entered"] == ["turn"]  # type: ignore[attr-defined]


def golden_runs_with_a_barrier() -> list[tuple[str, str]]:
    """(golden, run id) of every golden run that forks a barrier."""
    found = []
    for path in sorted(GOLDEN.glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        found += list(dict.fromkeys((path.stem, line["run_id"]) for line in lines
                                    if line["type"] == "barrier.forked"))
    return found


def barrier_tree(model: Any) -> tuple[str, dict[str, Any]]:
    """The run's status and its barriers by caller path: each barrier's outcome and its
    branches (key, step, status, cancelled, never started, interrupted) in request order."""
    def branch(path: str) -> tuple[Any, ...]:
        inv = model.invocations[path]
        return (inv.key, inv.step, inv.status, inv.cancelled, inv.started is None,
                inv.interrupted)

    return model.status, {
        barrier_id: (barrier.caller, barrier.outcome, [branch(p) for p in barrier.branches])
        for barrier_id, barrier in model.barriers.items()}


@pytest.mark.parametrize(("golden", "run_id"), golden_runs_with_a_barrier())
def test_our_own_export_comes_back_as_the_same_barrier_tree(golden: str, run_id: str) -> None:
    """A recorded run exported as OTLP (picoflow_web.data.otlp_export) and derived back from
    its spans: the same barriers, with the same branches in the same order and outcomes —
    branches cancelled before they started, joins invalidated, a failed checkpoint, a
    cancelled or interrupted turn included."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    from picoflow_web.data import otlp_export
    from picoflow_web.http.otlp_receiver import received_of

    lines = [line for line in map(json.loads, (GOLDEN / f"{golden}.jsonl").read_text()
                                  .splitlines()) if line["run_id"] == run_id]
    message = trace_service_pb2.ExportTraceServiceRequest()
    message.ParseFromString(otlp_export.to_protobuf(lines))
    ((_, spans),) = received_of(message).spans.items()
    _, back = folded(spans)
    original = fold([parse_event(line) for line in lines])
    assert barrier_tree(back) == barrier_tree(original)
    assert barrier_tree(original)[1] != {}


def test_the_golden_runs_with_a_barrier_include_cancelled_and_interrupted_ones() -> None:
    assert {golden for golden, _ in golden_runs_with_a_barrier()} >= {
        "ab_timing", "cancellation", "cancelled", "interrupted", "nested_fanout"}


def test_a_span_whose_parent_is_in_another_process_is_the_root() -> None:
    spans = [span("2", "1", "agent", 0, 100, remote_parent=True),
             span("3", "2", "a", 10, 50), span("4", "2", "b", 20, 60)]
    root, _ = tree(spans)
    assert root.span.name == "agent"
    _, model = folded(spans)
    assert model.status == "finished" and list(model.barriers) == ["b0"]


def test_a_branch_s_span_attributes_are_its_params_for_the_inspector() -> None:
    spans = fan_out()
    spans[1].attributes["query"] = "x" * 100_000  # a prompt-sized value is cut, as events are
    events, _ = folded(spans)
    forked = next(e for e in events if e.type == "barrier.forked")
    params = forked.requests[0].params  # type: ignore[attr-defined]
    assert params["gen_ai.tool.name"] == "search"
    assert params["query"] != "x" * 100_000 and "x" * 100 in json.dumps(params["query"])
    # The structure our own export writes is the tree, not an attribute to show.
    exported = [span("1", "", "agent", 0, 100),
                span("2", "1", "b0", 10, 60, attributes={"picoflow.barrier.id": "b0"}),
                span("3", "2", "step", 10, 50, attributes={
                    "picoflow.branch.key": "k", "picoflow.branch.index": 0, "city": "Lisbon"})]
    events, _ = folded(exported)
    (request,) = next(e for e in events if e.type == "barrier.forked").requests  # type: ignore[attr-defined]
    assert request.params == {"city": "Lisbon"}


def test_a_fork_wider_than_a_page_is_derived_in_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(values, "FORK_PAGE", 4)
    events, model = folded(fan_out())
    (head,) = [e for e in events if e.type == "barrier.forked"]
    (page,) = [e for e in events if e.type == "barrier.requested"]
    assert (head.count, len(head.requests)) == (6, 4)  # type: ignore[attr-defined]
    assert (page.first, [r.path for r in page.requests]) == (4, ["4", "5"])  # type: ignore[attr-defined]
    assert page.seq == head.seq + 1  # type: ignore[attr-defined]
    assert model.barriers["b0"].branches == ["0", "1", "2", "3", "4", "5"]


def test_a_paged_fork_exports_its_count_as_the_barrier_s_branches() -> None:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    from picoflow_web.data import otlp_export
    from picoflow_web.http.otlp_receiver import received_of

    lines = [json.loads(line) for line in (GOLDEN / "paged_fork.jsonl").read_text().splitlines()]
    message = trace_service_pb2.ExportTraceServiceRequest()
    message.ParseFromString(otlp_export.to_protobuf(lines))
    ((_, spans),) = received_of(message).spans.items()
    (barrier,) = [s for s in spans if s.attributes.get("picoflow.barrier.id") == "b0"
                  and "picoflow.barrier.branches" in s.attributes]
    assert barrier.attributes["picoflow.barrier.branches"] == 3
