"""OtelSink: demo flows run with the sink on the official SDK, exporting into an in-memory
exporter; the span tree is compared with the run's barrier tree (the fold of the same
events) and with the mapping the dashboard's export uses."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from picoflow_web.demos.parallel import atomic_flow, conflict_flow, research_flow
from runtime import FlowEngine
from runtime.engine import otel_from_env
from runtime.events import Event, MemorySink, fold, parse_event
from runtime.integrations.otel import OtelSink, span_id, spans_of, trace_id
from tests.livedaphne import SharedServer
from tests.webhelpers import HttpSession, bearer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
LATENCY = 0.001


async def run_with_sink(factory: Callable[[float], tuple[Any, Any]], message: str,
                        *processors: SpanProcessor, capacity: int = 65536,
                        ) -> tuple[list[Event], OtelSink]:
    flow, model = factory(LATENCY)
    memory = MemorySink()
    sink = OtelSink(*processors, capacity=capacity)
    engine = FlowEngine(flows=[flow], model_override=model, ship_to_dashboard=False,
                        sinks=[memory, sink])
    await engine.run(flow.id, message)
    await engine.close()
    return memory.events, sink


async def traced(factory: Callable[[float], tuple[Any, Any]], message: str
                 ) -> tuple[list[Event], list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    events, sink = await run_with_sink(factory, message, SimpleSpanProcessor(exporter))
    sink.flush()
    sink.close()
    return events, list(exporter.get_finished_spans())


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_nested_fan_out_s_spans_are_its_barrier_tree() -> None:
    events, spans = await traced(research_flow, "Research tide pools")
    run = fold(events)
    assert run.status == "finished"
    by_id = {span.context.span_id: span for span in spans}
    (root,) = [span for span in spans if span.parent is None]
    assert root.name == "turn ResearchFlow"
    assert {span.context.trace_id for span in spans} == {int(run.run_id, 16)}
    assert attrs(root)["picoflow.turn.status"] == "finished"

    barrier_spans = {attrs(s)["picoflow.barrier.id"]: s for s in spans
                     if s.name.startswith("barrier ")}
    assert set(barrier_spans) == set(run.barriers) and len(run.barriers) == 2
    for barrier_id, barrier in run.barriers.items():
        span = barrier_spans[barrier_id]
        assert span.name == f"barrier {barrier_id}"
        assert attrs(span)["picoflow.barrier.outcome"] == barrier.outcome == "published"
        children = sorted((s for s in spans if parent_of(s) == span.context.span_id),
                          key=lambda s: attrs(s)["picoflow.branch.index"])
        assert [attrs(s)["picoflow.branch.path"] for s in children] == barrier.branches
        assert [s.name for s in children] == [
            f"branch {run.invocations[path].key}" for path in barrier.branches]
        # The barrier nests in its caller: the turn, or the branch that forked it.
        ancestor = by_id[parent_of(span)]  # type: ignore[index]
        while not ancestor.name.startswith(("branch ", "turn ")):
            ancestor = by_id[parent_of(ancestor)]  # type: ignore[index]
        assert ancestor.name == ("turn ResearchFlow" if not barrier.caller
                                 else f"branch {run.invocations[barrier.caller].key}")
        for child in children:
            invocation = run.invocations[attrs(child)["picoflow.branch.path"]]
            assert attrs(child)["picoflow.branch.status"] == invocation.status
            (began,) = [e.time for e in events
                        if e.type == "branch.started" and e.path == invocation.path]
            (ended,) = [e.time for e in events
                        if e.type == "branch.fulfilled" and e.path == invocation.path]
            assert (child.start_time, child.end_time) == (int(began * 1e9), int(ended * 1e9))
            assert child.status.status_code == StatusCode.OK
        assert any(a.start_time < b.end_time and b.start_time < a.end_time  # type: ignore[operator]
                   for a in children for b in children if a is not b)  # they overlap

    chats = [s for s in spans if s.name.startswith("chat ")]
    finished = [e for e in events if e.type == "model.finished"]
    assert len(chats) == len(finished) == 6
    for chat in chats:
        gen_ai = attrs(chat)
        assert gen_ai["gen_ai.operation.name"] == "chat"
        assert gen_ai["gen_ai.request.model"] == "demo-model"
        assert gen_ai["gen_ai.usage.input_tokens"] > 0
        assert gen_ai["gen_ai.usage.output_tokens"] > 0
        assert '"role": "user"' in gen_ai["gen_ai.input.messages"]
        assert '"role": "assistant"' in gen_ai["gen_ai.output.messages"]
    assert sum(attrs(c)["gen_ai.usage.input_tokens"] for c in chats) == sum(
        e.input_tokens for e in finished)  # type: ignore[union-attr]
    tools = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "execute_tool"]
    assert sorted(s.name for s in tools) == ["execute_tool plan_queries",
                                             "execute_tool research"]

    # The same spans, ids and attributes as the dashboard's export builds from the record.
    record = spans_of(e.model_dump(mode="json") for e in events)
    exported = {int.from_bytes(span_id(run.run_id, s.key), "big"): s
                for s in record.spans.values()}
    assert set(exported) == set(by_id)
    for sid, span in by_id.items():
        mapped = exported[sid]
        assert span.name == mapped.name
        assert parent_of(span) == (int.from_bytes(span_id(run.run_id, mapped.parent), "big")
                                   if mapped.parent else None)
        assert attrs(span).keys() == mapped.attributes.keys()
    assert trace_id(run.run_id).hex() == run.run_id


async def test_a_conflict_and_a_rejected_branch_are_errors_with_their_events() -> None:
    events, spans = await traced(conflict_flow, "Plan the offsite")
    (barrier,) = [s for s in spans if s.name.startswith("barrier ")]
    assert barrier.status.status_code == StatusCode.ERROR
    assert attrs(barrier)["picoflow.barrier.outcome"] == "invalidated"
    assert [e.name for e in barrier.events] == ["join.invalidated"]
    assert fold(events).conflicts == [attrs(barrier)["picoflow.barrier.id"]]

    events, spans = await traced(atomic_flow, "Book the trip")
    branches = {s.name: s for s in spans if s.name.startswith("branch ")}
    assert branches["branch car"].status.status_code == StatusCode.ERROR
    assert attrs(branches["branch car"])["picoflow.branch.status"] == "rejected"
    assert all(attrs(b)["picoflow.branch.publication"] == "discarded"
               for b in branches.values())


def test_a_branch_cancelled_before_it_started_is_a_zero_length_span_that_never_ran() -> None:
    exporter = InMemorySpanExporter()
    sink = OtelSink(SimpleSpanProcessor(exporter))
    for line in (ROOT / "tests" / "golden" / "cancellation.jsonl").read_text().splitlines():
        sink.receive(parse_event(line))
    sink.flush()
    sink.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    barrier = spans["barrier b0"]
    for name in ("branch south", "branch east"):
        never = spans[name]
        assert never.start_time == never.end_time
        assert parent_of(never) == barrier.context.span_id
        assert never.status.status_code == StatusCode.ERROR
        assert attrs(never)["picoflow.branch.started"] is False
        assert attrs(never)["picoflow.branch.step"] == attrs(spans["branch north"])[
            "picoflow.branch.step"]
    assert "picoflow.branch.started" not in attrs(spans["branch legacy"])


class GatedProcessor(SpanProcessor):
    """Holds the sink's thread at the first span it ends until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.reached = threading.Event()
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.reached.set()
        self.gate.wait()
        self.ended.append(span)


async def test_a_stuck_exporter_never_holds_the_turn_and_drops_are_reported() -> None:
    processor = GatedProcessor()
    events, sink = await run_with_sink(research_flow, "Research tide pools", processor,
                                       capacity=4)
    assert fold(events).status == "finished"  # the turn ended with the processor stuck
    overflows = [e for e in events if e.type == "sink.overflowed"]
    assert overflows and {e.sink for e in overflows} == {"otel"}  # type: ignore[union-attr]
    assert [e.type for e in events][-2:] == ["turn.finished", "sink.overflowed"]
    processor.gate.set()
    sink.close()
    # The turn's end got in: the spans the drops left open ended with it.
    assert "turn ResearchFlow" in [span.name for span in processor.ended]
    assert all(span.end_time is not None for span in processor.ended)


def test_picoflow_otel_switches_the_sink_on_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert otel_from_env({}) is None
    assert otel_from_env({"PICOFLOW_OTEL": "0"}) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    sink = otel_from_env({"PICOFLOW_OTEL": "1"})
    assert isinstance(sink, OtelSink)
    assert sink.provider.resource.attributes["service.name"] == "picoflow"
    sink.close()
    named = otel_from_env({"PICOFLOW_OTEL": "1", "OTEL_SERVICE_NAME": "desk"})
    assert isinstance(named, OtelSink)
    assert named.provider.resource.attributes["service.name"] == "desk"
    named.close()


def test_the_core_loads_the_integration_only_when_switched_on() -> None:
    probe = (
        "import sys\n"
        "from runtime import FlowEngine\n"
        "FlowEngine()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', "
        "'runtime.integrations'))))\n"
        "import os; os.environ['PICOFLOW_OTEL'] = '1'\n"
        "engine = FlowEngine()\n"
        "print(type(engine.otel).__name__, 'runtime.integrations.otel.sink' in sys.modules)\n"
        "engine.otel.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PICOFLOW_OTEL"}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT, env=env)
    assert result.stdout.splitlines() == ["[]", "OtelSink True"]


def barrier_tree(run: Any) -> list[tuple[int, list[str]]]:
    """Each barrier as (its depth, its branches' keys in request order), in fork order."""
    return sorted(((barrier.caller.count(".") + bool(barrier.caller),
                    [run.invocations[path].key.removeprefix("branch ")
                     for path in barrier.branches])
                   for barrier in run.barriers.values()), key=lambda item: item[0])


def test_a_run_sent_with_picoflow_otel_to_our_receiver_draws_the_same_barrier_tree(
        shared_daphne: SharedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server = shared_daphne.server
    monkeypatch.setenv("PICOFLOW_OTEL", "1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.base_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS",
                       f"Authorization=Bearer%20{shared_daphne.token}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "otel-sink-test")
    flow, model = research_flow(LATENCY)
    memory = MemorySink()

    async def run() -> None:
        engine = FlowEngine(flows=[flow], model_override=model, ship_to_dashboard=False,
                            sinks=[memory])
        assert isinstance(engine.otel, OtelSink)
        await engine.run(flow.id, "Research tide pools")
        await engine.close()  # flushes the batch processor: every span is sent

    anyio.run(run)
    sent = fold(memory.events)
    answer = HttpSession(server.base_url).request(
        "GET", f"/api/runs/{sent.run_id}/events?limit=1000",
        headers=bearer(shared_daphne.token))
    assert answer.status == 200, answer.body
    received = fold([parse_event(e) for e in answer.json()["events"]])
    assert received.run_id == sent.run_id  # the trace id is the run id
    assert received.status == "finished" and received.anomalies == []
    assert barrier_tree(received) == barrier_tree(sent) == [
        (0, ["Planner", "archive"]), (1, ["papers", "news"])]
