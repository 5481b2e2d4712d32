"""The JSON API described by one schema: pydantic models of its bodies, and the OpenAPI 3.1
document generated from them (``GET /api/openapi.json``).

Why not django-ninja: its routers own request parsing, authentication and the error
answers, and the API's contract (paths, bodies, the error shape with ``code`` and
``error_code``, the PicoFlow ``/ai/*`` contract, bearer tokens *or* browser sessions with
CSRF, bodies read from the stream with the 413 limit) already lives in
:mod:`picoflow_web.api`; moving every endpoint under ninja in one step would change
answers the browser and clients depend on. Here the models are the single description,
the document is generated from them with pydantic's own JSON Schema, and a fuzzer
(schemathesis, ``tests/web/test_fuzz.py``) checks the live server against it.
"""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe
from pydantic import BaseModel, ConfigDict, Field

from picoflow_web import __version__
from picoflow_web.engine import get_engine


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(_Open):
    """The one error shape (plus details such as ``fields`` or ``line``)."""

    type: Literal["error"]
    message: str
    code: str
    error_code: str
    fields: dict[str, str] | None = None


class RunSummary(_Open):
    id: str
    flow: str
    project: str
    session_id: str
    message: str
    status: Literal["queued", "running", "finished", "failed", "interrupted", "cancelled"]
    reply: dict[str, Any] | None
    has_conflicts: bool
    event_count: int
    branch_count: int
    started_at: str | None
    finished_at: str | None
    origin: dict[str, Any]
    interruption: dict[str, Any] | None
    worker: str | None
    cancel_requested: dict[str, Any] | None


class RunOut(BaseModel):
    run: RunSummary


class RunList(BaseModel):
    runs: list[RunSummary]


class EventPage(BaseModel):
    events: list[dict[str, Any]]
    last_seq: int


class SessionDoc(_Open):
    id: str
    flow: str
    project: str
    revision: int
    run_status: str
    doc: dict[str, Any]
    runs: list[RunSummary]


class SessionOut(BaseModel):
    session: SessionDoc


class FlowInfo(_Open):
    id: str
    description: str
    config_schema: dict[str, Any] | None
    example_messages: list[str]
    needs_message: bool


class FlowList(BaseModel):
    flows: list[FlowInfo]


class RunStart(_Open):
    """``POST /api/runs``."""

    flow: str
    message: str | None = Field(default=None, max_length=20_000)
    session_id: str | None = Field(default=None, max_length=64)
    config: dict[str, Any] | None = None
    project: str | None = None


class AiRun(_Open):
    """``POST /ai/run`` (PicoFlow's contract)."""

    flowName: str
    message: str | None = None
    session: str | None = None
    config: dict[str, Any] | None = None
    project: str | None = None


class AiReply(_Open):
    success: bool
    completed: bool
    message: str
    session: str
    contentType: str
    error_code: str | None = None


class AiEnd(_Open):
    session: str | None = None


class AiEnded(BaseModel):
    success: bool
    session: str


MODELS: tuple[type[BaseModel], ...] = (
    Error, RunSummary, RunOut, RunList, EventPage, SessionDoc, SessionOut, FlowInfo,
    FlowList, RunStart, AiRun, AiReply, AiEnd, AiEnded)

ERRORS = (400, 401, 403, 404, 405, 409, 413)


def _ref(model: type[BaseModel] | str) -> dict[str, str]:
    name = model if isinstance(model, str) else model.__name__
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(summary: str, ok: dict[int, tuple[dict[str, Any], str]], *,
               body: type[BaseModel] | None = None, params: list[dict[str, Any]] | None = None,
               errors: tuple[int, ...] = ERRORS) -> dict[str, Any]:
    responses = {str(status): _json(schema, text) for status, (schema, text) in ok.items()}
    for status in errors:
        responses.setdefault(str(status), _json(_ref(Error), "An error"))
    operation: dict[str, Any] = {"summary": summary, "responses": responses,
                                 "security": [{"bearer": []}, {"session": []}]}
    if body is not None:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": _ref(body)}}}
    if params:
        operation["parameters"] = params
    return operation


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "minLength": 1, "maxLength": 64,
                       "pattern": "^[A-Za-z0-9_-]+$"}}


def _query(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the JSON API (the flow names are this server's)."""
    schemas: dict[str, Any] = {}
    for model in MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    names = get_engine().get_flow_names()
    schemas["RunStart"]["properties"]["flow"]["enum"] = names
    schemas["AiRun"]["properties"]["flowName"]["enum"] = names
    seq = {"type": "integer", "minimum": -1, "maximum": 2**31}
    run_id, session_id = _path_param("run_id"), _path_param("session_id")
    return {
        "openapi": "3.1.0",
        "info": {"title": "PicoFlow Web API", "version": __version__},
        "paths": {
            "/api/flows": {"get": _operation("The served flows", {
                200: (_ref(FlowList), "The flows")})},
            "/api/runs": {
                "get": _operation("Run summaries, newest first", {
                    200: (_ref(RunList), "The runs")}, params=[
                    _query("flow", {"type": "string"}), _query("status", {"type": "string"}),
                    _query("session", {"type": "string"}),
                    _query("conflicts", {"type": "string"}),
                    _query("project", {"type": "string"})]),
                "post": _operation("Start a run (queued for a worker)", {
                    201: (_ref(RunOut), "The queued run")}, body=RunStart),
            },
            "/api/runs/{run_id}": {"get": _operation("One run", {
                200: (_ref(RunOut), "The run")}, params=[run_id])},
            "/api/runs/{run_id}/events": {"get": _operation("Stored events after a seq", {
                200: (_ref(EventPage), "A page of events")},
                params=[run_id, _query("after", seq), _query("limit", seq)])},
            "/api/runs/{run_id}/cancel": {"post": _operation("Ask a run to stop", {
                202: (_ref(RunOut), "Asked")}, params=[run_id])},
            "/api/sessions/{session_id}": {"get": _operation("A session and its runs", {
                200: (_ref(SessionOut), "The session")}, params=[session_id])},
            "/ai/flows": {"get": _operation("Flow names (PicoFlow's contract)", {
                200: ({"type": "array", "items": {"type": "string"}}, "The names")})},
            "/ai/run": {"post": _operation("Run a turn and wait for its reply", {
                200: (_ref(AiReply), "The reply"),
                400: ({"anyOf": [_ref(AiReply), _ref(Error)]}, "A failed turn or bad input"),
                409: ({"anyOf": [_ref(AiReply), _ref(Error)]}, "A session conflict")},
                body=AiRun)},
            "/ai/end": {"post": _operation("Delete a session", {
                200: (_ref(AiEnded), "Deleted"),
                404: ({"anyOf": [_ref(AiEnded), _ref(Error)]}, "No such session")},
                body=AiEnd)},
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
