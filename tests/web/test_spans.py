"""Storing spans and keeping each trace's run up to date (picoflow_web.record.spans): new
spans that only extend the run are appended, a late span that changes it rebuilds the
run's record (counters included), resent spans change nothing, secrets in attributes are
redacted, a trace of another project is refused with nothing stored, and a trace silent
without its root is interrupted; a page watching a rebuilt run starts it over, and one
that missed the rebuild learns it from the run's generation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, override_settings
from django.utils import timezone

from picoflow_web.asgi import application
from picoflow_web.data.eventlog import read_texts
from picoflow_web.errors import ApiError
from picoflow_web.models import EventRecord, Project, Run, TraceSpan
from picoflow_web.record import interruption
from picoflow_web.record.ingest import _ingest_sync
from picoflow_web.record.span_events import Span
from picoflow_web.record.spans import Received, spans_ingest, store
from runtime.events import StepEntered, dump_event, fold, parse_event
from tests.webhelpers import amake_user, asession_cookie, ws_headers

pytestmark = pytest.mark.django_db(transaction=True)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
MS = 1_000_000
T0 = 1_700_000_000_000 * MS


def span(span_id: str, parent: str, name: str, start: int, end: int, **more: object) -> Span:
    return Span(span_id=span_id.rjust(16, "0"),
                parent_span_id=parent.rjust(16, "0") if parent else "", name=name,
                start=T0 + start * MS, end=T0 + end * MS,
                resource={"service.name": "svc", "host.name": "h", "process.pid": 7},
                **more)  # type: ignore[arg-type]


def send(*spans: Span, project: str = "default") -> None:
    store(Received(spans={TRACE: list(spans)}), project, None)


def events() -> list[object]:
    return [parse_event(text) for _, text in read_texts(TRACE, -1, 10_000)]


def test_spans_that_extend_the_run_are_appended_and_a_late_one_rebuilds_it() -> None:
    send(span("2", "1", "a", 10, 20))
    first_ids = list(EventRecord.objects.filter(run_id=TRACE).values_list("id", flat=True))
    send(span("3", "1", "b", 30, 40))  # after everything stored: appended
    kept = list(EventRecord.objects.filter(run_id=TRACE).order_by("seq").values_list(
        "id", flat=True))
    assert kept[:len(first_ids)] == first_ids and len(kept) > len(first_ids)
    run = Run.objects.get(id=TRACE)
    assert run.status == "running" and run.branch_count == 0
    # A sibling overlapping b, then the root: the run is rebuilt from seq 0.
    send(span("4", "1", "c", 32, 45))
    send(span("1", "", "root", 0, 50))
    run = Run.objects.get(id=TRACE)
    stored = events()
    assert [e.seq for e in stored] == list(range(len(stored)))  # type: ignore[attr-defined]
    model = fold(stored)  # type: ignore[arg-type]
    assert model.anomalies == [] and model.status == "finished"
    assert run.status == "finished" and run.branch_count == 2
    assert run.event_count == len(stored) and run.last_seq == len(stored) - 1
    assert run.flow == "OpenTelemetry:svc" and run.origin["source"] == "OpenTelemetry"
    # Resent spans change nothing.
    send(span("1", "", "root", 0, 50), span("2", "1", "a", 10, 20))
    assert [e.model_dump() for e in events()] == [  # type: ignore[attr-defined]
        e.model_dump() for e in stored]  # type: ignore[attr-defined]
    assert TraceSpan.objects.filter(trace_id=TRACE).count() == 4


def test_secret_attributes_are_redacted_in_storage_and_events() -> None:
    send(span("1", "", "root", 0, 50, attributes={"api_key": "sk-live-123",
                                                   "input.value": "hi"}))
    stored = TraceSpan.objects.get(trace_id=TRACE)
    assert "sk-live-123" not in str(stored.attributes)
    assert all("sk-live-123" not in text for _, text in read_texts(TRACE, -1, 100))


def test_a_trace_of_another_project_is_refused_and_nothing_is_stored() -> None:
    send(span("1", "", "root", 0, 50))
    Project.objects.create(name="elsewhere")
    count = EventRecord.objects.filter(run_id=TRACE).count()
    with pytest.raises(ApiError) as refused:
        send(span("2", "1", "a", 10, 20), project="elsewhere")
    assert refused.value.status == 404
    assert TraceSpan.objects.filter(trace_id=TRACE).count() == 1
    assert EventRecord.objects.filter(run_id=TRACE).count() == count


def test_a_session_id_attribute_names_the_session() -> None:
    send(span("1", "", "root", 0, 50, attributes={"session.id": "chat-42"}))
    assert Run.objects.get(id=TRACE).session_id == "chat-42"


@override_settings(PICOFLOW_REMOTE_TIMEOUT=30.0)
def test_a_trace_silent_without_its_root_is_interrupted_and_a_late_root_rebuilds_it() -> None:
    send(span("2", "1", "a", 10, 20))
    Run.objects.filter(id=TRACE).update(last_seen_at=timezone.now() - timedelta(seconds=29))
    assert interruption.interrupt_silent_runs().appended == []
    Run.objects.filter(id=TRACE).update(last_seen_at=timezone.now() - timedelta(seconds=31))
    assert len(interruption.interrupt_silent_runs().appended) == 1
    run = Run.objects.get(id=TRACE)
    assert run.status == "interrupted" and "No spans for 30 s" in run.interruption["reason"]
    stored = events()
    assert stored[-1].type == "run.interrupted"  # type: ignore[attr-defined]
    assert fold(stored).anomalies == []  # type: ignore[arg-type]
    # The spans are the truth: a root that arrives after all is the run's end.
    send(span("1", "", "root", 0, 50))
    run = Run.objects.get(id=TRACE)
    assert run.status == "finished" and run.interruption is None
    assert fold(events()).anomalies == []  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_rebuilt_run_starts_over_on_a_watching_page() -> None:
    """The socket of a page watching the run says ``rebuilt`` and sends the run again from
    seq 0, so the page folds the new record, not the old one with the new one's tail."""
    await sync_to_async(send)(span("2", "1", "a", 10, 20))
    stored_before = await sync_to_async(events)()
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{TRACE}/",
        headers=ws_headers(await asession_cookie(await amake_user())))
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
    replayed = (await communicator.receive_json_from(timeout=5))["events"]
    assert len(replayed) == len(stored_before)
    await spans_ingest(Received(spans={TRACE: [span("1", "", "root", 0, 50)]}),
                       project="default", user=None)
    assert await communicator.receive_json_from(timeout=5) == {"type": "rebuilt",
                                                               "generation": 1}
    again = await communicator.receive_json_from(timeout=5)
    stored_after = await sync_to_async(events)()
    assert [e["seq"] for e in again["events"]] == list(range(len(stored_after)))
    assert again["events"][-1]["type"] == "turn.finished"
    await communicator.disconnect()


@pytest.mark.anyio
async def test_a_rebuild_counts_the_generation_that_summaries_and_event_loads_name() -> None:
    """A page that loaded events before a rebuild learns of it from what it reads next:
    the summary, an events page (and the stream's header) name the new generation, and a
    socket asked with the old one sends the hello, then the run from seq 0."""
    await sync_to_async(send)(span("2", "1", "a", 10, 20))
    await sync_to_async(send)(span("3", "1", "b", 30, 40))  # appended: the same record
    assert (await Run.objects.aget(id=TRACE)).summary()["generation"] == 0
    user = await amake_user()
    browser = AsyncClient()
    await browser.aforce_login(user)
    before = (await browser.get(f"/api/runs/{TRACE}/events")).json()
    assert before["generation"] == 0
    await sync_to_async(send)(span("1", "", "root", 0, 50))  # rebuilt, unseen by the page
    run = await Run.objects.aget(id=TRACE)
    assert run.generation == 1 and run.summary()["generation"] == 1
    assert (await browser.get(f"/api/runs/{TRACE}"
                              )).json()["run"]["generation"] == 1
    page = (await browser.get(f"/api/runs/{TRACE}/events?after={before['last_seq']}")).json()
    assert page["generation"] == 1
    streamed = await browser.get(f"/api/runs/{TRACE}/events",
                                 headers={"Accept": "application/x-ndjson"})
    assert streamed["PicoFlow-Generation"] == "1"
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{TRACE}/?after={before['last_seq']}&generation=0",
        headers=ws_headers(await asession_cookie(user)))
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["type"] == "run" and hello["run"]["generation"] == 1
    replayed = (await communicator.receive_json_from(timeout=5))["events"]
    assert [e["seq"] for e in replayed] == list(range(run.last_seq + 1))
    await communicator.disconnect()
    # A socket of the same generation resumes after what the page holds.
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{TRACE}/?after=2&generation=1",
        headers=ws_headers(await asession_cookie(user)))
    assert (await communicator.connect(timeout=5))[0]
    assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
    resumed = (await communicator.receive_json_from(timeout=5))["events"]
    assert resumed[0]["seq"] == 3
    await communicator.disconnect()


def test_a_trace_id_of_another_sources_run_is_refused_and_ingest_refuses_a_traces_run() -> None:
    Run.objects.create(id=TRACE, flow="Mine", origin={"kind": "remote", "host": "h"})
    with pytest.raises(ApiError) as refused:
        send(span("1", "", "root", 0, 50))
    assert (refused.value.status, refused.value.code) == (409, "not_otel")
    assert not TraceSpan.objects.filter(trace_id=TRACE).exists()
    Run.objects.filter(id=TRACE).delete()

    send(span("1", "", "root", 0, 50, status_code=0))
    run = Run.objects.get(id=TRACE)
    line = StepEntered(run_id=TRACE, session_id=run.session_id, seq=run.last_seq + 1,
                       time=1.0, offset=1.0, step="x", level=2, how="child")
    with pytest.raises(ApiError) as refused:
        _ingest_sync(dump_event(line).encode(), {"kind": "remote"}, None, "default")
    assert (refused.value.status, refused.value.error_code) == (409, "spans_run")
    assert Run.objects.get(id=TRACE).last_seq == run.last_seq
