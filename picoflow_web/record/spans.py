"""OpenTelemetry spans in: stored as they come, each trace's run (re)derived from them.

``POST /v1/traces`` (:mod:`picoflow_web.http.otlp_receiver`) hands the spans of one
request here. They arrive in any order and over many requests (a batch span processor
sends what ended), so each is stored (:class:`~picoflow_web.models.TraceSpan`, its
attributes redacted; a span already stored is ignored), and the run of each trace they
belong to is derived again from all of its spans (:mod:`picoflow_web.record.span_events`)
and brought up to date through the one door, :func:`~picoflow_web.record.append.append`:

* the derived events begin with the stored ones (the new spans only add at the end): the
  rest is appended;
* otherwise (a late span changes what was drawn: a span that began earlier, the root
  arriving after its children, a child turning siblings into a barrier) the run is
  rebuilt: in one transaction its stored events are deleted, its counters reset, and the
  whole derived list appended. The broadcast's first batch of it is marked ``rebuilt``
  (:func:`rebuilt_messages`): a run page's socket starts the run over.

One run per trace, its id the trace id, its flow ``OpenTelemetry:<service.name>``, its
session the ``session.id`` attribute of a span when one has a valid id, else the trace
id. A trace id that another project's run or spans use is refused (404), like ingest's
foreign run id; one a run of another source holds (409).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone

from picoflow_web.data.eventlog import read_texts
from picoflow_web.data.redact import event_text, redact
from picoflow_web.errors import ApiError
from picoflow_web.live import relay
from picoflow_web.live.groups import run_group
from picoflow_web.models import EventRecord, Project, Run, StoredSession, TraceSpan
from picoflow_web.record.append import Appended, Incoming, append, messages
from picoflow_web.record.span_events import Span, derive, service_of
from runtime import events as ev

SOURCE = "OpenTelemetry"
"""The origin's ``source`` of a run derived from spans."""


class SpansRefused(ApiError):
    """A request's spans name a trace this project may not write."""

    code = "not_found"
    status = 404


@dataclass
class Received:
    """One request's spans, parsed: by trace id, with their resource."""

    spans: dict[str, list[Span]] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    """Why each refused span was refused (the partial success's message)."""


@dataclass
class SpansStored:
    appended: list[Appended] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    rebuilt: set[str] = field(default_factory=set)
    """The runs whose record was replaced."""


def origin_of(spans: Sequence[Span]) -> dict[str, Any]:
    """The run's origin: ``OpenTelemetry`` on the resource's host and pid."""
    resource = next((s.resource for s in spans if s.resource), {})
    pid = resource.get("process.pid")
    host = resource.get("host.name")
    return {"kind": "remote", "source": SOURCE, "service": service_of(list(spans)),
            "host": str(host)[:200] if isinstance(host, str) else "",
            "pid": pid if isinstance(pid, int) and not isinstance(pid, bool) else None}


async def spans_ingest(received: Received, *, project: str, user: Any) -> SpansStored:
    """Store ``received`` (in ``project``), bring each trace's run up to date, then
    broadcast what was appended."""
    stored = await sync_to_async(store)(received, project, user)
    await relay.publish(rebuilt_messages(stored))
    return stored


def rebuilt_messages(stored: SpansStored) -> list[relay.Message]:
    """What to tell browsers (:func:`~picoflow_web.record.append.messages`), a rebuilt
    run's first batch marked ``rebuilt``: a page's socket then drops what it sent of the
    run, says so to the page (``{"type": "rebuilt", "generation": ...}``), and sends the
    run from seq 0."""
    out = messages(stored.appended)
    generations = {run_group(done.run_id): done.summary.get("generation")
                   for done in stored.appended
                   if done.run_id in stored.rebuilt and done.summary is not None}
    for group, body in out:
        if body.get("type") == "run.events" and body.get("first") == 0 \
                and group in {run_group(run_id) for run_id in stored.rebuilt}:
            body["rebuilt"] = True
            body["generation"] = generations.get(group)
    return out


def store(received: Received, project: str, user: Any) -> SpansStored:
    """Store the spans and bring their traces' runs up to date, in one transaction: again
    when another request made one of the runs meanwhile (the runs are locked from then)."""
    if not received.spans:
        return SpansStored()
    Project.objects.get_or_create(name=project)
    for _ in range(2):
        try:
            return _store(received, project, user)
        except IntegrityError:
            continue
    return _store(received, project, user)


def _store(received: Received, project: str, user: Any) -> SpansStored:
    out = SpansStored()
    ids = sorted(received.spans)
    with transaction.atomic():
        runs = {run.id: run for run in Run.objects.select_for_update().filter(id__in=ids)}
        _refuse_foreign(ids, runs, project)
        TraceSpan.objects.bulk_create([
            TraceSpan(project_id=project, trace_id=trace_id, span_id=s.span_id,
                      parent_span_id=s.parent_span_id, name=s.name[:400], kind=s.kind,
                      start_ns=s.start, end_ns=s.end, status_code=s.status_code,
                      status_message=s.status_message, attributes=redact(s.attributes),
                      events=redact(s.events), resource=redact(s.resource),
                      remote_parent=s.remote_parent)
            for trace_id, spans in received.spans.items() for s in spans],
            ignore_conflicts=True)
        now = timezone.now()
        for trace_id in ids:
            run = runs.get(trace_id)
            appended = _bring_up_to_date(trace_id, run, project, user, now)
            if appended is not None:
                out.appended.append(appended)
                if run is not None and appended.events and appended.events[0][0] == 0:
                    out.rebuilt.add(trace_id)
            out.runs.append(trace_id)
    return out


def _refuse_foreign(ids: list[str], runs: dict[str, Run], project: str) -> None:
    elsewhere = {run_id for run_id, run in runs.items() if run.project_id != project}
    elsewhere |= set(TraceSpan.objects.filter(trace_id__in=ids).exclude(
        project_id=project).values_list("trace_id", flat=True))
    if elsewhere:
        trace_id = min(elsewhere)
        raise SpansRefused(f"Trace {trace_id} cannot be used in project {project!r}; a new "
                           "trace needs a new id.", run_id=trace_id)
    traced = set(TraceSpan.objects.filter(trace_id__in=list(runs)).values_list(
        "trace_id", flat=True).distinct())
    for run in runs.values():
        if run.id not in traced:  # a run of ingest, an import or a worker: not ours
            raise ApiError(f"Run {run.id} was not recorded from spans; a trace with its id "
                           "cannot be sent.", code="not_otel", status=409, run_id=run.id)


def spans_of(trace_id: str) -> list[Span]:
    return [Span(span_id=t.span_id, parent_span_id=t.parent_span_id, name=t.name,
                 start=t.start_ns, end=t.end_ns, status_code=t.status_code,
                 status_message=t.status_message, kind=t.kind, attributes=t.attributes,
                 events=t.events, resource=t.resource, remote_parent=t.remote_parent)
            for t in TraceSpan.objects.filter(trace_id=trace_id).order_by("start_ns", "span_id")]


def session_of(trace_id: str, spans: list[Span], project: str) -> str:
    """The first valid ``session.id`` a span carries that no other project uses, else
    the trace id."""
    for span in spans:
        named = span.attributes.get("session.id")
        if isinstance(named, str) and ev.is_valid_id(named):
            foreign = StoredSession.objects.filter(id=named).exclude(
                project_id=project).exists() or Run.objects.filter(
                session_id=named).exclude(project_id=project).exists()
            if not foreign:
                return named
    return trace_id


def _incoming(events: list[ev.EventBase]) -> list[Incoming]:
    out: list[Incoming] = []
    for event in events:
        text = event_text(event)  # type: ignore[arg-type]
        out.append((event.seq, event.type, event.path[:400], text,  # type: ignore[attr-defined]
                    ev.EVENT_ADAPTER.validate_json(text).model_dump(mode="json")))
    return out


def _bring_up_to_date(trace_id: str, run: Run | None, project: str, user: Any,
                      now: Any) -> Appended | None:
    spans = spans_of(trace_id)
    if not spans:
        return None
    ids = {s.span_id for s in spans}
    ended = any(s.rooted and s.parent_span_id not in ids for s in spans)
    session_id = session_of(trace_id, spans, project)
    derived = _incoming(derive(trace_id, session_id, spans, ended=ended))
    if run is None:
        first = derived[0][4]
        authenticated = user is not None and getattr(user, "is_authenticated", False)
        run = Run.objects.create(
            id=trace_id, flow=str(first["flow"])[:200], project_id=project,
            message=first.get("message") or "", session_id=session_id,
            origin=origin_of(spans), last_seen_at=now,
            started_by=user if authenticated else None)
        return append(run, derived, now=now, new=True)
    stored = [text for _, text in read_texts(run.id, -1, run.last_seq + 2)]
    if [text for _, _, _, text, _ in derived[:len(stored)]] == stored:
        if len(derived) == len(stored):  # spans resent, or nothing they change
            Run.objects.filter(id=run.id).update(last_seen_at=now)
            return None
        if run.status == Run.Status.RUNNING:
            return append(run, derived[len(stored):], now=now)
    return _rebuild(run, derived, spans, now)


def _rebuild(run: Run, derived: list[Incoming], spans: list[Span], now: Any) -> Appended:
    """The run's events replaced by ``derived`` (the caller holds the transaction)."""
    EventRecord.objects.filter(run_id=run.id).delete()
    first = derived[0][4]
    fields: dict[str, Any] = {
        "status": Run.Status.RUNNING, "reply": None, "has_conflicts": False, "event_count": 0,
        "branch_count": 0, "rejected_count": 0, "duration": None, "finished_at": None,
        "last_seq": -1, "interruption": None, "flow": str(first["flow"])[:200],
        "message": first.get("message") or "", "origin": origin_of(spans),
        # The row is locked (select_for_update): no other rebuild counts meanwhile.
        "generation": run.generation + 1}
    Run.objects.filter(id=run.id).update(**fields)
    for name, value in fields.items():
        setattr(run, name, value)
    done = append(run, derived, now=now)
    # The runs list hears of the rebuilt run even when it has not ended.
    return done if done.summary is not None else Appended(done.run_id, done.events,
                                                          done.ended, run.summary())


__all__ = ["SOURCE", "Received", "SpansRefused", "SpansStored", "origin_of", "rebuilt_messages",
           "session_of", "spans_ingest", "spans_of", "store"]
