"""Ingest: the door events from other processes come in by.

A user's own process — an application, a script, a notebook, a test — runs its turns and
ships their events here (``runtime.events.DashboardSink`` does it, or anything that speaks
this contract): ``POST /api/ingest`` with one event per line, as the runtime serialised
it. Each request is checked whole before anything is written — every line parses, is a
known event type of this schema version with every field of its JSON type, names valid ids
(:mod:`runtime.events.ids`; else 400 ``bad_run_id`` / ``bad_session_id``), holds numbers
the database can store, and continues its run's stored sequence (a
resent event already stored is accepted and ignored, a gap is refused with the ``seq``
expected next, unless a ``sink.overflowed`` of the same request says those events were
lost) — so a refused request stores nothing of itself. Then, in one transaction,
``turn.started`` creates the run and the events go through the door every source uses
(:mod:`picoflow_web.record.append`: stored, the run updated from them, ``turn.finished``,
``turn.failed`` or ``turn.cancelled`` ending it), and only then are they broadcast to the
run's group: the same path, and the same page, as runs the dashboard executed, but for the
origin label.

A remote run that goes silent (no events, no heartbeats) for ``PICOFLOW_REMOTE_TIMEOUT``
seconds is declared interrupted (:mod:`picoflow_web.record.interruption`): a
``run.interrupted`` event is stored and broadcast, and whatever arrives for it later is
refused.

Imports (:mod:`picoflow_web.record.importing`) go through the same parser and store path, with
their own plan: whole runs, all new.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from pydantic import ValidationError

from picoflow_web.config import app_settings
from picoflow_web.data.eventlog import read_texts
from picoflow_web.data.redact import may_hold_secret, redact
from picoflow_web.data.strict_json import DECODER, NumberTooLarge
from picoflow_web.errors import ApiError
from picoflow_web.models import DEFAULT_PROJECT, Project, Run, StoredSession, TraceSpan
from picoflow_web.record.append import (
    MAX_PATH,
    Incoming,
    Stored,
    append,
    broadcast,
    covered,
    reported_losses,
)
from runtime.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    BranchStarted,
    Event,
    SessionLoaded,
    SessionSaved,
    StepEntered,
    fold,
    id_problem,
    parse_event,
)

logger = logging.getLogger("picoflow.web")

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body (a batch of events)."""
MAX_LINE_BYTES = 32 * 1024 * 1024
"""Largest single event. A fork's event lists every branch it requests: 100,000 bare
branches make a 9 MB line, so the limit is well above that (a file or a body of many lines
holds no less in memory)."""


class IngestError(ApiError):
    """A refused request of ingest or import: its status, code, message and the details
    that locate it (``line``, ``expected``, ``limit``)."""

    def __init__(self, message: str, *, code: str, status: int = 400, **details: Any) -> None:
        super().__init__(message, code=code, status=status, **details)


@dataclass(frozen=True)
class Line:
    """One event of a request: where it was, and what it says."""

    number: int
    data: dict[str, Any]
    text: str | None = None
    """The event's JSON as it is stored and broadcast, when known: the line as it came (the
    sender serialised it; nothing here encodes it again), or its redacted form. None: the
    store encodes ``data``."""

    def stored_text(self) -> str:
        return self.text if self.text is not None else encode(self.data)

    def incoming(self) -> Incoming:
        """The event as the store takes it (:mod:`picoflow_web.record.append`)."""
        return (self.seq, self.type, str(self.data.get("path", ""))[:MAX_PATH],
                self.stored_text(), self.data)

    @property
    def run_id(self) -> str:
        return str(self.data["run_id"])

    @property
    def seq(self) -> int:
        return int(self.data["seq"])

    @property
    def type(self) -> str:
        return str(self.data["type"])


def read_body(request: HttpRequest, limit: int | None = None,
              advice: str = "send smaller batches") -> bytes:
    """The raw body, refused (413) when larger than ``limit`` bytes (default
    :data:`MAX_BODY_BYTES`).

    Read from the stream: Django's ``request.body`` caps bodies at
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with an HTML error, and a batch of events is larger.
    """
    limit = MAX_BODY_BYTES if limit is None else limit
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise IngestError(f"Body of {length} bytes is larger than {limit}; {advice}.",
                          code="body_too_large", status=413, limit=limit)
    body = request.read(limit + 1)
    if len(body) > limit:
        raise IngestError(f"Body is larger than {limit} bytes; {advice}.",
                          code="body_too_large", status=413, limit=limit)
    return body


def parse_lines(body: bytes, *, recorded: bool = False) -> list[Line]:
    """Every non-blank line as a validated event; the first bad line refuses them all.

    ``recorded``: the lines are a dashboard's record (an export), which may hold the
    ``run.interrupted`` a dashboard writes itself; a process shipping events may not.
    """
    lines = []
    for number, raw in enumerate(body.split(b"\n"), 1):
        if not raw.strip():
            continue
        data, text = _parse(number, raw, recorded=recorded)
        clean = redact(data) if may_hold_secret(text) else data
        # The same object back: nothing to redact, so it is stored as it came; else the
        # redacted event is encoded when stored.
        lines.append(Line(number, data, text) if clean is data else Line(number, clean))
    return lines


def encode(data: dict[str, Any]) -> str:
    """An event's JSON for the store, compact, as the runtime writes it."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _refuse(number: int, code: str, message: str, status: int = 400, **details: Any
            ) -> IngestError:
    return IngestError(f"Line {number}: {message}",
                       code=code, status=status, line=number, **details)


def _parse(number: int, raw: bytes, *, recorded: bool = False) -> tuple[dict[str, Any], str]:
    """A line's event and its text (checked, not yet redacted); raises for a bad one.

    Every field is checked by its JSON type before anything reads it: the event's model
    validates in strict mode (``"2"`` is no ``seq``, ``true`` no number), as the stored
    line is the text as sent and every reader (the browser, an export, an import) takes
    the values in it as they are.
    """
    if len(raw) > MAX_LINE_BYTES:
        raise _refuse(number, "line_too_large",
                      f"{len(raw)} bytes is larger than the {MAX_LINE_BYTES} an event may be.",
                      413, limit=MAX_LINE_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(number, "not_utf8", f"not UTF-8 ({exc.reason} at byte {exc.start})."
                      ) from None
    try:
        data = DECODER.decode(text)
    except RecursionError:
        raise _refuse(number, "malformed_json", "JSON nested too deeply.") from None
    except NumberTooLarge as exc:
        raise _refuse(number, "number_too_large", f"{exc}.") from None
    except ValueError as exc:
        raise _refuse(number, "malformed_json", f"not JSON ({exc}).") from None
    if not isinstance(data, dict):
        raise _refuse(number, "malformed_event", "an event is a JSON object.")
    version = data.get("v")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise _refuse(number, "schema_version",
                      f"schema version {_shown(version)}; this dashboard reads version "
                      f"{SCHEMA_VERSION}.", expected_version=SCHEMA_VERSION)
    kind = data.get("type")
    model = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise _refuse(number, "unknown_event_type", f"unknown event type {_shown(kind)}.")
    if kind == "run.interrupted" and not recorded:
        raise _refuse(number, "reserved_event_type",
                      "run.interrupted is recorded by the dashboard, not sent to it.")
    try:
        model.model_validate(data, strict=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))[:80]}: {e['msg']}"
                             for e in exc.errors(include_url=False)[:5])
        raise _refuse(number, "invalid_event", f"not a valid {kind} event: {problems}."
                      ) from None
    except RecursionError:
        raise _refuse(number, "invalid_event", "values nested too deeply.") from None
    # What the event store can hold: no lone surrogates, no NUL (PostgreSQL). UTF-8 that
    # decoded holds neither, so only a line with \u escapes can: only those are re-encoded.
    if b"\\u" in raw:
        try:
            encoded = json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _refuse(number, "invalid_text", "text with a lone surrogate escape."
                          ) from None
        if b"\\u0000" in encoded:
            raise _refuse(number, "invalid_text", "text with a NUL character (\\u0000).")
    _check_envelope(number, data)
    return data, text.strip()


MAX_STORED_INT = 2**31 - 1
"""Largest ``seq`` or ``revision``: the database's integer columns (PostgreSQL's
``integer``) hold no more."""
STORED_INTS = ("seq", "first_seq", "last_seq", "revision")
MAX_TIME = 253402300799.0
"""The last second of the year 9999: a later ``time`` is no date (nor is one before 1970)."""


def _check_envelope(number: int, data: dict[str, Any]) -> None:
    """The ids, the numbers the database stores and the time of a validated event."""
    problem = id_problem(data["run_id"], "run id")
    if problem is not None:
        raise _refuse(number, "invalid_event", problem, error_code="bad_run_id")
    if data["session_id"]:
        problem = id_problem(data["session_id"], "session id")
        if problem is not None:
            raise _refuse(number, "invalid_event", problem, error_code="bad_session_id")
    for name in STORED_INTS:
        value = data.get(name)
        if isinstance(value, int) and value > MAX_STORED_INT:
            raise _refuse(number, "number_too_large", f"{name} is larger than "
                          f"{MAX_STORED_INT}, the largest the dashboard stores.")
    if not 0 <= data["time"] <= MAX_TIME:
        raise _refuse(number, "invalid_event", f"time {data['time']!r} is no date (Unix "
                      f"seconds, 0 to {MAX_TIME:.0f}).")


def _shown(value: Any) -> str:
    """A value a client sent, as a message may repeat it (short)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Planned:
    """What one request does to one run."""

    run_id: str
    run: Run | None
    fresh: list[Line] = field(default_factory=list)


def _plan(lines: list[Line], runs: dict[str, Run], project: str) -> list[Planned]:
    """Check every run's lines against what is stored; raise for the first refusal."""
    plans = []
    hidden: list[Planned] = []
    for run_id, items in by_run(lines).items():
        run = runs.get(run_id)
        if run is not None and run.project_id != project:
            # Another project's run does not exist here: its lines are checked as an
            # unknown run's are, and refused only where one would be made, after every
            # other check, so the answer is the one an unknown id gets wherever it can be.
            hidden.append(Planned(run_id, None, continuing(run_id, items, 0)))
            check_first(run_id, hidden[-1].fresh)
            continue
        last = run.last_seq if run is not None else -1
        if run is not None and not run.is_remote:
            raise IngestError(f"Run {run_id} was executed by this dashboard; its events "
                              "cannot be sent to it.",
                              code="not_remote", status=409, run_id=run_id, line=items[0].number)
        if run is not None and TraceSpan.objects.filter(trace_id=run_id).exists():
            raise IngestError(f"Run {run_id} is derived from OpenTelemetry spans; send its "
                              "spans to /v1/traces.",
                              code="not_remote", error_code="spans_run", status=409,
                              run_id=run_id, line=items[0].number)
        plan = Planned(run_id, run, continuing(run_id, items, last + 1))
        if plan.fresh and run is not None and run.status == Run.Status.INTERRUPTED:
            raise IngestError(f"Run {run_id} was declared interrupted (silent for longer "
                              f"than {app_settings.get('REMOTE_TIMEOUT'):g} s); it takes no "
                              "more events.",
                              code="run_interrupted", status=409, run_id=run_id,
                              line=plan.fresh[0].number)
        after_end = [item for item in plan.fresh if item.type != "sink.overflowed"]
        if after_end and run is not None and run.status != Run.Status.RUNNING:
            raise IngestError(f"Run {run_id} has ended ({run.status}); it "
                              "takes no more events (but a sink's report of what it lost).",
                              code="run_ended", status=409, run_id=run_id, line=after_end[0].number)
        if run is None:
            check_first(run_id, plan.fresh)
        plans.append(plan)
    _refuse_foreign_sessions(plans + hidden, project)
    made = next((plan for plan in hidden if plan.fresh), None)
    if made is not None:
        line = made.fresh[0].number
        raise IngestError(f"Line {line}: run id {made.run_id} cannot be "
                          f"used in project {project!r}; a new run needs a new id.",
                          code="not_found", status=404, run_id=made.run_id, line=line)
    return plans


def _refuse_foreign_sessions(plans: list[Planned], project: str) -> None:
    """Refuse (404) the first line naming a session another project uses: a remote run
    continues a session of its own project or starts a new one."""
    named: dict[str, Line] = {}
    for plan in plans:
        known = plan.run.session_id if plan.run is not None else ""
        for line in plan.fresh:  # a run's own session was checked when it was named
            session_id = line.data["session_id"]
            if session_id and session_id != known:
                named.setdefault(session_id, line)
    if not named:
        return
    elsewhere = set(StoredSession.objects.filter(id__in=named).exclude(
        project_id=project).values_list("id", flat=True))
    elsewhere |= set(Run.objects.filter(session_id__in=named).exclude(
        project_id=project).values_list("session_id", flat=True))
    if elsewhere:
        line = min((named[session_id] for session_id in elsewhere), key=lambda found: found.number)
        session_id = line.data["session_id"]
        raise IngestError(f"Line {line.number}: session id {session_id} "
                          f"cannot be used in project {project!r}; name a session of this "
                          "project, or a new one.",
                          code="not_found", status=404, session_id=session_id, line=line.number)


def by_run(lines: list[Line]) -> dict[str, list[Line]]:
    """The lines grouped by run, runs in the order they first appear."""
    grouped: dict[str, list[Line]] = {}
    for line in lines:
        grouped.setdefault(line.run_id, []).append(line)
    return grouped


def continuing(run_id: str, items: list[Line], expected: int, *, resent: bool = True
               ) -> list[Line]:
    """The lines of ``items`` (one run's, in order) that continue its sequence at
    ``expected``; a gap the run's ``sink.overflowed`` events do not account for is refused.
    A seq below the expected one is a resend, skipped, unless ``resent`` is False: then
    it is refused too (a file of whole runs repeats nothing)."""
    lost = reported_losses(item.data for item in items)
    fresh: list[Line] = []
    for item in items:
        if item.seq < expected and resent:
            continue  # already stored (or repeated in this request): idempotent resend
        if item.seq < expected:
            raise IngestError(f"Line {item.number}: run {run_id} repeats seq {item.seq} "
                              f"(seq {expected} comes next).",
                              code="seq_repeated", status=400, run_id=run_id,
                              expected_seq=expected, line=item.number)
        if item.seq > expected and covered(expected, item.seq, lost):
            expected = item.seq  # the sink said it lost these: a gap on purpose
        if item.seq > expected and not resent and not fresh and expected == 0:
            raise IngestError(f"Line {item.number}: run {run_id} starts at seq {item.seq}; "
                              "a run's events are numbered from 0.",
                              code="seq_start", status=400, run_id=run_id, expected_seq=0,
                              line=item.number)
        if item.seq > expected:
            raise IngestError(f"Line {item.number}: run {run_id} continues at seq "
                              f"{expected}, not {item.seq}.",
                              code="seq_gap", status=409 if resent else 400, run_id=run_id,
                              expected_seq=expected, line=item.number)
        fresh.append(item)
        expected += 1
    return fresh


def check_first(run_id: str, fresh: list[Line]) -> None:
    """A new run's events begin with its ``turn.started``."""
    if fresh and fresh[0].type != "turn.started":
        raise IngestError(f"Line {fresh[0].number}: run {run_id} is new, so its "
                          "first event must be turn.started (seq 0).",
                          code="run_unknown", status=400, run_id=run_id, line=fresh[0].number)


Planner = Callable[[list[Line], dict[str, Run], str], list[Planned]]
"""Checks a request's lines against the runs already stored under their ids (locked) and
says what to store: ingest's :func:`_plan` continues remote runs, an import makes new
ones only."""


def store_lines(lines: list[Line], origin: Callable[[str], dict[str, Any]], user: Any,
                project: str, planner: Planner | None = None) -> Stored:
    """Check and store ``lines`` in one transaction; ``origin`` of a new run (by id)."""
    out = Stored()
    ids = {line.run_id for line in lines}
    with transaction.atomic():
        runs = {run.id: run for run in Run.objects.select_for_update().filter(id__in=ids)}
        plans = (planner or _plan)(lines, runs, project)
        now = timezone.now()
        for plan in plans:
            run, created = plan.run, False
            if run is None and plan.fresh:
                run, created = _run_create(plan.fresh[0].data, origin(plan.run_id), user,
                                           now, project), True
            if run is None:
                continue
            if plan.fresh:
                appended = append(run, [line.incoming() for line in plan.fresh], now=now,
                                  new=created)
                out.appended.append(appended)
                if appended.ended:
                    _session_record(run)
            else:
                run.last_seen_at = now
                run.save(update_fields=["last_seen_at"])
            out.reply[run.id] = position(run)
    return out


def position(run: Run) -> dict[str, Any]:
    """What the process running a remote run is told of it: its last stored seq, its
    status and, while it runs and someone asked it to stop, ``stop`` (who, when, why)."""
    out: dict[str, Any] = {"last_seq": run.last_seq, "status": run.status}
    stop = stop_request(run)
    if stop is not None:
        out["stop"] = stop
    return out


def stop_request(run: Run) -> dict[str, Any] | None:
    """The stop request a remote run's process has to obey (None when there is none, or
    the run ended): ``by`` and ``at`` as the dashboard recorded them, and the ``reason``
    its turn is cancelled with."""
    request = run.cancel_requested
    if not isinstance(request, dict) or run.status != Run.Status.RUNNING or not run.is_remote:
        return None
    by = request.get("by") or None
    return {"by": by, "at": request.get("at"),
            "reason": f"stopped from the dashboard by {by}" if by else
            "stopped from the dashboard"}


def _run_create(first: dict[str, Any], origin: dict[str, Any], user: Any, now: Any,
                project: str) -> Run:
    authenticated = user is not None and getattr(user, "is_authenticated", False)
    return Run.objects.create(
        id=first["run_id"], flow=str(first.get("flow", ""))[:200], project_id=project,
        message=first.get("message") or "", session_id=first.get("session_id", "")[:64],
        origin=origin, last_seen_at=now, started_by=user if authenticated else None)


def _session_record(run: Run) -> None:
    """The session of a remote turn that ended, as its events describe it: state, cursor,
    context and tokens (the process keeps the real document; this one is for reading, and
    marked ``remote`` so the dashboard's own engine never continues it)."""
    if not run.session_id:
        return
    existing = StoredSession.objects.filter(id=run.session_id).values_list(
        "doc", "project_id").first()
    if existing is not None and existing[1] != run.project_id:
        return  # another project's session id: never written across projects
    doc = existing[0] if existing is not None else None
    if doc is not None and not (isinstance(doc, dict) and doc.get("remote")):
        return  # a session this dashboard runs itself: its own document is the truth
    # The stored text, validated straight from JSON: no JSON field decoding it first.
    events = [parse_event(text) for _, text in read_texts(run.id, -1, run.last_seq + 1)]
    model = fold(events, drafts=False)  # the canonical state is all it reads
    loaded = next((e for e in events if isinstance(e, SessionLoaded)), None)
    revision = max((e.revision for e in events if isinstance(e, SessionSaved)), default=0)
    reply = run.reply or {}
    status = ("aborted" if run.status == Run.Status.FAILED
              else "completed" if reply.get("completed") else "running")
    before = doc.get("flow", {}).get("sequence", []) if isinstance(doc, dict) else []
    record = {
        "id": run.session_id, "revision": revision, "run_status": status, "remote": True,
        "flow": {"name": run.flow, "current_step": model.cursor,
                 "context": loaded.context if loaded is not None else {},
                 "steps": [{"name": name, "state": state}
                           for name, state in model.state.items()],
                 "sequence": [*before, *steps_entered(events)]},
        "tokens": model.tokens,
    }
    StoredSession.objects.update_or_create(id=run.session_id, defaults={
        "flow": run.flow, "revision": revision, "run_status": status, "doc": record,
        "project_id": run.project_id})


def steps_entered(events: list[Event]) -> list[dict[str, Any]]:
    """A turn's entries of the session's trail (``flow.sequence``) as its events tell them:
    each ``step.entered`` at its level, each branch one level below its caller, up to the
    turn's last ``session.saved`` (a stopped or interrupted turn's later entries were never
    saved)."""
    last_save = max((e.seq for e in events if isinstance(e, SessionSaved)), default=-1)
    entries: list[dict[str, Any]] = []
    for event in events:
        if event.seq > last_save:
            break
        if isinstance(event, StepEntered):
            entries.append({"level": event.level, "step_name": event.step})
        elif isinstance(event, BranchStarted):
            entries.append({"level": event.path.count(".") + 2, "step_name": event.step})
    return entries


async def events_ingest(body: bytes, *, origin: dict[str, Any], user: Any,
                        project: str = DEFAULT_PROJECT) -> dict[str, dict[str, Any]]:
    """Check, store (in ``project``: runs of other projects are refused), then broadcast
    one request's events; the reply's ``runs``."""
    stored = await sync_to_async(_ingest_sync)(body, origin, user, project)
    await broadcast(stored.appended)
    return stored.reply


def _ingest_sync(body: bytes, origin: dict[str, Any], user: Any, project: str) -> Stored:
    lines = parse_lines(body)
    if not lines:
        return Stored()
    Project.objects.get_or_create(name=project)
    return store_lines(lines, lambda _run_id: origin, user, project)


async def runs_heartbeat(run_ids: list[str], project: str = DEFAULT_PROJECT
                         ) -> dict[str, dict[str, Any]]:
    """Mark these remote runs (of ``project``) as heard from now; their status and last
    stored seq."""
    return await sync_to_async(_heartbeat_sync)(run_ids, project)


def _heartbeat_sync(run_ids: list[str], project: str) -> dict[str, dict[str, Any]]:
    runs = Run.objects.filter(id__in=run_ids, origin__kind="remote", project_id=project)
    runs.filter(status=Run.Status.RUNNING).update(last_seen_at=timezone.now())
    return {run.id: position(run) for run in runs}


async def runs_control(run_ids: list[str], project: str) -> dict[str, dict[str, Any]]:
    """These remote runs (of ``project``) as their process is told of them, without
    counting as a sign of life (``GET /api/ingest/control``)."""
    return await sync_to_async(_control_sync)(run_ids, project)


def _control_sync(run_ids: list[str], project: str) -> dict[str, dict[str, Any]]:
    runs = Run.objects.filter(id__in=run_ids, origin__kind="remote", project_id=project)
    return {run.id: position(run) for run in runs}


__all__ = ["IngestError", "Line", "Planned", "Planner", "Stored", "by_run", "check_first",
           "continuing", "encode", "events_ingest", "parse_lines", "position", "read_body",
           "runs_control", "runs_heartbeat", "stop_request", "store_lines"]
