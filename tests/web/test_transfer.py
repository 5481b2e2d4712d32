"""Export and import round trips: real runs and sessions out as JSONL and back in.

A run the dashboard executed (ResearchFlow: a nested fan-out) and a multi-turn HotelFlow
session are exported over the API and by the commands, the database emptied, the file
imported, and the fold of the imported events compared with the original's after every
event. Every golden trace goes in and comes out unchanged too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.test import AsyncClient

from picoflow_web.data import exporting
from picoflow_web.demos.hotel.script import CURRENT_DATE, REFERENCE_TURNS
from picoflow_web.execute import services
from picoflow_web.http.bodies import ImportReply
from picoflow_web.models import EventRecord, Run, StoredSession
from picoflow_web.record.ingest import steps_entered
from runtime.events import apply_event, new_run, parse_event, runs_of
from tests.golden.goldens import BY_NAME, GOLDENS
from tests.golden.goldens import record as record_golden
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

NDJSON = "application/x-ndjson"


async def content(response: Any) -> bytes:
    """The whole body of a streamed response."""
    assert response.streaming, "exports are streamed"
    return b"".join([chunk async for chunk in response.streaming_content])


async def export(client: AsyncClient, path: str, auth: dict[str, str]) -> bytes:
    response = await client.get(path, headers=auth)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == NDJSON
    assert response["Content-Disposition"].startswith("attachment; filename=")
    assert response["Content-Disposition"].endswith('.jsonl"')
    return await content(response)


async def import_file(client: AsyncClient, body: bytes, auth: dict[str, str],
                      query: str = "") -> Any:
    return await client.post(f"/api/import{query}", data=body, content_type=NDJSON,
                             headers=auth)


def jsonl(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.decode("utf-8").splitlines()]


async def payloads(run_id: str) -> list[dict[str, Any]]:
    rows = EventRecord.objects.filter(run_id=run_id).order_by("seq")
    return [p async for p in rows.values_list("payload", flat=True)]


async def wipe() -> None:
    """An empty database but for users, projects and tokens."""
    await EventRecord.objects.all().adelete()
    await Run.objects.all().adelete()
    await StoredSession.objects.all().adelete()


def assert_same_fold(original: list[dict[str, Any]], imported: list[dict[str, Any]]) -> None:
    """Folding both, event by event, gives the same run model at every position."""
    assert len(imported) == len(original) > 0
    left, right = new_run(), new_run()
    for position, (a, b) in enumerate(zip(original, imported, strict=True)):
        apply_event(left, parse_event(a))
        apply_event(right, parse_event(b))
        assert left == right, f"the folds differ after event {position}"
    assert not right.anomalies


RUN_FIELDS = ("flow", "message", "session_id", "status", "event_count", "branch_count",
              "has_conflicts")


def facts(run: Run) -> dict[str, Any]:
    reply = run.reply or {}
    return {**{name: getattr(run, name) for name in RUN_FIELDS},
            "reply": {key: reply.get(key) for key in ("success", "completed", "message")}}


async def test_a_nested_fan_out_run_round_trips_and_folds_the_same_everywhere() -> None:
    user = await amake_user()
    auth, client = bearer(await atoken(user)), AsyncClient()
    started = await client.post("/api/runs", data=json.dumps(
        {"flow": "ResearchFlow", "message": "research tides"}),
        content_type="application/json", headers=auth)
    assert started.status_code == 201, started.content
    run = await wait_run_done(started.json()["run"]["id"])
    assert run.status == Run.Status.FINISHED and run.branch_count > 1
    original, before = await payloads(run.id), facts(run)

    body = await export(client, f"/api/runs/{run.id}/export", auth)
    assert jsonl(body) == original  # ordered by seq, nothing else
    await wipe()

    response = await import_file(client, body, auth)
    assert response.status_code == 201, response.content
    reply = response.json()
    assert set(ImportReply.model_validate(reply).model_dump()) == set(reply)
    assert reply["copied"] is False and reply["events"] == len(original)
    assert [(r["id"], r["original_id"]) for r in reply["runs"]] == [(run.id, run.id)]
    imported = await Run.objects.aget(id=run.id)
    assert facts(imported) == before
    assert imported.origin_info() == {"kind": "import", "by": "alice", "label": "imported"}
    # It started and ended when its events say, not when the file was read.
    assert imported.started_at.timestamp() == pytest.approx(original[0]["time"], abs=1e-3)
    assert imported.finished_at is not None
    assert imported.finished_at.timestamp() == pytest.approx(original[-1]["time"], abs=1e-3)
    assert_same_fold(original, await payloads(run.id))
    again = await export(client, f"/api/runs/{run.id}/export", auth)
    assert jsonl(again) == jsonl(body)


async def test_a_hotel_session_round_trips_through_the_commands(tmp_path: Path) -> None:
    user = await amake_user()
    auth, client = bearer(await atoken(user)), AsyncClient()
    session_id = None
    for turn in REFERENCE_TURNS[:5]:
        run, reply = await services.run_execute(
            flow="HotelFlow", message=turn, session_id=session_id, user=user,
            config={"current_date": CURRENT_DATE})
        await wait_run_done(run.id)
        assert reply.success, reply.message
        session_id = reply.session_id
    assert session_id is not None
    session = await StoredSession.objects.aget(id=session_id)
    runs = [r async for r in Run.objects.filter(session_id=session_id).order_by("started_at")]
    assert len(runs) == 5
    originals = {r.id: await payloads(r.id) for r in runs}
    before = [facts(r) for r in runs]

    by_api = await export(client, f"/api/sessions/{session_id}/export", auth)
    target = tmp_path / "session.jsonl"
    await sync_to_async(call_command)("export_session", session_id, "-o", str(target))
    assert target.read_bytes() == by_api
    order = list(dict.fromkeys(event["run_id"] for event in jsonl(by_api)))
    assert order == [r.id for r in runs]  # turn order
    await wipe()

    await sync_to_async(call_command)("import_events", str(target))
    imported = [r async for r in Run.objects.filter(session_id=session_id)
                .order_by("started_at")]
    assert [r.id for r in imported] == [r.id for r in runs]
    assert [facts(r) for r in imported] == before
    for run in imported:
        assert_same_fold(originals[run.id], await payloads(run.id))
    record = await StoredSession.objects.aget(id=session_id)
    assert (record.flow, record.revision, record.project_id) == (
        session.flow, session.revision, session.project_id)
    assert record.doc["flow"]["current_step"] == session.doc["flow"]["current_step"]
    # The steps the cursor went through, as the original lists them (the page's "Cursor
    # path"): told by the events of every turn, not lost on the way in.
    assert record.doc["flow"]["sequence"] == session.doc["flow"]["sequence"] != []
    assert record.doc["remote"] is True  # a record to read; the engine never continues it
    assert jsonl(await export(client, f"/api/sessions/{session_id}/export", auth)) == \
        jsonl(by_api)


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda golden: golden.name)
async def test_every_golden_trace_imports_and_exports_unchanged(
        golden: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporting, "EXPORT_PAGE", 4)  # many pages, some ends on a page's
    user = await amake_user()
    auth, client = bearer(await atoken(user)), AsyncClient()
    body = golden.jsonl_path.read_bytes()
    response = await import_file(client, body, auth)
    assert response.status_code == 201, response.content
    sent = jsonl(body)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in sent:
        by_run.setdefault(event["run_id"], []).append(event)
    exported = b""
    for run_id, events in by_run.items():
        assert_same_fold(events, await payloads(run_id))
        run = await Run.objects.aget(id=run_id)
        assert run.event_count == len(events)
        # A wide fork's later pages of requests count as its branches too.
        assert run.branch_count == sum(len(e["requests"]) for e in events if e["type"] in (
            "barrier.forked", "barrier.requested"))
        exported += await export(client, f"/api/runs/{run_id}/export", auth)
    assert jsonl(exported) == sent


@pytest.mark.parametrize("name", ["nested_fanout", "ab_timing", "cancelled"])
async def test_the_trail_told_by_the_events_is_the_one_the_session_saved(name: str) -> None:
    # Steps, children and branches at their levels; a stopped turn's trail as of its last
    # save (the scans after the stop were never saved).
    recorded = await record_golden(BY_NAME[name])
    trail: list[dict[str, Any]] = []
    for events, doc in zip(runs_of(recorded.events).values(), recorded.docs, strict=True):
        trail += steps_entered(events)
        assert trail == [entry.model_dump() for entry in doc.flow.sequence]
