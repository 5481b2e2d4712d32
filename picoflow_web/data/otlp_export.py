"""A run's recorded events as an OpenTelemetry trace (OTLP/JSON or protobuf), for Jaeger,
Phoenix, Langfuse or any collector: ``manage.py export_otlp RUN_ID`` and
``GET /api/runs/<id>/otlp``.

The spans are the live sink's (:mod:`runtime.integrations.otel.spans`, the one mapping):
one per turn, barrier, branch, model call attempt and tool call, parent-linked as the run
nested them, with the same attributes, prompt and output text included. Built from the
stored record (redacted like everything else; nothing re-runs), with the official OTLP
message classes (``opentelemetry-proto``, the ``otlp`` extra) so the file is what
collectors parse. The trace id is the run id and span ids derive from it, so exporting a
run twice gives the same trace, and the same one the live sink sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from picoflow_web import __version__
from picoflow_web.errors import Unavailable
from runtime.integrations.otel import KIND_CLIENT, KIND_INTERNAL, span_id, spans_of, trace_id


class OtlpUnavailable(Unavailable):
    """The ``otlp`` extra (``opentelemetry-proto``) is not installed (501)."""

    code = "otlp_unavailable"


SCOPE = "picoflow_web.data.otlp_export"
PROTOBUF = "application/x-protobuf"
_KINDS = {KIND_INTERNAL: 1, KIND_CLIENT: 3}  # OTLP's SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT


def _value(value: Any) -> Any:
    from opentelemetry.proto.common.v1 import common_pb2

    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, list):
        return common_pb2.AnyValue(array_value=common_pb2.ArrayValue(
            values=[_value(item) for item in value]))
    return common_pb2.AnyValue(string_value=str(value))


def _attributes(values: dict[str, Any]) -> list[Any]:
    from opentelemetry.proto.common.v1 import common_pb2

    return [common_pb2.KeyValue(key=k, value=_value(v)) for k, v in values.items()]


def traces_data(events: Iterable[dict[str, Any]]) -> Any:
    """The run as an OTLP ``TracesData`` message."""
    try:
        from opentelemetry.proto.common.v1 import common_pb2
        from opentelemetry.proto.resource.v1 import resource_pb2
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError as exc:
        raise OtlpUnavailable(
            "OTLP export needs the otlp extra: pip install 'picoflow-web[otlp]'.") from exc
    run = spans_of(events)
    run_id = run.run_id
    built = []
    for span in run.spans.values():
        status = (trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message=span.error)
                  if span.error else trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_OK))
        built.append(trace_pb2.Span(
            trace_id=trace_id(run_id), span_id=span_id(run_id, span.key),
            parent_span_id=span_id(run_id, span.parent) if span.parent else b"",
            name=span.name, kind=_KINDS[span.kind],  # type: ignore[arg-type]
            start_time_unix_nano=int(span.start * 1e9),
            end_time_unix_nano=int((span.end or span.start) * 1e9),
            attributes=_attributes(span.attributes), status=status,
            events=[trace_pb2.Span.Event(time_unix_nano=int(at * 1e9), name=name,
                                         attributes=_attributes(details))
                    for at, name, details in span.events]))
    resource = resource_pb2.Resource(attributes=_attributes({
        "service.name": "picoflow", "picoflow.run_id": run_id,
        "picoflow.session_id": run.session_id, "picoflow.flow": run.flow}))
    scope = common_pb2.InstrumentationScope(name=SCOPE, version=__version__)
    return trace_pb2.TracesData(resource_spans=[trace_pb2.ResourceSpans(
        resource=resource, scope_spans=[trace_pb2.ScopeSpans(scope=scope, spans=built)])])


_IDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(node: Any, decode: bool) -> None:
    """OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping writes
    bytes as base64: convert one way (export) or the other (parse)."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name in _IDS and isinstance(value, str):
                node[name] = (base64.b64encode(bytes.fromhex(value)).decode() if decode
                              else base64.b64decode(value).hex())
            else:
                _hex_ids(value, decode)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item, decode)


def to_json(events: Iterable[dict[str, Any]]) -> str:
    """OTLP/JSON of the run: enums as integers, ids as hex (as collectors expect)."""
    from google.protobuf import json_format

    body = json_format.MessageToDict(traces_data(events), use_integers_for_enums=True)
    _hex_ids(body, decode=False)
    return json.dumps(body)


def parse(text: str) -> Any:
    """An OTLP/JSON file back into the official ``TracesData`` message."""
    from google.protobuf import json_format
    from opentelemetry.proto.trace.v1 import trace_pb2

    body = json.loads(text)
    _hex_ids(body, decode=True)
    return json_format.ParseDict(body, trace_pb2.TracesData())


def to_protobuf(events: Iterable[dict[str, Any]]) -> bytes:
    """The run as a serialised OTLP ``ExportTraceServiceRequest`` (what an OTLP/HTTP
    exporter posts to ``/v1/traces`` with ``Content-Type: application/x-protobuf``)."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    data = traces_data(events)
    request = trace_service_pb2.ExportTraceServiceRequest(resource_spans=data.resource_spans)
    return bytes(request.SerializeToString())


def parse_protobuf(body: bytes) -> Any:
    """A serialised ``ExportTraceServiceRequest`` back into the official ``TracesData``."""
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    return trace_pb2.TracesData(resource_spans=request.resource_spans)


def _payloads(run_id: str) -> Iterable[dict[str, Any]]:
    from picoflow_web.models import EventRecord

    rows = (EventRecord.objects.filter(run_id=run_id).order_by("seq")
            .values_list("payload", flat=True).iterator(chunk_size=2000))
    return rows


def run_to_json(run_id: str) -> str:
    """A stored run's OTLP/JSON (synchronous: it reads the store)."""
    return to_json(_payloads(run_id))


def run_to_protobuf(run_id: str) -> bytes:
    """A stored run's OTLP protobuf (synchronous: it reads the store)."""
    return to_protobuf(_payloads(run_id))


__all__ = ["PROTOBUF", "OtlpUnavailable", "parse", "parse_protobuf", "run_to_json",
           "run_to_protobuf", "to_json", "to_protobuf", "traces_data"]
