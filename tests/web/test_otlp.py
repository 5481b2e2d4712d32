"""OTLP/JSON out: a run's record as an OpenTelemetry trace, parsed back with the official
protobuf classes (``opentelemetry-proto``), with the span tree the run had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.test import AsyncClient
from opentelemetry.proto.trace.v1 import trace_pb2

from picoflow_web.data import otlp_export
from picoflow_web.execute import services
from picoflow_web.models import Project
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
        ["tool research", [["barrier b0", [
            ["branch Planner", [
                ["chat demo-model", []],
                ["tool plan_queries", [["barrier 0/b0", [
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

    await Project.objects.acreate(name="q")
    stranger = bearer(await atoken(await amake_user("quinn", project="q"), project="q"))
    refused = await client.get(f"/api/runs/{run.id}/otlp", headers=stranger)
    assert (refused.status_code, refused.json()["error_code"]) == (404, "not_found")
    with pytest.raises(CommandError, match="No run"):
        await sync_to_async(call_command)("export_otlp", "no-such-run")
