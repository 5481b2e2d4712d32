"""OTLP/JSON out: a run's record as an OpenTelemetry trace, parsed back with the official
protobuf classes (``opentelemetry-proto``), with the span tree the run had."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.test import AsyncClient
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from picoflow_web.data import otlp_export
from picoflow_web.execute import services
from picoflow_web.models import Project
from runtime.events import parse_event
from runtime.integrations.otel import OtelSink
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done

GOLDEN = Path(__file__).parents[1] / "golden"


def golden(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines()]


def spans(data: trace_pb2.TracesData) -> list[trace_pb2.Span]:
    (resource,) = data.resource_spans
    (scope,) = resource.scope_spans
    return list(scope.spans)


def attrs(span: trace_pb2.Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        out[kv.key] = [getattr(v, v.WhichOneof("value")) for v in value.values] \
            if kind == "array_value" else value
    return out


def tree(data: trace_pb2.TracesData) -> list[Any]:
    """The spans as nested ``[name, [children]]``, children in start order."""
    every = spans(data)
    children: dict[bytes, list[trace_pb2.Span]] = {}
    for span in every:
        children.setdefault(span.parent_span_id, []).append(span)

    def build(span: trace_pb2.Span) -> list[Any]:
        kids = sorted(children.get(span.span_id, []), key=lambda s: s.start_time_unix_nano)
        return [span.name, [build(kid) for kid in kids]]

    return [build(root) for root in children[b""]]


def test_a_nested_fan_out_is_one_trace_with_the_run_s_span_tree() -> None:
    text = otlp_export.to_json(golden("nested_fanout"))
    body = json.loads(text)
    first = body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first["traceId"]) == 32 and len(first["spanId"]) == 16  # hex, as OTLP/JSON
    data = otlp_export.parse(text)
    assert len({span.trace_id for span in spans(data)}) == 1
    finder = [["chat demo-model", []]]
    assert tree(data) == [["turn ResearchFlow", [
        ["chat demo-model", []],
        ["execute_tool research", [["barrier b0", [
            ["branch Planner", [
                ["chat demo-model", []],
                ["execute_tool plan_queries", [["barrier 0/b0", [
                    ["branch papers", finder], ["branch news", finder]]]]]]],
            ["branch archive", finder]]]]],
        ["chat demo-model", []]]]]
    by_name = {span.name: span for span in spans(data)}
    barrier = attrs(by_name["barrier 0/b0"])
    assert (barrier["picoflow.barrier.policy"], barrier["picoflow.barrier.path"],
            barrier["picoflow.barrier.outcome"]) == ("retain-successes", "0", "published")
    assert barrier["picoflow.barrier.target"] == "caller-scope"
    assert barrier["picoflow.barrier.published"]
    news = attrs(by_name["branch news"])
    assert (news["picoflow.branch.key"], news["picoflow.branch.path"],
            news["picoflow.branch.publication"]) == ("news", "0.1", "published")
    model = attrs(spans(data)[1])
    assert model["gen_ai.usage.input_tokens"] >= 0 and model["gen_ai.request.model"]
    assert otlp_export.to_json(golden("nested_fanout")) == text  # ids derive from the run


def test_an_atomic_batch_that_failed_publishes_nothing_in_the_trace_too() -> None:
    data = otlp_export.parse(otlp_export.to_json(golden("atomic_failure")))
    barrier = next(s for s in spans(data) if s.name.startswith("barrier"))
    assert attrs(barrier)["picoflow.barrier.outcome"] == "nothing published"
    assert attrs(barrier)["picoflow.barrier.published"] == []
    branches = [s for s in spans(data) if s.name.startswith("branch")]
    assert branches and all(attrs(b)["picoflow.branch.publication"] == "discarded"
                            for b in branches)
    failed = [b for b in branches if b.status.code == trace_pb2.Status.STATUS_CODE_ERROR]
    assert len(failed) == 1 and attrs(failed[0])["picoflow.branch.status"] == "rejected"


def test_an_interrupted_run_s_open_spans_end_with_its_record() -> None:
    events = golden("interrupted")
    data = otlp_export.parse(otlp_export.to_json(events))
    last = int(max(e["time"] for e in events) * 1e9)
    unfinished = [s for s in spans(data) if attrs(s).get("picoflow.unfinished")]
    assert unfinished and all(s.end_time_unix_nano == last for s in unfinished)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("demo_latency")
async def test_a_stored_run_is_exported_by_the_command_and_the_api(tmp_path: Path) -> None:
    run = await services.run_start(flow="ResearchFlow", message="Research tide pools")
    run = await wait_run_done(run.id)
    target = tmp_path / "run.json"
    await sync_to_async(call_command)("export_otlp", run.id, "-o", str(target))
    from_command = otlp_export.parse(target.read_text())
    assert tree(from_command)[0][0] == "turn ResearchFlow"
    assert any(s.name == "barrier 0/b0" for s in spans(from_command))

    client = AsyncClient()
    auth = bearer(await atoken(await amake_user()))
    response = await client.get(f"/api/runs/{run.id}/otlp", headers=auth)
    assert response.status_code == 200
    assert "attachment" in response["Content-Disposition"]
    assert otlp_export.parse(response.content.decode()) == from_command

    target_pb = tmp_path / "run.pb"
    await sync_to_async(call_command)("export_otlp", run.id, "--protobuf", "-o",
                                      str(target_pb))
    assert otlp_export.parse_protobuf(target_pb.read_bytes()) == from_command
    for accept, media in [
            ("application/x-protobuf", otlp_export.PROTOBUF),
            ("application/json, application/x-protobuf", otlp_export.PROTOBUF),
            ("application/x-protobuf;q=0.5, application/json", "application/json"),
            ("application/x-protobuf;q=0", "application/json"),
            ("application/json", "application/json"),
            ("*/*", "application/json")]:
        answered = await client.get(f"/api/runs/{run.id}/otlp",
                                    headers={**auth, "Accept": accept})
        assert (answered.status_code, answered["Content-Type"]) == (200, media), accept
        assert answered["Vary"] == "Accept"
        parsed = (otlp_export.parse_protobuf(answered.content) if media != "application/json"
                  else otlp_export.parse(answered.content.decode()))
        assert parsed == from_command
        assert answered["Content-Disposition"].endswith(
            '.otlp.pb"' if media != "application/json" else '.otlp.json"')

    await Project.objects.acreate(name="q")
    stranger = bearer(await atoken(await amake_user("quinn", project="q"), project="q"))
    refused = await client.get(f"/api/runs/{run.id}/otlp", headers=stranger)
    assert (refused.status_code, refused.json()["error_code"]) == (404, "not_found")
    with pytest.raises(CommandError, match="No run"):
        await sync_to_async(call_command)("export_otlp", "no-such-run")


def test_model_and_tool_spans_carry_the_prompt_the_answer_and_the_arguments() -> None:
    data = otlp_export.parse(otlp_export.to_json(golden("nested_fanout")))
    chats = [attrs(s) for s in spans(data) if s.name.startswith("chat ")]
    first = chats[0]
    assert first["gen_ai.operation.name"] == "chat"
    assert (first["gen_ai.system"], first["gen_ai.request.model"]) == ("scripted", "demo-model")
    prompt = json.loads(first["gen_ai.input.messages"])
    assert prompt[0]["role"] == "system" and prompt[-1] == {
        "role": "user", "parts": [{"type": "text", "content": "Research tide pools"}]}
    (answer,) = json.loads(first["gen_ai.output.messages"])
    assert answer["role"] == "assistant" and answer["finish_reason"] == "tool_calls"
    assert answer["parts"] == [{"type": "tool_call", "id": "call_research_3",
                                "name": "research", "arguments": {"topic": "tide pools"}}]
    assert first["gen_ai.usage.input_tokens"] == 31 and first["gen_ai.usage.output_tokens"] == 7
    last = json.loads(chats[-1]["gen_ai.output.messages"])[0]["parts"][0]
    assert last["type"] == "text" and last["content"].startswith("Research done.")
    (tool,) = [attrs(s) for s in spans(data) if s.name == "execute_tool research"]
    assert tool["gen_ai.tool.name"] == "research"
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"topic": "tide pools"}
    assert tool["gen_ai.tool.call.result"]


def test_the_trace_id_is_a_hex_run_id_and_the_protobuf_is_what_exporters_post() -> None:
    run_id = uuid.uuid4().hex
    events = [{**e, "run_id": run_id} for e in golden("nested_fanout")]
    body = otlp_export.to_protobuf(events)
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    assert {s.trace_id.hex() for r in request.resource_spans for sc in r.scope_spans
            for s in sc.spans} == {run_id}
    assert otlp_export.parse_protobuf(body) == otlp_export.parse(otlp_export.to_json(events))


def test_the_export_and_the_live_sink_send_the_same_spans() -> None:
    """The golden run's events through OtelSink (the SDK) and through the export: same
    ids, parents, names, times, attributes, events and statuses."""
    events = golden("atomic_failure")
    exporter = InMemorySpanExporter()
    sink = OtelSink(SimpleSpanProcessor(exporter))
    for line in events:
        sink.receive(parse_event(json.dumps(line)))
    sink.close()
    live = {span.context.span_id.to_bytes(8, "big"): span
            for span in exporter.get_finished_spans()}
    exported = {span.span_id: span for span in spans(otlp_export.parse(
        otlp_export.to_json(events)))}
    assert live.keys() == exported.keys()
    for key, span in exported.items():
        sent = live[key]
        assert sent.name == span.name
        assert sent.context.trace_id.to_bytes(16, "big") == span.trace_id
        assert (sent.parent.span_id.to_bytes(8, "big") if sent.parent else b"") == \
            span.parent_span_id
        assert (sent.start_time, sent.end_time) == (span.start_time_unix_nano,
                                                    span.end_time_unix_nano)
        assert {k: list(v) if isinstance(v, tuple) else v
                for k, v in (sent.attributes or {}).items()} == attrs(span)
        assert [e.name for e in sent.events] == [e.name for e in span.events]
        assert (sent.status.status_code == StatusCode.ERROR) == (
            span.status.code == trace_pb2.Status.STATUS_CODE_ERROR)
