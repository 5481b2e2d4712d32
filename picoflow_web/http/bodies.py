"""The JSON API's bodies as pydantic models: what a request must be and what an answer is.

Views parse requests into these models (:func:`picoflow_web.http.api.parse_body`) and build
every answer from them (:func:`answer`), and the OpenAPI document
(:mod:`picoflow_web.http.openapi`) is generated from them: one description, so the document
cannot drift from what the server does. Open models (``extra="allow"``) keep fields a
newer server adds from breaking older clients; the fields listed are the ones promised.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from django.http import HttpResponse
from pydantic import BaseModel, ConfigDict, Field, RootModel

from runtime.events import ID_PATTERN

ID_SCHEMA: dict[str, Any] = {"pattern": f"^{ID_PATTERN.pattern}$"}
"""What the document says of a run or session id a request names. Checked where it is
used, with its own error code (``bad_run_id``, ``bad_session_id``)."""
ID_OR_EMPTY: dict[str, Any] = {"pattern": f"^({ID_PATTERN.pattern})?$"}
"""A session a request may name: an id, or empty for none (as absent: a new session)."""


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")

    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ()
    """Optional fields an answer leaves out rather than send as null (as it always has)."""


class Error(_Open):
    """The one error shape (plus details such as ``fields`` or ``line``)."""

    type: Literal["error"]
    message: str
    code: str
    error_code: str
    fields: dict[str, str] | None = None

    OMITTED_WHEN_NONE = ("fields",)


RunStatus = Literal["queued", "running", "finished", "failed", "interrupted", "cancelled"]


class RunSummary(_Open):
    id: str
    flow: str
    project: str
    session_id: str
    message: str
    status: RunStatus
    reply: dict[str, Any] | None
    has_conflicts: bool
    event_count: int
    branch_count: int
    rejected_count: int
    """Branches rejected (failed, timed out or cancelled)."""
    duration: float | None
    """Seconds of the turn by its events' offsets (null before its first event)."""
    started_at: str | None
    finished_at: str | None
    origin: dict[str, Any]
    """Where the run executed, with a ``label`` for pages: ``kind`` ``server``, ``worker``,
    ``import`` or ``remote`` (shipped to ``/api/ingest``: ``host``, ``pid`` and, when the
    sender named what recorded the run, ``source``, such as ``LangGraph``)."""
    interruption: dict[str, Any] | None
    worker: str | None
    cancel_requested: dict[str, Any] | None
    generation: int
    """Counts the times the run's events were replaced (a trace's run derived again from
    late spans): events read under another generation belong to another record."""


class RunOut(BaseModel):
    run: RunSummary


class RunList(BaseModel):
    runs: list[RunSummary]


class EventPage(BaseModel):
    events: list[dict[str, Any]]
    last_seq: int
    generation: int
    """The run's generation (see :class:`RunSummary`) read after the events: a reader that
    folded earlier pages under the same generation holds one record; under another, it
    starts the run over."""


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


class FlowNames(RootModel[list[str]]):
    """``GET /ai/flows``: the names alone (PicoFlow's contract)."""


class RunStart(_Open):
    """``POST /api/runs``."""

    flow: str
    message: str | None = Field(default=None, max_length=20_000)
    session_id: str | None = Field(default=None, max_length=64, json_schema_extra=ID_OR_EMPTY)
    config: dict[str, Any] | None = None
    project: str | None = None


class AiRun(_Open):
    """``POST /ai/run`` (PicoFlow's contract)."""

    flowName: str
    message: str | None = None
    session: str | None = Field(default=None, json_schema_extra=ID_OR_EMPTY)
    config: dict[str, Any] | None = None
    project: str | None = None


class AiReply(_Open):
    success: bool
    completed: bool
    message: str
    session: str
    contentType: str
    run: str | None = None
    """The turn's run id (its page is ``/runs/<run>/``)."""
    error_code: str | None = None

    OMITTED_WHEN_NONE = ("error_code", "run")


class AiPending(_Open):
    """``POST /ai/run``'s 202: the turn had not ended within ``PICOFLOW_RUN_WAIT``; it goes
    on, and ``follow`` (``/api/runs/<run>``) says how it ends."""

    run: str
    status: Literal["queued", "running"]
    follow: str
    message: str


class AiEnd(_Open):
    """``POST /ai/end``: the session, here or in the ``Chat-Session-Id`` header."""

    session: str | None = Field(default=None, json_schema_extra=ID_OR_EMPTY)


class AiEnded(BaseModel):
    success: bool
    session: str


class RunPosition(BaseModel):
    """Where a run stands after an ingest: its last stored ``seq`` and its status."""

    last_seq: int
    status: RunStatus


class IngestReply(BaseModel):
    """``POST /api/ingest`` and its heartbeat: per run of the request, its position."""

    runs: dict[str, RunPosition]


MAX_HEARTBEAT_RUNS = 1000


class Heartbeat(BaseModel):
    """``POST /api/ingest/heartbeat``: remote runs whose turns are still going."""

    runs: list[str] = Field(max_length=MAX_HEARTBEAT_RUNS, json_schema_extra={
        "items": {"type": "string", **ID_SCHEMA}})


class ImportedRun(BaseModel):
    """One run an import stored."""

    id: str
    original_id: str
    """The run's id in the file (``id`` differs when imported as a copy)."""
    session_id: str
    status: str
    event_count: int
    origin: dict[str, Any]


class ImportReply(BaseModel):
    """``POST /api/import``'s reply (201)."""

    project: str
    copied: bool
    """Whether the runs were stored under new ids (``?copy=1``)."""
    runs: list[ImportedRun]
    events: int
    """Events stored, over all runs."""


MODELS: tuple[type[BaseModel], ...] = (
    Error, RunSummary, RunOut, RunList, EventPage, SessionDoc, SessionOut, FlowInfo,
    FlowList, FlowNames, RunStart, AiRun, AiReply, AiPending, AiEnd, AiEnded, RunPosition,
    IngestReply, Heartbeat, ImportedRun, ImportReply)


def answer(body: BaseModel, status: int = 200) -> HttpResponse:
    """A JSON answer built from its model, serialised once, by pydantic. Views build the
    model by validating what they answer, so an answer that lost a promised field fails
    on the server (a logged 500), not quietly in a client."""
    # Not exclude_none: elsewhere null is an answer ("finished_at": null).
    omitted = getattr(body, "OMITTED_WHEN_NONE", ())
    exclude = {name for name in omitted if getattr(body, name) is None}
    return HttpResponse(body.model_dump_json(exclude=exclude or None), status=status,
                        content_type="application/json")


def event_page(rows: list[tuple[int, str]], after: int, generation: int) -> HttpResponse:
    """An :class:`EventPage` of stored events, ``(seq, JSON text)`` as the event log holds
    them: the text goes into the answer as it is. Every event was validated against the
    event schema when it was stored; parsing and re-encoding thousands of them per page
    would cost the server most of its time for nothing (the shape is the model's)."""
    last_seq = rows[-1][0] if rows else after
    events = ",".join(text for _, text in rows)
    return HttpResponse(f'{{"events":[{events}],"last_seq":{int(last_seq)},'
                        f'"generation":{int(generation)}}}',
                        content_type="application/json")


__all__ = [model.__name__ for model in MODELS] + ["MODELS", "RunStatus", "answer",
                                                   "event_page"]
