"""JSON endpoints: the dashboard's API and PicoFlow's HTTP contract (``/ai/*``).

Every endpoint needs an authenticated user: a logged-in session (browser; unsafe methods
then also need the CSRF token) or ``Authorization: Bearer <token>`` (API clients; see
``manage.py create_api_token``). A token acts within its scopes: ``read`` for the reads,
``run`` to start and end turns, ``ingest`` for ``/api/ingest`` (which takes tokens only).
Errors have one shape: ``{"type": "error", "message", "code", "error_code"}`` (plus
details where they help) with a 4xx status: whatever a view or what it calls raises as an
:class:`~picoflow_web.errors.ApiError` is answered so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from picoflow_web.data import access, exporting, otlp_export, runs_query, selectors
from picoflow_web.data.access import Access
from picoflow_web.errors import ApiError, InputError
from picoflow_web.execute import run_ends, services
from picoflow_web.execute.engine import get_engine
from picoflow_web.http import bodies
from picoflow_web.http.bodies import answer
from picoflow_web.http.error_answers import answer_error, error
from picoflow_web.http.jsonbody import MAX_BODY_BYTES, read_json
from picoflow_web.models import Run
from picoflow_web.record import ingest, watchdog
from runtime.events import MAX_ID_CHARS, MAX_SOURCE_CHARS, id_problem, source_problem

View = Callable[..., Coroutine[Any, Any, HttpResponseBase]]

SESSION_SCOPES = access.SESSION_SCOPES
__all__ = ["MAX_BODY_BYTES", "SESSION_SCOPES", "api_view", "error", "read_json"]


async def _authenticate(request: HttpRequest) -> tuple[Access | None, bool]:
    """The request's access (None: not authenticated), and whether it came with a bearer
    token (then CSRF does not apply)."""
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        token = await selectors.api_token_get(header.removeprefix("Bearer ").strip())
        if token is None:
            return None, True
        return await access.for_user(token.user, token.scope_set(), token.project_id), True
    user = await sync_to_async(get_user)(request)
    if not user.is_authenticated:
        return None, False
    return await access.for_user(user), False


def api_view(*methods: str, scope: str | dict[str, str] = "read") -> Callable[[View], View]:
    """Authenticate, check the scope (one, or one per method) and CSRF for browser
    sessions; turn bad input, refusals and unknown ids into the JSON error shape."""

    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        async def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method not in methods:
                response = error(f"Use {' or '.join(methods)}.", 405, "method_not_allowed")
                response["Allow"] = ", ".join(methods)
                return response
            grant, by_token = await _authenticate(request)
            if grant is None:
                return error("Authentication required (a valid, unexpired, unrevoked token "
                             "or a logged-in session).", 401, "unauthenticated")
            needed = scope if isinstance(scope, str) else scope[request.method or "GET"]
            if needed not in grant.scopes:
                how = ("a token with that scope (manage.py create_api_token USER "
                       f"--scope {needed})")
                return error(f"This needs the '{needed}' scope: use {how}.", 403, "scope")
            if request.method not in ("GET", "HEAD") and not by_token:
                check = CsrfViewMiddleware(_nothing)
                if check.process_view(request, _nothing, (), {}) is not None:
                    return error("CSRF check failed.", 403, "csrf")
            request.api_user = grant.user  # type: ignore[attr-defined]
            request.access = grant  # type: ignore[attr-defined]
            try:
                return await view(request, *args, **kwargs)
            except ApiError as exc:
                return answer_error(exc)

        return wrapper

    return decorate


def _nothing(request: HttpRequest) -> HttpResponse:
    """The response and the view the CSRF check is given: it calls neither."""
    return HttpResponse()


def _access(request: HttpRequest) -> Access:
    return request.access  # type: ignore[attr-defined,no-any-return]


def _readable(request: HttpRequest) -> access.Projects:
    return _access(request).readable()


Body = TypeVar("Body", bound=BaseModel)


def parse_body(request: HttpRequest, model: type[Body], limit: int = MAX_BODY_BYTES) -> Body:
    """The request's JSON body (of at most ``limit`` bytes) as ``model`` (one of
    :mod:`picoflow_web.http.bodies`, the models the OpenAPI document is generated from): what
    the document says is what is accepted. A body that does not fit is a 400 naming each
    wrong field."""
    data = read_json(request, limit)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = {".".join(str(part) for part in error["loc"]) or "body":
                  _PLAIN.get(error["type"], error["msg"][:1].lower() + error["msg"][1:])
                  for error in exc.errors(include_url=False, include_input=False)}
        summary = "; ".join(f"{name} {problem}" for name, problem in fields.items())
        raise InputError(f"{summary}.", fields=fields, error_code="wrong_type") from None


_PLAIN = {"missing": "is required", "string_type": "must be a string",
          "dict_type": "must be a JSON object", "bool_type": "must be true or false",
          "int_type": "must be an integer"}
"""How a field's problem reads in an error message (pydantic's own words otherwise)."""


def _blank(value: str | None) -> str | None:
    return value or None


# -- dashboard API ------------------------------------------------------------------------


@api_view("GET")
async def flows(request: HttpRequest) -> HttpResponse:
    """The served flows, in order, with what a start form needs: ``{"flows": [{"id",
    "description", "config_schema" (JSON Schema or null), "example_messages",
    "needs_message"}]}``."""
    engine = get_engine()
    return answer(bodies.FlowList.model_validate(
        {"flows": [engine.flow_info(name).model_dump() for name in engine.get_flow_names()]}))


@api_view("GET", "POST", scope={"GET": "read", "POST": "run"})
async def runs(request: HttpRequest) -> HttpResponse:
    """GET: run summaries (filters: flow, status, conflicts=1, rejected=1, project; ``session`` id
    prefix, ``q`` text search, ``since``/``until`` start time, ``sort``: see
    :mod:`picoflow_web.data.runs_query`). POST: start a run."""
    if request.method == "POST":
        body = parse_body(request, bodies.RunStart)
        run = await services.run_start(
            flow=body.flow, message=_blank(body.message),
            session_id=_blank(body.session_id), config=body.config,
            user=request.api_user,  # type: ignore[attr-defined]
            grant=_access(request), project=_blank(body.project),
        )
        return answer(bodies.RunOut.model_validate({"run": run.summary()}), 201)
    await watchdog.sweep()  # runs whose executor vanished are not listed as running
    params = request.GET
    conflicts = params.get("conflicts")
    query = runs_query.parse(params.dict())
    listed = await selectors.run_list(
        flow=params.get("flow") or None, status=params.get("status") or None,
        has_conflicts=_flag(conflicts), has_rejected=_flag(params.get("rejected")),
        projects=_project_filter(request), query=query,
    )
    return answer(bodies.RunList.model_validate({"runs": listed}))


def _flag(raw: str | None) -> bool | None:
    """A yes/no filter: absent or empty means "either"."""
    return None if raw in (None, "") else raw in ("1", "true")


def _project_filter(request: HttpRequest) -> access.Projects:
    """The readable projects, narrowed to ``?project=`` when given."""
    readable = _readable(request)
    wanted = request.GET.get("project")
    if not wanted:
        return readable
    return frozenset({wanted}) & readable if readable is not None else frozenset({wanted})


@api_view("GET")
async def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """One run's summary."""
    run = await selectors.run_get(run_id, projects=_readable(request))
    if run is None:
        return error(f"No run {run_id!r}.", 404, "not_found")
    resumable = await services.run_resumable(run)
    return answer(bodies.RunDetailOut.model_validate({"run": {
        **run.summary(), "resumed_by": await services.run_resumed_by(run),
        "resumable": None if resumable is None else {"entries": resumable.entries,
                                                     "tokens": resumable.tokens}}}))


@api_view("POST", scope="run")
async def run_cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    """``POST /api/runs/<id>/cancel``: ask the run to stop. 202 with its summary: a queued
    run is ``cancelled`` at once, a running one once its worker, or the process it runs in
    (told by ingest's answers), stopped the turn (cooperatively, with the flow's grace
    period); 409 when it already ended."""
    run = await services.run_cancel(run_id, _access(request))
    if run is None:
        return error(f"No run {run_id!r}.", 404, "not_found")
    return answer(bodies.RunOut.model_validate({"run": run.summary()}), 202)


@api_view("POST", scope="run")
async def run_resume(request: HttpRequest, run_id: str) -> HttpResponse:
    """``POST /api/runs/<id>/resume``: queue a new run that resumes the interrupted, failed
    or stopped run's turn, reusing the branches its branch ledger holds. 202 with the new
    run's summary (its origin's ``resumes`` names this run); 409 ``not_resumable`` when
    there is nothing to resume (the message says why)."""
    run = await services.run_resume(run_id, _access(request))
    if run is None:
        return error(f"No run {run_id!r}.", 404, "not_found")
    return answer(bodies.RunOut.model_validate({"run": run.summary()}), 202)


@api_view("GET")
async def run_events(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """Stored events after ``?after=<seq>``: a page of at most ``?limit=`` as JSON, or,
    asked with ``Accept: application/x-ndjson``, every one of them as one streamed JSONL
    response (what a page loading a stored run reads: no round trip per page)."""
    run = await selectors.run_get(run_id, projects=_readable(request))
    if run is None:
        return error(f"No run {run_id!r}.", 404, "not_found")
    after = selectors.seq_param(request.GET.get("after"), "after", -1)
    if request.GET.get("compact", "0") not in ("0", "1"):
        raise InputError("compact must be 0 or 1.", error_code="bad_parameter")
    if _wants_ndjson(request):
        return _event_stream(request, run.id, run.session_id, after, run.generation)
    limit = selectors.seq_param(request.GET.get("limit"), "limit", selectors.EVENT_PAGE)
    rows = await selectors.run_event_texts_after(run_id, after, min(max(limit, 1),
                                                                    selectors.EVENT_PAGE))
    response = bodies.event_page(rows, after, await selectors.run_generation(run_id))
    response["Vary"] = "Accept"  # the same URL streams JSONL to whoever asks for it
    return response


ENVELOPE_HEADER = "PicoFlow-Envelope"
"""Asked for with ``?compact=1``: the fields taken off the stream's events, as JSON."""

GENERATION_HEADER = "PicoFlow-Generation"
"""The run's generation read before the stream's events: a later summary or events page
naming the same one means no rebuild replaced them since."""


def _event_stream(request: HttpRequest, run_id: str, session_id: str, after: int,
                  generation: int) -> StreamingHttpResponse:
    """A run's stored events as JSONL. With ``?compact=1`` an event that begins with the
    fields every event of the run shares (schema version, run id, session id) goes without
    them, and the ``PicoFlow-Envelope`` header gives them once, to be put back."""
    envelope, prefix = exporting.envelope_of(run_id, session_id)
    compact = request.GET.get("compact") == "1"
    response = StreamingHttpResponse(
        exporting.alines_after(run_id, after, prefix if compact else ""),
        content_type=exporting.CONTENT_TYPE)
    response["Vary"] = "Accept"
    response[GENERATION_HEADER] = str(generation)
    if compact:
        response[ENVELOPE_HEADER] = envelope
    return response


def _wants_ndjson(request: HttpRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return exporting.CONTENT_TYPE in accept and "application/json" not in accept


@api_view("GET")
async def run_otlp(request: HttpRequest, run_id: str) -> HttpResponse:
    """``GET /api/runs/<id>/otlp``: the run as an OTLP trace, as a download: protobuf (an
    ``ExportTraceServiceRequest``) when ``Accept`` asks for ``application/x-protobuf``,
    OTLP/JSON otherwise."""
    if await selectors.run_get(run_id, projects=_readable(request)) is None:
        return error(f"No run {run_id!r}.", 404, "not_found")
    if _wants_protobuf(request):
        body = await sync_to_async(otlp_export.run_to_protobuf)(run_id)
        response = HttpResponse(body, content_type=otlp_export.PROTOBUF)
        suffix = ".otlp.pb"
    else:
        text = await sync_to_async(otlp_export.run_to_json)(run_id)
        response = HttpResponse(text, content_type="application/json")
        suffix = ".otlp.json"
    response["Content-Disposition"] = exporting.disposition("run", run_id, suffix)
    response["Vary"] = "Accept"
    return response


def _wants_protobuf(request: HttpRequest) -> bool:
    """Whether ``Accept`` prefers protobuf: it names it with a q above 0 and above JSON's."""
    weights: dict[str, float] = {}
    for item in request.headers.get("Accept", "").split(","):
        media, _, params = item.strip().partition(";")
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        weights[media.strip().lower()] = quality
    protobuf = weights.get(otlp_export.PROTOBUF, 0.0)
    return protobuf > 0 and protobuf >= weights.get("application/json", 0.0)


@api_view("GET")
async def session_detail(request: HttpRequest, session_id: str) -> HttpResponse:
    """A session's document and runs."""
    session = await selectors.session_get(session_id, projects=_readable(request))
    if session is None:
        return error(f"No session {session_id!r}.", 404, "not_found")
    return answer(bodies.SessionOut.model_validate({"session": session}))


# -- PicoFlow's HTTP contract ------------------------------------------------------------


CONFLICT = "session_conflict"
"""The reply's ``error_code`` when a compare-and-swap save of the session lost."""


@api_view("POST", scope="run")
async def ai_run(request: HttpRequest) -> HttpResponse:
    """``POST /ai/run`` ``{flowName, message, config, session?}``.

    The session comes from the ``Chat-Session-Id`` request header or the body's
    ``session`` field. (PicoFlow spells the header ``CHAT_SESSION_ID``; servers drop
    request headers with underscores, Daphne included, so send it hyphenated.) A turn that
    has not ended within ``PICOFLOW_RUN_WAIT`` seconds is answered 202 with its run id and
    where to follow it (``Location: /api/runs/<id>``); the run goes on.
    """
    ask = parse_body(request, bodies.AiRun)
    header = _session_header(request)
    session_id = _blank(ask.session) or header
    try:
        run, reply = await services.run_execute(
            flow=ask.flowName, message=_blank(ask.message), session_id=session_id,
            config=ask.config, user=request.api_user,  # type: ignore[attr-defined]
            grant=_access(request), project=_blank(ask.project),
            run_id=_blank(request.headers.get("PicoFlow-Run-Id")),
            coordinator=_coordinator(request),
        )
    except services.RunStillGoing as going:
        return _pending(going.run, going.waited)
    body = bodies.AiReply(success=reply.success, completed=reply.completed,
                          message=reply.message, session=reply.session_id,
                          contentType=reply.content_type, run=run.id,
                          error_code=None if reply.success else reply.error_code)
    if reply.success and reply.content_type != "text/plain":
        response: HttpResponse = HttpResponse(reply.message, content_type=reply.content_type)
    else:
        # Another writer saved the session first: a conflict (409), not bad input.
        status = 200 if reply.success else 409 if reply.error_code == CONFLICT else 400
        response = answer(body, status)
    response["CHAT_SESSION_ID"] = reply.session_id
    response["Chat-Session-Id"] = reply.session_id
    response["PicoFlow-Run-Id"] = run.id
    return response


def _pending(run: Any, waited: float) -> HttpResponse:
    """202: the run had not ended within ``PICOFLOW_RUN_WAIT``; where to follow it."""
    follow = f"/api/runs/{run.id}"
    response = answer(bodies.AiPending(
        run=run.id, status=run.status, follow=follow,
        message=f"Run {run.id} has not ended within {waited:g} s; "
                f"it goes on: follow it at {follow}."), 202)
    response["Location"] = follow
    response["PicoFlow-Run-Id"] = run.id
    return response


def _coordinator(request: HttpRequest) -> dict[str, Any] | None:
    """Which coordinator's child a request is (``concurrent_steps()`` says so in its
    headers), for the child's run page to link back; None for any other request."""
    run_id = request.headers.get("PicoFlow-Coordinator-Run", "")
    if not services.RUN_ID.fullmatch(run_id):
        return None

    def number(name: str) -> int | None:
        value = request.headers.get(name, "")
        return int(value) if value.isdigit() and len(value) < 10 else None

    group = request.headers.get("PicoFlow-Coordinator-Group", "")
    return {"run_id": run_id, "group": group[:32], "batch": number("PicoFlow-Coordinator-Batch"),
            "item": number("PicoFlow-Coordinator-Item")}


@api_view("GET")
async def ai_flows(request: HttpRequest) -> HttpResponse:
    """``GET /ai/flows``: the flow names."""
    return answer(bodies.FlowNames(get_engine().get_flow_names()))


def _session_header(request: HttpRequest) -> str | None:
    """The ``Chat-Session-Id`` header, refused (400 ``bad_session_id``) when it is no id,
    even where the body names the session: a request is refused for what it sends."""
    header = request.headers.get("Chat-Session-Id")
    services.check_id(header, "session id")
    return header


@api_view("POST", scope="run")
async def ai_end(request: HttpRequest) -> HttpResponse:
    """``POST /ai/end``: delete the session (``Chat-Session-Id`` header or body ``session``).

    Deletion is not completion: the session's runs stay in the history.
    """
    named = (parse_body(request, bodies.AiEnd).session
             if request.content_type == "application/json" else None)
    header = _session_header(request)
    session_id = _blank(named) or header
    if not session_id:
        raise InputError("Name the session: a Chat-Session-Id header or a 'session' field.")
    deleted = await services.session_end(session_id, _access(request))
    return answer(bodies.AiEnded(success=deleted, session=session_id),
                  200 if deleted else 404)


# -- ingest: events from other processes -------------------------------------------------


def _origin(request: HttpRequest) -> dict[str, Any]:
    pid = request.headers.get("PicoFlow-Origin-Pid", "")
    origin: dict[str, Any] = {
        "kind": "remote", "host": request.headers.get("PicoFlow-Origin-Host", "")[:200],
        "pid": int(pid) if pid.isdigit() else None}
    # What recorded the runs (LangGraphTracer sends "LangGraph"), for the origin label:
    # cut like the host; one that is not then a line of printable ASCII is left out.
    source = request.headers.get("PicoFlow-Origin-Source", "")[:MAX_SOURCE_CHARS].strip()
    if source and source_problem(source) is None:
        origin["source"] = source
    return origin


@api_view("POST", scope="ingest")
async def ingest_events(request: HttpRequest) -> HttpResponse:
    """``POST /api/ingest``: NDJSON events (one per line, any runs); stored, then broadcast.

    The reply names, per run of the request, the last stored ``seq`` and the run's status.
    A refused request stores nothing of itself (see :mod:`picoflow_web.record.ingest`).
    """
    if request.content_type != "application/x-ndjson":
        return error("Send events as application/x-ndjson: one JSON event per line.", 415,
                     "unsupported_media_type")
    grant = _access(request)
    project = grant.token_project or access.DEFAULT_PROJECT
    grant.require(project, "ingest", f"project {project!r}")
    body = ingest.read_body(request)
    watchdog.ensure()
    runs = await ingest.events_ingest(body, origin=_origin(request), project=project,
                                      user=request.api_user)  # type: ignore[attr-defined]
    return answer(bodies.IngestReply.model_validate({"runs": runs}))


HEARTBEAT_BODY_BYTES = MAX_BODY_BYTES + bodies.MAX_HEARTBEAT_RUNS * (MAX_ID_CHARS + 4)
"""Room for the most run ids a heartbeat may name, each of the longest length."""


@api_view("POST", scope="ingest")
async def ingest_heartbeat(request: HttpRequest) -> HttpResponse:
    """``POST /api/ingest/heartbeat`` ``{"runs": [run ids]}``: these remote runs' turns are
    still going, so they are not declared interrupted. The reply is that of ingest."""
    ids = parse_body(request, bodies.Heartbeat, HEARTBEAT_BODY_BYTES).runs
    for run_id in ids:
        problem = id_problem(run_id)
        if problem is not None:  # no run has it: a sender that made it up is told so
            raise InputError(problem, error_code="bad_run_id")
    grant = _access(request)
    project = grant.token_project or access.DEFAULT_PROJECT
    grant.require(project, "ingest", f"project {project!r}")
    watchdog.ensure()
    return answer(bodies.IngestReply.model_validate(
        {"runs": await ingest.runs_heartbeat(ids, project)}))


CONTROL_WAIT = 25.0
"""Seconds ``GET /api/ingest/control`` holds a request open by default (``?wait=``)."""
MAX_CONTROL_WAIT = 60.0


@api_view("GET", scope="ingest")
async def ingest_control(request: HttpRequest) -> HttpResponse:
    """``GET /api/ingest/control?run=<id>[&run=<id>…][&wait=<s>]``: a long-poll a remote
    process keeps open for what the dashboard asks of its runs. It answers as soon as one
    of them has a stop request (``stop``) or has ended, else after ``wait`` seconds
    (default 25, at most 60), in the ingest answer's shape; at once when it knows none of
    them (their first events are still on the way). It is no sign of life: only events
    and heartbeats keep a run from being declared interrupted."""
    named = request.GET.getlist("run")
    ids = list(dict.fromkeys(named))
    # Counted as named, repeats included: the limit the OpenAPI document states (maxItems).
    if not ids or len(named) > bodies.MAX_CONTROL_RUNS:
        raise InputError(f"Name 1 to {bodies.MAX_CONTROL_RUNS} runs (?run=<id>).",
                         error_code="bad_parameter")
    for run_id in ids:
        problem = id_problem(run_id)
        if problem is not None:
            raise InputError(problem, error_code="bad_run_id")
    try:
        wait = float(request.GET.get("wait", CONTROL_WAIT))
    except ValueError:
        raise InputError("wait must be a number of seconds.",
                         error_code="bad_parameter") from None
    if not 0 <= wait <= MAX_CONTROL_WAIT:
        raise InputError(f"wait must be 0 to {MAX_CONTROL_WAIT:g} seconds.",
                         error_code="bad_parameter")
    grant = _access(request)
    project = grant.token_project or access.DEFAULT_PROJECT
    grant.require(project, "ingest", f"project {project!r}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        async with run_ends.changes(ids) as changed:  # heard from before the read on
            runs = await ingest.runs_control(ids, project)
            left = deadline - loop.time()
            # None of them known (yet): nothing to wait for, and an answer that names
            # none of them tells the process so.
            if left <= 0 or not runs or any("stop" in run or run["status"] != Run.Status.RUNNING
                                            for run in runs.values()):
                return answer(bodies.IngestReply.model_validate({"runs": runs}))
            # A request made in another process whose summary is not heard here (no
            # shared channel layer) is read on the next round.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(run_ends.RECHECK, left)):
                    await changed.wait()

