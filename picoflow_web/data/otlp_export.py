"""A run's recorded events as an OpenTelemetry trace (OTLP/JSON), for Jaeger, Phoenix,
Langfuse or any collector: ``manage.py export_otlp RUN_ID`` and
``GET /api/runs/<id>/otlp``.

One span per turn, barrier, branch, model call and tool call, parent-linked as the run
nested them: a branch under its barrier, a barrier under the tool call that forked it (or
under its caller's invocation), model and tool calls under their invocation. Built from
the record alone (nothing re-runs), with the official OTLP message classes
(``opentelemetry-proto``, the ``otlp`` extra) so the file is what collectors parse.
Ids are derived from the run id, so exporting a run twice gives the same trace.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from picoflow_web import __version__
from picoflow_web.errors import Unavailable


class OtlpUnavailable(Unavailable):
    """The ``otlp`` extra (``opentelemetry-proto``) is not installed (501)."""

    code = "otlp_unavailable"


SCOPE = "picoflow_web.data.otlp_export"
KIND_INTERNAL, KIND_CLIENT = 1, 3


@dataclass
class _Span:
    key: str
    name: str
    parent: str | None
    start: float
    end: float | None = None
    kind: int = KIND_INTERNAL
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None


class _Trace:
    """Spans being built while the events are read in order."""

    def __init__(self) -> None:
        self.spans: dict[str, _Span] = {}
        self.tools: dict[str, list[str]] = {}  # open tool spans per invocation path
        self.last = 0.0

    def open(self, key: str, name: str, parent: str | None, at: float,
             **attributes: Any) -> _Span:
        span = self.spans[key] = _Span(key, name, parent, at, attributes=attributes)
        return span

    def close(self, key: str, at: float, error: str | None = None, **attributes: Any) -> None:
        span = self.spans.get(key)
        if span is None:
            return
        span.end, span.error = at, error
        span.attributes.update(attributes)

    def invocation(self, path: str) -> str:
        return f"branch:{path}" if path else "turn"

    def enclosing(self, path: str) -> str:
        """Where work of ``path`` nests: its innermost open tool call, or the invocation."""
        open_tools = self.tools.get(path)
        return open_tools[-1] if open_tools else self.invocation(path)


def _error_text(error: dict[str, Any]) -> str:
    return f"{error.get('type', 'Error')}: {error.get('message', '')}"


def _on_barrier(trace: _Trace, e: dict[str, Any], at: float) -> None:
    kind, barrier = e["type"], e.get("barrier", "")
    key = f"barrier:{barrier}"
    if kind == "barrier.forked":
        trace.open(key, f"barrier {barrier}", trace.enclosing(e["path"]), at, **{
            "picoflow.barrier.id": barrier, "picoflow.barrier.path": e["path"],
            "picoflow.barrier.policy": e["policy"],
            "picoflow.barrier.checkpoint": e["checkpoint"],
            "picoflow.barrier.caller_step": e["caller_step"],
            "picoflow.barrier.branches": len(e["requests"])})
    elif kind == "branch.started":
        trace.open(f"branch:{e['path']}", f"branch {e['key']}", key, at, **{
            "picoflow.branch.key": e["key"], "picoflow.branch.index": e["index"],
            "picoflow.branch.path": e["path"], "picoflow.branch.step": e["step"],
            "picoflow.barrier.id": barrier})
    elif kind == "branch.fulfilled":
        trace.close(f"branch:{e['path']}", at, **{"picoflow.branch.status": "fulfilled"})
    elif kind == "branch.rejected":
        trace.close(f"branch:{e['path']}", at, _error_text(e["error"]), **{
            "picoflow.branch.status": "cancelled" if e["cancelled"] else "rejected"})
    elif kind == "join.published":
        discarded = {item["index"]: item for item in e["discarded"]}
        trace.close(key, at, **{
            # An atomic batch that discarded everything also ends in join.published.
            "picoflow.barrier.outcome": "published" if e["fields"] else "nothing published",
            "picoflow.barrier.target": e["target"],
            "picoflow.barrier.published": [f"{f['step']}.{f['field']}" for f in e["fields"]],
            "picoflow.barrier.discarded": [str(d["key"]) for d in discarded.values()]})
        for span in trace.spans.values():
            if span.parent == key and span.key.startswith("branch:"):
                gone = discarded.get(span.attributes["picoflow.branch.index"])
                span.attributes["picoflow.branch.publication"] = (
                    "discarded" if gone else "published")
                if gone:
                    span.attributes["picoflow.branch.discard_reason"] = str(gone["reason"])
    elif kind == "join.invalidated":
        trace.close(key, at, _error_text(e["error"]), **{
            "picoflow.barrier.outcome": "invalidated", "picoflow.barrier.published": [],
            "picoflow.barrier.error_code": e["error"]["code"]})
        for span in trace.spans.values():
            if span.parent == key and span.key.startswith("branch:"):
                span.attributes["picoflow.branch.publication"] = "discarded"
                span.attributes["picoflow.branch.discard_reason"] = "join invalidated"
    elif kind.startswith(("cancel.", "checkpoint.")) and key in trace.spans:
        details = {name: e[name] for name in ("reason", "running", "queued", "closed",
                                                "revision") if name in e}
        if "error" in e:
            details["error"] = _error_text(e["error"])
        trace.spans[key].events.append((at, kind, details))


def _on_call(trace: _Trace, e: dict[str, Any], at: float) -> None:
    kind, path = e["type"], e["path"]
    if kind.startswith("model."):
        key = f"model:{path}:{e['call']}"
        if kind == "model.started" and key not in trace.spans:
            model = e["model"]
            trace.open(key, f"chat {model.get('name', '')}".strip(), trace.invocation(path),
                       at, **{"gen_ai.operation.name": "chat",
                              "gen_ai.system": str(model.get("provider", "")),
                              "gen_ai.request.model": str(model.get("name", "")),
                              "picoflow.step": e["step"], "picoflow.model.call": e["call"]},
                       ).kind = KIND_CLIENT
        span = trace.spans.get(key)
        if span is None:
            return
        span.attributes["picoflow.model.attempts"] = e["attempt"]
        if kind == "model.finished":
            trace.close(key, at, **{
                "gen_ai.usage.input_tokens": e["input_tokens"],
                "gen_ai.usage.output_tokens": e["output_tokens"],
                "gen_ai.response.finish_reasons": [e["finish_reason"]],
                "picoflow.model.latency_s": e["latency"],
                "picoflow.model.accepted": e["accepted"]})
        elif kind == "model.failed":
            span.events.append((at, "attempt failed", {
                "attempt": e["attempt"], "error": _error_text(e["error"])}))
            if not e["retrying"]:
                trace.close(key, at, _error_text(e["error"]))
    elif kind == "tool.started":
        key = f"tool:{path}:{e['call_id']}"
        trace.open(key, f"tool {e['name']}", trace.enclosing(path), at, **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": e["name"],
            "gen_ai.tool.call.id": e["call_id"], "picoflow.step": e["step"],
            "picoflow.tool.args": json.dumps(e["args"], default=str)})
        trace.tools.setdefault(path, []).append(key)
    elif kind == "tool.finished":
        key = f"tool:{path}:{e['call_id']}"
        open_tools = trace.tools.get(path, [])
        if key in open_tools:
            open_tools.remove(key)
        result = json.dumps(e["result"], default=str)
        trace.close(key, at, result if e["status"] == "error" else None, **{
            "picoflow.tool.status": e["status"], "picoflow.tool.outcome": e["outcome"],
            "picoflow.tool.result": result})


def spans_of(events: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[_Span]]:
    """The turn's facts (run, session, flow) and its spans, from its events in order."""
    trace = _Trace()
    facts: dict[str, Any] = {}
    for e in events:
        at, kind = float(e["time"]), e["type"]
        trace.last = max(trace.last, at)
        facts.setdefault("run_id", e["run_id"])
        facts.setdefault("session_id", e["session_id"])
        if kind == "turn.started":
            facts["flow"] = e["flow"]
            trace.open("turn", f"turn {e['flow']}", None, at, **{
                "picoflow.flow": e["flow"], "picoflow.message": e["message"] or ""})
        elif kind in ("turn.finished", "turn.failed", "turn.cancelled"):
            # A cancelled turn is not a failure (the runtime says so too): status OK.
            failed = _error_text(e["error"]) if kind == "turn.failed" else None
            trace.close("turn", at, failed, **{"picoflow.turn.status": kind.split(".")[1]})
        elif kind == "run.interrupted":
            trace.close("turn", at, f"interrupted: {e['reason']}", **{
                "picoflow.turn.status": "interrupted"})
        elif kind.startswith(("barrier.", "branch.", "join.", "cancel.")):
            _on_barrier(trace, e, at)
        elif kind.startswith(("model.", "tool.")):
            _on_call(trace, e, at)
    for span in trace.spans.values():
        if span.end is None:  # the record ends before the span did (an interrupted run)
            span.end = trace.last
            span.attributes["picoflow.unfinished"] = True
    return facts, list(trace.spans.values())


def _id(run_id: str, key: str, size: int) -> bytes:
    return hashlib.sha256(f"{run_id}\0{key}".encode()).digest()[:size]


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
    facts, spans = spans_of(events)
    run_id = str(facts.get("run_id", ""))
    trace_id = _id(run_id, "trace", 16)
    built = []
    for span in spans:
        status = (trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_ERROR, message=span.error)
                  if span.error else trace_pb2.Status(code=trace_pb2.Status.STATUS_CODE_OK))
        built.append(trace_pb2.Span(
            trace_id=trace_id, span_id=_id(run_id, span.key, 8),
            parent_span_id=_id(run_id, span.parent, 8) if span.parent else b"",
            name=span.name, kind=span.kind,  # type: ignore[arg-type]
            start_time_unix_nano=int(span.start * 1e9),
            end_time_unix_nano=int((span.end or span.start) * 1e9),
            attributes=_attributes(span.attributes), status=status,
            events=[trace_pb2.Span.Event(time_unix_nano=int(at * 1e9), name=name,
                                         attributes=_attributes(details))
                    for at, name, details in span.events]))
    resource = resource_pb2.Resource(attributes=_attributes({
        "service.name": "picoflow", "picoflow.run_id": run_id,
        "picoflow.session_id": facts.get("session_id", ""),
        "picoflow.flow": facts.get("flow", "")}))
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


def run_to_json(run_id: str) -> str:
    """A stored run's OTLP/JSON (synchronous: it reads the store)."""
    from picoflow_web.models import EventRecord

    rows = (EventRecord.objects.filter(run_id=run_id).order_by("seq")
            .values_list("payload", flat=True).iterator(chunk_size=2000))
    return to_json(rows)


__all__ = ["OtlpUnavailable", "parse", "run_to_json", "spans_of", "to_json", "traces_data"]
