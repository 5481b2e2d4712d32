"""The JSON API described by one schema: the OpenAPI 3.1 document generated from the
pydantic models of its bodies (:mod:`picoflow_web.http.bodies`), served at
``GET /api/openapi.json``.

Why not django-ninja: its routers own request parsing, authentication and the error
answers, and the API's contract (paths, bodies, the error shape with ``code`` and
``error_code``, the PicoFlow ``/ai/*`` contract, bearer tokens *or* browser sessions with
CSRF, bodies read from the stream with the 413 limit) already lives in
:mod:`picoflow_web.http.api`; moving every endpoint under ninja in one step would change
answers the browser and clients depend on. Here the models are the single description,
the document is generated from them with pydantic's own JSON Schema, and a fuzzer
(schemathesis, ``tests/web/test_fuzz.py``) checks the live server against it.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe
from pydantic import BaseModel

from picoflow_web import __version__
from picoflow_web.data import runs_query
from picoflow_web.execute.engine import get_engine
from picoflow_web.http.analysis import MAX_CONCURRENCY
from picoflow_web.http.bodies import (
    ID_OR_EMPTY,
    ID_SCHEMA,
    MAX_CONTROL_RUNS,
    MODELS,
    AiEnd,
    AiEnded,
    AiPending,
    AiReply,
    AiRun,
    Comparison,
    Error,
    EventPage,
    FlowList,
    FlowNames,
    Heartbeat,
    ImportReply,
    IngestReply,
    RunDetailOut,
    RunList,
    RunOut,
    RunStart,
    SessionOut,
    WhatIf,
)
from picoflow_web.http.jsonbody import MAX_BODY_BYTES, MAX_DEPTH, MAX_NUMBER_DIGITS
from runtime import FlowInfo
from runtime.events import ID_PATTERN, MAX_ID_CHARS

ERRORS = (400, 401, 403, 404, 405, 409, 413, 414, 431)
"""What any operation may answer with the error shape; 414 and 431 for a request line or
headers over the server's limits (:mod:`picoflow_web.live.http_limits`), before the
request reaches its view."""


def _ref(model: type[BaseModel] | str) -> dict[str, str]:
    name = model if isinstance(model, str) else model.__name__
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str, media: str = "application/json"
          ) -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": schema}}}


def _operation(summary: str, ok: dict[int, tuple[Any, ...]], *,
               body: type[BaseModel] | dict[str, Any] | None = None,
               params: list[dict[str, Any]] | None = None,
               errors: tuple[int, ...] = ERRORS) -> dict[str, Any]:
    responses = {str(status): _json(*answer) for status, answer in ok.items()}
    for status in errors:
        responses.setdefault(str(status), _json(_ref(Error), "An error"))
    operation: dict[str, Any] = {"summary": summary, "responses": responses,
                                 "security": [{"bearer": []}, {"session": []}]}
    if isinstance(body, dict):
        operation["requestBody"] = {"required": True, "content": body}
    elif body is not None:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _ref(body)}}}
        # A JSON body sent as another media type (or charset) is refused.
        responses.setdefault("415", _json(_ref(Error), "An error"))
    if params:
        operation["parameters"] = params
    return operation


def _streamable(operation: dict[str, Any]) -> dict[str, Any]:
    """The 200 of ``operation`` also as JSONL (``Accept: application/x-ndjson``)."""
    operation["responses"]["200"]["content"]["application/x-ndjson"] = {
        "schema": {"type": "string"}}
    return operation


def _protobuf(operation: dict[str, Any]) -> dict[str, Any]:
    """The 200 of ``operation`` also as an OTLP ``ExportTraceServiceRequest`` (``Accept:
    application/x-protobuf``)."""
    operation["responses"]["200"]["content"]["application/x-protobuf"] = {
        "schema": {"type": "string", "format": "binary"}}
    return operation


def _body_optional(operation: dict[str, Any]) -> dict[str, Any]:
    operation["requestBody"]["required"] = False
    return operation


CHAT_SESSION = {"name": "Chat-Session-Id", "in": "header", "required": False,
                "description": "The session, PicoFlow's way (a body's session comes first)",
                "schema": {"type": "string", **ID_OR_EMPTY}}


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS,
                       "pattern": f"^{ID_PATTERN.pattern}$"}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


NDJSON = {"application/x-ndjson": {"schema": {
    "type": "string", "contentMediaType": "application/x-ndjson",
    "description": "One event per line, as the runtime's event schema describes it "
                   "(runtime.events.schema; DashboardSink sends these)."}}}
"""The ingest body: lines of events (each line is checked against the event schema)."""


INFO = ("Every error is one JSON shape (the Error schema) with a 4xx status. Besides what "
        f"each schema says, a JSON body is refused whole when it is larger than "
        f"{MAX_BODY_BYTES // 1024} KB (413), nests deeper than {MAX_DEPTH} levels, or holds "
        "text with a NUL character or a lone surrogate, NaN, Infinity, or a number of more "
        f"than {MAX_NUMBER_DIGITS} characters (400).")


EXPORT = ({"type": "string"}, "One stored event per line (an attachment)",
          "application/x-ndjson")

WHEN = {"type": "string", "anyOf": [{"format": "date-time"}, {"maxLength": 0}],
        "description": "An ISO 8601 date and time (one without an offset is UTC)"}

NOT_BLANK = r"[^\s\x1c-\x1f\x85]|\ufeff"
"""A text with something besides whitespace, as Python's ``str.strip`` sees whitespace
(what the runtime checks a message with); spelled so that ECMA, Rust and Python regular
expressions all agree: their whitespace classes differ on these characters."""


def _per_flow(flows: list[FlowInfo], field: str) -> list[dict[str, Any]]:
    """The flows that need a message: a start naming one of them has a message that is
    not blank. (A config's fit is left to each flow's ``config_schema`` in ``GET
    /api/flows``: the flow's own pydantic model checks it, with conversions no JSON Schema
    states.)"""
    return [{"if": {"required": [field], "properties": {field: {"const": flow.id}}},
             "then": {"required": ["message"],
                      "properties": {"message": {"type": "string", "pattern": NOT_BLANK}}}}
            for flow in flows if flow.needs_message]


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API (the flow names are this server's)."""
    schemas: dict[str, Any] = {}
    for model in MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    engine = get_engine()
    names = engine.get_flow_names()
    flows = [engine.flow_info(name) for name in names]
    schemas["RunStart"]["properties"]["flow"]["enum"] = names
    schemas["AiRun"]["properties"]["flowName"]["enum"] = names
    schemas["RunStart"]["allOf"] = _per_flow(flows, "flow")
    schemas["AiRun"]["allOf"] = _per_flow(flows, "flowName")
    seq = {"type": "integer", "minimum": -1, "maximum": 2**31}
    run_id, session_id = _path_param("run_id"), _path_param("session_id")
    return {
        "openapi": "3.1.0",
        "info": {"title": "PicoFlow Web API", "version": __version__,
                 "description": INFO},
        "paths": {
            "/api/flows": {"get": _operation("The served flows", {
                200: (_ref(FlowList), "The flows")})},
            "/api/runs": {
                "get": _operation("Run summaries, newest first", {
                    200: (_ref(RunList), "The runs")}, params=[
                    _query("flow", {"type": "string"}), _query("status", {"type": "string"}),
                    _query("session", {"type": "string"}),
                    _query("conflicts", {"type": "string"}),
                    _query("rejected", {"type": "string"}),
                    _query("project", {"type": "string"}),
                    _query("q", {"type": "string", "maxLength": runs_query.MAX_QUERY}),
                    # Empty, as for every filter here, is the same as absent.
                    _query("sort", {"type": "string", "enum": ["", *(
                        f"{way}{name}" for name in runs_query.SORTS for way in ("", "-"))]}),
                    _query("since", WHEN), _query("until", WHEN)]),
                "post": _operation("Start a run (queued for a worker)", {
                    201: (_ref(RunOut), "The queued run")}, body=RunStart),
            },
            "/api/runs/{run_id}": {"get": _operation("One run, and whether it may be resumed", {
                200: (_ref(RunDetailOut), "The run")}, params=[run_id])},
            "/api/runs/{run_id}/events": {"get": _streamable(_operation(
                "Stored events after a seq: a page, or all of them as JSONL when asked "
                "with Accept: application/x-ndjson", {
                    200: (_ref(EventPage), "A page of events")},
                params=[run_id, _query("after", seq), _query("limit", seq),
                        _query("compact", {"type": "string", "enum": ["0", "1"]})]))},
            "/api/runs/{run_id}/cancel": {"post": _operation("Ask a run to stop", {
                202: (_ref(RunOut), "Asked")}, params=[run_id])},
            "/api/runs/{run_id}/resume": {"post": _operation(
                "Queue a new run that resumes an interrupted, failed or stopped run's turn, "
                "reusing the branches its branch ledger holds (409 not_resumable: nothing "
                "to resume)", {202: (_ref(RunOut), "The queued run (origin.resumes names "
                                     "the run it resumes)")}, params=[run_id])},
            "/api/runs/{run_id}/otlp": {"get": _protobuf(_operation(
                "The run as an OTLP trace (a download; needs the otlp extra): OTLP/JSON, or "
                "protobuf with Accept: application/x-protobuf", {
                    200: ({"type": "object", "required": ["resourceSpans"],
                           "properties": {"resourceSpans": {"type": "array"}}},
                          "OTLP/JSON TracesData")}, params=[run_id],
                errors=(*ERRORS, 501)))},
            "/api/runs/{run_id}/whatif": {"get": _operation(
                "The run's what-if: as recorded, under graph-wide supersteps and under "
                "local barriers, computed from its events (seconds from the turn's start)", {
                    200: (_ref(WhatIf), "The three schedules")},
                params=[run_id, _query("max_concurrency", {
                    "type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY,
                    "description": "Graph-wide limit of the supersteps schedule"})])},
            "/api/runs/{run_id}/compare/{other_id}": {"get": _operation(
                "Two runs side by side (A is run_id, B other_id; differences are B - A), "
                "branches matched by invocation path and branch key", {
                    200: (_ref(Comparison), "The comparison")},
                params=[run_id, _path_param("other_id")])},
            "/api/runs/{run_id}/export": {"get": _operation(
                "The run's events as JSONL (a download)", {200: EXPORT}, params=[run_id])},
            "/api/sessions/{session_id}/export": {"get": _operation(
                "The session's runs' events, in turn order, as JSONL (a download)",
                {200: EXPORT}, params=[session_id])},
            "/api/import": {"post": _operation(
                "Store an export's runs (validated whole first; nothing of a refused file "
                "is stored)", {201: (_ref(ImportReply), "The runs stored")},
                body=NDJSON, errors=(*ERRORS, 415), params=[
                    _query("project", {"type": "string"}),
                    _query("copy", {"type": "string", "enum": ["0", "1", "true", "false"]})])},
            "/api/sessions/{session_id}": {"get": _operation("A session and its runs", {
                200: (_ref(SessionOut), "The session")}, params=[session_id])},
            "/api/ingest": {"post": _operation(
                "Store and broadcast events shipped from another process (an ingest token)",
                {200: (_ref(IngestReply), "Each run's last stored seq and status")},
                body=NDJSON, errors=(*ERRORS, 415))},
            "/api/ingest/heartbeat": {"post": _operation(
                "Remote runs whose turns are still going (an ingest token)",
                {200: (_ref(IngestReply), "Each known run's position")}, body=Heartbeat)},
            "/api/ingest/control": {"get": _operation(
                "A long-poll for what the dashboard asks of remote runs (an ingest token): "
                "answered as soon as one of the runs has a stop request (its position's "
                "stop) or ended, else after wait seconds (at once when it knows none of "
                "them)", {
                    200: (_ref(IngestReply), "Each known run's position")}, params=[
                    {**_query("run", {"type": "array", "minItems": 1,
                                      "maxItems": MAX_CONTROL_RUNS,
                                      "items": {"type": "string", **ID_SCHEMA}}),
                     "required": True, "explode": True},
                    _query("wait", {"type": "number", "minimum": 0, "maximum": 60,
                                    "default": 25})])},
            "/ai/flows": {"get": _operation("Flow names (PicoFlow's contract)", {
                200: (_ref(FlowNames), "The names")})},
            "/ai/run": {"post": _operation("Run a turn and wait for its reply", {
                200: (_ref(AiReply), "The reply"),
                202: (_ref(AiPending), "No reply within PICOFLOW_RUN_WAIT seconds: the run "
                      "goes on; follow it at /api/runs/<run> (the Location header)"),
                400: ({"anyOf": [_ref(AiReply), _ref(Error)]}, "A failed turn or bad input"),
                409: ({"anyOf": [_ref(AiReply), _ref(Error)]}, "A session conflict")},
                body=AiRun)},
            "/ai/end": {"post": _body_optional(_operation(
                "Delete a session: the one the body's session names, else the "
                "Chat-Session-Id header's (one of them is needed)", {
                    200: (_ref(AiEnded), "Deleted"),
                    404: ({"anyOf": [_ref(AiEnded), _ref(Error)]}, "No such session")},
                body=AiEnd, params=[CHAT_SESSION]))},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "manage.py create_api_token"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sessionid",
                            "description": "A logged-in browser (unsafe methods need the "
                                           "CSRF token too)"},
            },
        },
    }


@require_safe
def openapi_json(request: HttpRequest) -> JsonResponse:
    """``GET /api/openapi.json`` (public: it describes, it reveals nothing stored)."""
    return JsonResponse(document())


__all__ = ["MODELS", "document", "openapi_json"]
