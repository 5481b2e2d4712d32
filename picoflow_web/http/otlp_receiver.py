"""``POST /v1/traces``: the OTLP/HTTP trace receiver.

Any OpenTelemetry SDK or collector exports here with
``OTEL_EXPORTER_OTLP_ENDPOINT=<dashboard>`` and
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer <token>`` (a token with the ``ingest``
scope; its project is where the traces go). The body is an ``ExportTraceServiceRequest``
as protobuf (``application/x-protobuf``) or OTLP/JSON (``application/json``, ids in hex),
maybe gzipped (``Content-Encoding: gzip``); the answer is an
``ExportTraceServiceResponse`` in the request's content type, its ``partial_success``
counting the spans refused (no valid trace or span id) and saying why. A body that does not
parse is a 400 in the API's error shape and stores nothing; so are a body over the size
limit (413) and any other content type (415). What the spans become:
:mod:`picoflow_web.record.spans`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from typing import Any

from django.http import HttpRequest, HttpResponse

from picoflow_web.data import access
from picoflow_web.errors import ApiError, InputError, Unavailable
from picoflow_web.http.api import api_view
from picoflow_web.http.error_answers import error
from picoflow_web.record import ingest, watchdog
from picoflow_web.record.ingest import MAX_BODY_BYTES
from picoflow_web.record.span_events import Span
from picoflow_web.record.spans import Received, spans_ingest

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
ID_FIELDS = ("traceId", "spanId", "parentSpanId")
"""OTLP/JSON's id fields: hex there, base64 to protobuf's JSON mapping."""


class OtlpReceiverUnavailable(Unavailable):
    """The ``otlp`` extra (``opentelemetry-proto``) is not installed (501)."""

    code = "otlp_unavailable"


def _messages() -> tuple[Any, Any, Any]:
    try:
        from google.protobuf import json_format
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    except ImportError:
        raise OtlpReceiverUnavailable(
            "Receiving OTLP needs the otlp extra: pip install 'picoflow[otlp]'.") from None
    return (trace_service_pb2.ExportTraceServiceRequest,
            trace_service_pb2.ExportTraceServiceResponse, json_format)


@api_view("POST", scope="ingest")
async def traces(request: HttpRequest) -> HttpResponse:
    """``POST /v1/traces``: store the spans, then bring their traces' runs up to date."""
    kind = request.content_type
    if kind not in (PROTOBUF, JSON):
        return error(f"Send OTLP traces as {PROTOBUF} or {JSON}.", 415,
                     "unsupported_media_type")
    grant = request.access  # type: ignore[attr-defined]
    project = grant.token_project or access.DEFAULT_PROJECT
    grant.require(project, "ingest", f"project {project!r}")
    request_cls, response_cls, json_format = _messages()
    body = _inflated(request)
    message = request_cls()
    try:
        if kind == PROTOBUF:
            message.ParseFromString(body)
        else:
            data = json.loads(body)
            _hex_to_base64(data)
            json_format.Parse(json.dumps(data), message, ignore_unknown_fields=True)
    except (ValueError, RecursionError, json_format.ParseError) as exc:
        raise InputError(f"Not an OTLP ExportTraceServiceRequest ({kind}): "
                         f"{str(exc)[:200]}", error_code="malformed_body") from None
    except Exception as exc:  # protobuf's DecodeError is not a ValueError
        if type(exc).__name__ != "DecodeError":
            raise
        raise InputError(f"Not an OTLP ExportTraceServiceRequest ({kind}): "
                         f"{str(exc)[:200]}", error_code="malformed_body") from None
    received = received_of(message)
    watchdog.ensure()
    await spans_ingest(received, project=project,
                       user=request.api_user)  # type: ignore[attr-defined]
    reply = response_cls()
    if received.rejected:
        reply.partial_success.rejected_spans = len(received.rejected)
        reply.partial_success.error_message = "; ".join(received.rejected[:5])
    if kind == PROTOBUF:
        return HttpResponse(reply.SerializeToString(), content_type=PROTOBUF)
    return HttpResponse(json_format.MessageToJson(reply), content_type=JSON)


def _inflated(request: HttpRequest) -> bytes:
    body = ingest.read_body(request, advice="export smaller batches")
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise ApiError(f"Content-Encoding {encoding!r} is not supported; send gzip or "
                       "none.", code="unsupported_media_type", status=415)
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error as exc:
        raise InputError(f"Not gzip: {exc}.", error_code="malformed_body") from None
    if len(out) > MAX_BODY_BYTES or inflate.unconsumed_tail:
        raise ApiError(f"Body inflates to more than {MAX_BODY_BYTES} bytes; export smaller "
                       "batches.", code="body_too_large", status=413, limit=MAX_BODY_BYTES)
    return out


def _hex_to_base64(node: Any) -> None:
    """OTLP/JSON ids (hex) as protobuf's JSON mapping reads bytes (base64); an id that is
    no hex becomes empty, so its span is refused as one without a valid id."""
    if isinstance(node, list):
        for item in node:
            _hex_to_base64(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    node[key] = ""
            else:
                _hex_to_base64(value)


REMOTE_PARENT = 0x300
"""OTLP's span flags: whether the parent is remote is known (0x100), and it is (0x200)."""
MAX_TIME_NS = 2**63 - 1
"""The latest time a span may have (in 2262): what the database's 64-bit integers hold."""


def _text(value: str) -> str:
    """Text the event store can hold (PostgreSQL stores no NUL)."""
    return value.replace("\x00", "\ufffd")


def value_of(any_value: Any) -> Any:
    """An OTLP ``AnyValue`` as plain JSON (a NaN or infinity as its name: JSON has none)."""
    which = any_value.WhichOneof("value")
    if which is None:
        return None
    if which == "string_value":
        return _text(any_value.string_value)
    if which == "double_value":
        number = any_value.double_value
        return number if math.isfinite(number) else str(number)
    if which == "array_value":
        return [value_of(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return attributes_of(any_value.kvlist_value.values)
    if which == "bytes_value":
        return base64.b64encode(any_value.bytes_value).decode()
    return getattr(any_value, which)


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {_text(pair.key): value_of(pair.value) for pair in pairs}


def _id(raw: bytes, size: int) -> str | None:
    if len(raw) != size or not raw.strip(b"\0"):
        return None
    return binascii.hexlify(raw).decode()


def received_of(message: Any) -> Received:
    """The request's spans by trace, and why each refused one was refused."""
    out = Received()
    for resource_spans in message.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id, span_id = _id(span.trace_id, 16), _id(span.span_id, 8)
                parent = _id(span.parent_span_id, 8) if span.parent_span_id else ""
                start = span.start_time_unix_nano
                timed = 0 < start <= MAX_TIME_NS and span.end_time_unix_nano <= MAX_TIME_NS
                if trace_id is None or span_id is None or parent is None or not timed:
                    which = ("trace id" if trace_id is None else "span id" if span_id is None
                             else "parent span id" if parent is None else "start or end time")
                    out.rejected.append(f"span {span.name[:60]!r}: no valid {which}")
                    continue
                out.spans.setdefault(trace_id, []).append(Span(
                    span_id=span_id, parent_span_id=parent, name=_text(span.name[:400]),
                    start=start, end=max(span.end_time_unix_nano, start),
                    status_code=span.status.code,
                    status_message=_text(span.status.message),
                    kind=span.kind, attributes=attributes_of(span.attributes),
                    events=[{"name": _text(e.name), "time": e.time_unix_nano,
                             "attributes": attributes_of(e.attributes)} for e in span.events],
                    resource=resource,
                    remote_parent=bool(parent) and span.flags & REMOTE_PARENT == REMOTE_PARENT))
    return out


__all__ = ["JSON", "PROTOBUF", "attributes_of", "received_of", "traces", "value_of"]
