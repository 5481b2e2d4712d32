"""The JSON API's bodies as pydantic models: what a request must be and what an answer is.

Views parse requests into these models (:func:`picoflow_web.http.api.parse_body`) and build
every answer from them (:func:`answer`), and the OpenAPI document
(:mod:`picoflow_web.http.openapi`) is generated from them: one description, so the document
cannot drift from what the server does. Open models (``extra="allow"``) keep fields a
newer server adds from breaking older clients; the fields listed are the ones promised.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, NotRequired

from django.http import HttpResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    model_serializer,
    with_config,
)
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

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


class Resumption(BaseModel):
    """What ``POST /api/runs/<id>/resume`` of the run would save."""

    entries: int
    """Branches its ledger holds (reused, not run again, by the resumed run)."""
    tokens: int
    """Tokens those branches spent."""


class RunDetail(RunSummary):
    """One run's summary, and what it takes to resume it."""

    resumable: Resumption | None
    """Non-null when the run may be resumed (``POST /api/runs/<id>/resume``)."""
    resumed_by: str | None
    """The newest run that resumes this one."""


class RunDetailOut(BaseModel):
    run: RunDetail


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


class StopRequest(BaseModel):
    """Someone asked a remote run to stop: its process cancels the turn cooperatively,
    with ``reason`` and ``by`` (the ``turn.cancelled`` event names them)."""

    by: str | None
    at: str | None
    reason: str


class RunPosition(BaseModel):
    """Where a run stands after an ingest: its last stored ``seq`` and its status; ``stop``
    only while the run runs and someone asked it to stop."""

    last_seq: int
    status: RunStatus
    stop: StopRequest | None = None

    @model_serializer(mode="wrap")
    def _stop_only_when_asked(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("stop") is None:
            data.pop("stop", None)  # the answer's shape before remote Stop, unless asked
        return data


class IngestReply(BaseModel):
    """``POST /api/ingest`` and its heartbeat: per run of the request, its position."""

    runs: dict[str, RunPosition]


MAX_HEARTBEAT_RUNS = 1000
MAX_CONTROL_RUNS = 500
"""The most runs one ``GET /api/ingest/control`` names (well under Django's limit of a
query's fields)."""


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


@with_config(ConfigDict(extra="allow"))
class WhatIfOperation(TypedDict):
    """One operation of a schedule: a branch (coordinators too), or the top level's own work
    (``path`` ``""``, ``id`` ``#<n>``). Times are seconds from the turn's start; ``parts``
    are the intervals it was running. A typed dict, not a model: a 10,000-branch run has
    30,000 of them, validated in half the time."""

    id: str
    path: str
    key: str
    step: str
    kind: str
    parent: str
    """The caller's invocation path (``""``: the top level)."""
    depth: int
    start: float
    end: float
    busy: float
    idle: float
    waited_for: list[str]
    """Invocation paths whose end it waited for, latest first."""
    parts: list[tuple[float, float]]
    superstep: NotRequired[int]
    """Only in the ``supersteps`` schedule: the first superstep of its work."""


WhatIfWait = TypedDict("WhatIfWait", {
    "path": str, "key": str, "wait": float, "for": list[str], "for_keys": list[str],
    "at": str, "superstep": int | None, "barrier": str | None})
"""One wait of a schedule: ``path`` waited ``wait`` seconds for the paths ``for`` (keys
``for_keys``), ``at`` a superstep, a join, a slot, or unexplained (as recorded). Spelled
as a call: ``for`` is no Python name."""
WhatIfWait.__pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[attr-defined]


class WhatIfSchedule(_Open):
    """One schedule of the what-if (the ``supersteps`` one adds their count)."""

    total: float
    operations: list[WhatIfOperation]
    waits: list[WhatIfWait]
    """Largest first."""
    critical_path: list[str]


class WhatIfSchedules(BaseModel):
    recorded: WhatIfSchedule
    supersteps: WhatIfSchedule
    local_barriers: WhatIfSchedule


class WhatIf(_Open):
    """``GET /api/runs/<id>/whatif``: the run as recorded, under graph-wide supersteps and
    under local barriers (``runtime.whatif.what_if``)."""

    unit: Literal["s"]
    run: str
    flow: str
    complete: bool
    """False while the turn is still running: the schedules of what happened so far."""
    inferred: list[str]
    schedules: WhatIfSchedules


class ComparedRun(_Open):
    run: str
    flow: str
    status: str
    duration: float | None
    tokens: int
    started_at: float | None
    message: str | None


class ComparedBranchSide(_Open):
    status: str
    duration: float | None
    tokens: int
    """Its own model calls' and its descendants'."""
    output: Any
    published: list[dict[str, Any]]
    """Its own writes its joins kept: ``{step, field, kind, value}``."""


class ComparedBranch(_Open):
    """One branch of either run, matched by invocation path and branch key."""

    path: str
    key: str
    step: str
    match: Literal["both", "only_a", "only_b"]
    a: ComparedBranchSide | None
    b: ComparedBranchSide | None
    changed: list[Literal["status", "duration", "tokens", "output", "published"]]


class ComparedDifference(BaseModel):
    """B - A."""

    duration: float | None
    tokens: int


class ComparedTiming(BaseModel):
    a: WhatIfSchedule
    b: WhatIfSchedule


class Comparison(_Open):
    """``GET /api/runs/<a>/compare/<b>`` (``runtime.whatif.compare_runs``)."""

    unit: Literal["s"]
    a: ComparedRun
    b: ComparedRun
    same_flow: bool
    difference: ComparedDifference
    branches: list[ComparedBranch]
    added: list[str]
    """Paths of B's branches A has no match for."""
    missing: list[str]
    """Paths of A's branches B has no match for."""
    timing: ComparedTiming
    """Each run's recorded schedule."""


MODELS: tuple[type[BaseModel], ...] = (
    Error, RunSummary, RunOut, Resumption, RunDetail, RunDetailOut, RunList, EventPage,
    SessionDoc, SessionOut, FlowInfo, FlowList, FlowNames, RunStart, AiRun, AiReply,
    AiPending, AiEnd, AiEnded, RunPosition,
    IngestReply, Heartbeat, ImportedRun, ImportReply, WhatIfSchedule,
    WhatIfSchedules, WhatIf, ComparedRun, ComparedBranchSide, ComparedBranch, ComparedDifference,
    ComparedTiming, Comparison)


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


__all__ = [model.__name__ for model in MODELS] + ["MODELS", "RunStatus", "WhatIfOperation",
                                                   "WhatIfWait", "answer", "event_page"]
