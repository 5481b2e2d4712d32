"""``POST /v1/traces`` over a live Daphne, fed by the real OpenTelemetry SDK and exporter:
a trace becomes a run whose id is the trace id, with an inferred barrier and a model
call; OTLP/JSON and gzip; spans split over requests and out of order; refusals (bad body,
no token, a read token, another project's token, other content types) store nothing."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from picoflow_web.record.ingest import MAX_BODY_BYTES
from runtime.events import fold, parse_event
from tests.livedaphne import LiveDaphne, SharedServer, run_manage
from tests.webhelpers import HttpSession, bearer

MS = 1_000_000
PROTOBUF = "application/x-protobuf"

MAKE_TOKENS = (
    "from django.contrib.auth import get_user_model; "
    "from picoflow_web.models import ApiToken, Membership, Project; "
    "user = get_user_model().objects.create_user('otlp-reader'); "
    "other = get_user_model().objects.create_user('otlp-other'); "
    "Membership.objects.create(project=Project.objects.get_or_create(name='default')[0], "
    "user=user, role='operator'); "
    "Membership.objects.create(project=Project.objects.get_or_create(name='otlp-other')[0], "
    "user=other, role='operator'); "
    "print(ApiToken.issue(user, 'r', ('read',))[1]); "
    "print(ApiToken.issue(other, 'o', ('read', 'ingest'), project="
    "Project.objects.get(name='otlp-other'))[1])"
)


@pytest.fixture(scope="module")
def live(shared_daphne: SharedServer) -> Iterator[dict[str, Any]]:
    made = run_manage("shell", "-c", MAKE_TOKENS, env=shared_daphne.server.env)
    assert made.returncode == 0, made.stdout + made.stderr
    read, other = made.stdout.split()[-2:]
    yield {"server": shared_daphne.server, "token": shared_daphne.token, "read": read,
           "other": other}


def provider(server: LiveDaphne | None, token: str = "", service: str = "agent",
             **exporter: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider exporting each span as it ends: to the live server (the real
    OTLP/HTTP exporter) when given, and to memory."""
    tracer_provider = TracerProvider(resource=Resource.create(
        {"service.name": service, "host.name": "box", "process.pid": 4242}))
    memory = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    if server is not None:
        tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
            endpoint=server.url("/v1/traces"), headers=bearer(token), **exporter)))
    return tracer_provider, memory


def fan_out(tracer_provider: TracerProvider, t0: int) -> str:
    """A root, six overlapping tool spans and one GenAI span with token usage, with
    explicit times; the trace id in hex."""
    tracer = tracer_provider.get_tracer("test")
    root = tracer.start_span("agent", start_time=t0, attributes={"session.id": "otel-session"})
    trace_id = format(root.get_span_context().trace_id, "032x")
    from opentelemetry import trace
    context = trace.set_span_in_context(root)
    children = [tracer.start_span("search", context=context, start_time=t0 + (10 + i) * MS,
                                  attributes={"gen_ai.operation.name": "execute_tool",
                                              "gen_ai.tool.name": "search"})
                for i in range(6)]
    for i, child in enumerate(children):
        child.end(end_time=t0 + (40 + i) * MS)
    chat = tracer.start_span("chat gpt-x", context=context, start_time=t0 + 50 * MS,
                             attributes={"gen_ai.operation.name": "chat",
                                         "gen_ai.request.model": "gpt-x",
                                         "gen_ai.usage.input_tokens": 12,
                                         "gen_ai.usage.output_tokens": 5})
    chat.end(end_time=t0 + 90 * MS)
    root.end(end_time=t0 + 100 * MS)
    return trace_id


def events_of(server: LiveDaphne, token: str, run_id: str) -> list[Any]:
    answer = HttpSession(server.base_url).request(
        "GET", f"/api/runs/{run_id}/events?limit=1000", headers=bearer(token))
    assert answer.status == 200, answer.body
    return [parse_event(e) for e in answer.json()["events"]]


def run_of(server: LiveDaphne, token: str, run_id: str) -> Any:
    answer = HttpSession(server.base_url).request("GET", f"/api/runs/{run_id}",
                                                  headers=bearer(token))
    return answer.json()["run"] if answer.status == 200 else None


def assert_fan_out(server: LiveDaphne, token: str, trace_id: str, service: str) -> None:
    run = run_of(server, token, trace_id)
    assert run is not None and run["id"] == trace_id
    assert run["flow"] == f"OpenTelemetry:{service}" and run["status"] == "finished"
    assert run["origin"]["label"] == "OpenTelemetry on box (pid 4242)"
    assert run["origin"]["service"] == service
    events = events_of(server, token, trace_id)
    model = fold(events)
    assert model.anomalies == []
    assert len(model.barriers) == 1
    (barrier,) = model.barriers.values()
    assert len(barrier.branches) == 6
    finished = [e for e in events if e.type == "model.finished"]
    assert len(finished) == 1
    assert (finished[0].input_tokens, finished[0].output_tokens) == (12, 5)
    assert events[0].session_id == "otel-session"


def test_a_trace_from_the_sdk_exporter_becomes_a_run_with_a_barrier_and_a_model_call(
        live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, _ = provider(server, token, service="agent-proto")
    trace_id = fan_out(tracer_provider, 1_700_000_000_000 * MS)
    tracer_provider.shutdown()
    assert_fan_out(server, token, trace_id, "agent-proto")


def test_gzip_bodies_are_read(live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, _ = provider(server, token, service="agent-gzip",
                                  compression=Compression.Gzip)
    trace_id = fan_out(tracer_provider, 1_700_000_100_000 * MS)
    tracer_provider.shutdown()
    assert_fan_out(server, token, trace_id, "agent-gzip")


def otlp_json(spans: list[ReadableSpan]) -> bytes:
    """The spans as OTLP/JSON: protobuf's JSON mapping with the ids in hex."""
    data = json_format.MessageToDict(encode_spans(spans))

    def hexed(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                hexed(item)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId"):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hexed(value)

    hexed(data)
    return json.dumps(data).encode()


def post(server: LiveDaphne, body: bytes, content_type: str, token: str | None,
         **headers: str) -> Any:
    return HttpSession(server.base_url).request(
        "POST", "/v1/traces", data=body,
        headers={"Content-Type": content_type, **(bearer(token) if token else {}), **headers})


def test_the_same_trace_as_otlp_json_is_answered_in_json(live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, memory = provider(None, service="agent-json")
    trace_id = fan_out(tracer_provider, 1_700_000_200_000 * MS)
    answer = post(server, otlp_json(list(memory.get_finished_spans())), "application/json",
                  token)
    assert answer.status == 200, answer.body
    assert answer.headers["Content-Type"] == "application/json"
    assert "partialSuccess" not in answer.json()
    assert_fan_out(server, token, trace_id, "agent-json")


def test_spans_split_over_requests_and_out_of_order_assemble_one_run(
        live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, memory = provider(None, service="agent-split")
    trace_id = fan_out(tracer_provider, 1_700_000_300_000 * MS)
    spans = list(memory.get_finished_spans())
    # The root first, then the rest backwards, in three requests, one of them resent.
    order = [spans[-1:], spans[4:-1][::-1], spans[:4], spans[:4]]
    for part in order:
        answer = post(server, encode_spans(part).SerializeToString(), PROTOBUF, token)
        assert answer.status == 200, answer.body
        reply = trace_service_pb2.ExportTraceServiceResponse()
        reply.ParseFromString(answer.body)
        assert reply.partial_success.rejected_spans == 0
    assert_fan_out(server, token, trace_id, "agent-split")
    events = events_of(server, token, trace_id)
    assert [e.seq for e in events] == list(range(len(events)))


def test_a_span_without_a_valid_id_is_refused_in_the_partial_success(
        live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, memory = provider(None, service="agent-partial")
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("alone") as alone:
        alone.set_status(Status(StatusCode.OK))
    message = encode_spans(list(memory.get_finished_spans()))
    good = message.resource_spans[0].scope_spans[0].spans[0]
    bad = message.resource_spans[0].scope_spans[0].spans.add()
    bad.CopyFrom(good)
    bad.trace_id = b"\0" * 16
    answer = post(server, message.SerializeToString(), PROTOBUF, token)
    assert answer.status == 200, answer.body
    reply = trace_service_pb2.ExportTraceServiceResponse()
    reply.ParseFromString(answer.body)
    assert reply.partial_success.rejected_spans == 1
    assert "trace id" in reply.partial_success.error_message
    assert run_of(server, token, good.trace_id.hex()) is not None


@pytest.mark.parametrize("case", ["malformed", "malformed_json", "no_token", "read_token",
                                  "other_project", "content_type"])
def test_refused_requests_store_nothing(live: dict[str, Any], case: str) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, memory = provider(None, service=f"agent-{case}")
    t0 = 1_700_001_000_000 * MS + len(case) * 10_000 * MS
    trace_id = fan_out(tracer_provider, t0)
    spans = list(memory.get_finished_spans())
    body = encode_spans(spans).SerializeToString()
    expected = {"malformed": 400, "malformed_json": 400, "no_token": 401, "read_token": 403,
                "other_project": 404, "content_type": 415}[case]
    before = None
    if case == "other_project":  # the trace exists in the default project
        first = post(server, encode_spans(spans[:3]).SerializeToString(), PROTOBUF, token)
        assert first.status == 200, first.body
        before = run_of(server, token, trace_id)
        assert before is not None
    sent = {"malformed": lambda: post(server, b"\x0a\xff\xff", PROTOBUF, token),
            "malformed_json": lambda: post(server, b'{"resourceSpans": [', "application/json",
                                           token),
            "no_token": lambda: post(server, body, PROTOBUF, None),
            "read_token": lambda: post(server, body, PROTOBUF, live["read"]),
            "other_project": lambda: post(server, body, PROTOBUF, live["other"]),
            "content_type": lambda: post(server, body, "text/plain", token)}[case]()
    assert sent.status == expected, sent.body
    assert sent.json()["type"] == "error"
    assert run_of(server, token, trace_id) == before
    assert run_of(server, live["other"], trace_id) is None


def test_a_gzip_bomb_is_refused_413(live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    bomb = gzip.compress(b"\0" * (MAX_BODY_BYTES + 1))
    answer = post(server, bomb, PROTOBUF, token, **{"Content-Encoding": "gzip"})
    assert answer.status == 413, answer.body


def test_values_no_store_can_hold_are_made_storable_and_impossible_times_refused(
        live: dict[str, Any]) -> None:
    server, token = live["server"], live["token"]
    tracer_provider, memory = provider(None, service="agent-hostile")
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("root\x00name") as root:
        root.set_attribute("score", float("nan"))
        root.set_attribute("note", "a\x00b")
        trace_id = format(root.get_span_context().trace_id, "032x")
    message = encode_spans(list(memory.get_finished_spans()))
    spans = message.resource_spans[0].scope_spans[0].spans
    late = spans.add()
    late.CopyFrom(spans[0])
    late.span_id, late.parent_span_id = b"\x01" * 8, spans[0].span_id
    late.end_time_unix_nano = 2**64 - 1
    answer = post(server, message.SerializeToString(), PROTOBUF, token)
    assert answer.status == 200, answer.body
    reply = trace_service_pb2.ExportTraceServiceResponse()
    reply.ParseFromString(answer.body)
    assert reply.partial_success.rejected_spans == 1
    assert "time" in reply.partial_success.error_message
    run = run_of(server, token, trace_id)
    assert run is not None and run["status"] == "finished"
    events = events_of(server, token, trace_id)
    assert fold(events).anomalies == []
    entered = next(e for e in events if e.type == "step.entered")
    assert entered.step == "root\ufffdname"


def test_a_trace_continued_from_another_process_ends_with_its_local_root(
        live: dict[str, Any]) -> None:
    """An agent called with a propagated trace context (a ``traceparent`` header): its
    root span's parent is remote and never arrives; the run ends with that root."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    server, token = live["server"], live["token"]
    tracer_provider, _ = provider(server, token, service="agent-remote-parent")
    upstream = SpanContext(trace_id=0x5B8EFFF798038103D269B633813FC60C,
                           span_id=0xEEE19B7EC3C1B174, is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
    tracer = tracer_provider.get_tracer("test")
    context = trace.set_span_in_context(NonRecordingSpan(upstream))
    with tracer.start_as_current_span("handle request", context=context), \
            tracer.start_as_current_span("step"):
        pass
    tracer_provider.shutdown()
    run = run_of(server, token, "5b8efff798038103d269b633813fc60c")
    assert run is not None and run["status"] == "finished"
