"""``POST /api/ingest``: events shipped from another process, stored, then broadcast.

The events are real: a turn of a flow of the tests' own (``tests/remoteflow.py``) played
in this process with a memory sink, serialised as the runtime serialises them. Every
refusal is checked to store nothing of its request.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import escape
from typing import Any

import anyio
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.core.management import call_command
from django.test import AsyncClient, override_settings
from django.utils import timezone

from picoflow_web.data import selectors
from picoflow_web.data.documents import SessionDocumentStore
from picoflow_web.data.eventlog import read_texts
from picoflow_web.data.redact import MARKER
from picoflow_web.live.groups import run_group
from picoflow_web.models import ApiToken, EventRecord, Run
from picoflow_web.record import ingest, interruption, watchdog
from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelSelection,
    ParallelConfig,
    Routable,
    RunStepRequest,
    SessionStoreError,
    Step,
    StepChannels,
)
from runtime.events import MemorySink, dump_event
from tests.remoteflow import TeamSurvey
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

NDJSON = "application/x-ndjson"
ORIGIN = {"PicoFlow-Origin-Host": "laptop-7", "PicoFlow-Origin-Pid": "4242"}


async def recorded_turn(run_id: str = "remote-1", teams: int = 3) -> list[str]:
    """The lines of one real turn of TeamSurvey (what a remote process would send)."""
    sink = MemorySink()
    engine = FlowEngine(flows=[TeamSurvey], sinks=[sink])
    reply = await engine.run("TeamSurvey", "survey", config={"teams": teams}, run_id=run_id)
    assert reply.success, reply.message
    return [dump_event(event) for event in sink.events]


async def ingest_token(username: str = "shipper") -> str:
    user = await amake_user(username)
    _, raw = await sync_to_async(ApiToken.issue)(user, "ingest", ("ingest",))
    return raw


async def post(client: AsyncClient, token: str | None, body: bytes | str,
               content_type: str = NDJSON, path: str = "/api/ingest") -> Any:
    data = body.encode() if isinstance(body, str) else body
    headers = {**ORIGIN, **(bearer(token) if token else {})}
    return await client.post(path, data=data, content_type=content_type, headers=headers)


def body_of(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


async def stored(run_id: str) -> list[dict[str, Any]]:
    rows = EventRecord.objects.filter(run_id=run_id).order_by("seq")
    return [payload async for payload in rows.values_list("payload", flat=True)]


async def test_a_remote_turn_is_stored_as_sent_and_its_run_made_from_its_events() -> None:
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    half = len(lines) // 2
    first = await post(client, token, body_of(lines[:half]))
    assert first.status_code == 200, first.json()
    assert first.json() == {"runs": {"remote-1": {"last_seq": half - 1, "status": "running"}}}
    run = await Run.objects.aget(id="remote-1")
    assert (run.flow, run.message, run.status) == ("TeamSurvey", "survey", "running")
    assert run.origin_info() == {"kind": "remote", "host": "laptop-7", "pid": 4242,
                                 "label": "laptop-7 (pid 4242)"}

    second = await post(client, token, body_of(lines[half:]))
    assert second.json() == {"runs": {"remote-1": {"last_seq": len(lines) - 1,
                                                   "status": "finished"}}}
    assert await stored("remote-1") == [json.loads(line) for line in lines]
    run = await Run.objects.aget(id="remote-1")
    assert run.event_count == len(lines)
    assert run.branch_count == 5  # three teams and research's two analysts
    assert run.reply is not None and run.reply["success"] is True
    assert run.reply["message"].startswith("3 of 3 teams answered")
    assert run.summary()["origin"]["label"] == "laptop-7 (pid 4242)"


async def _source_run(run_id: str, source: str) -> dict[str, Any]:
    """Ingest a turn sent with ``PicoFlow-Origin-Source: source``; the run's API origin,
    after checking the run page and the runs list show the label as text."""
    lines = await recorded_turn(run_id)
    token = await ingest_token(f"shipper-{run_id}")
    headers = {**ORIGIN, **bearer(token), "PicoFlow-Origin-Source": source}
    reply = await AsyncClient().post("/api/ingest", data=body_of(lines).encode(),
                                     content_type=NDJSON, headers=headers)
    assert reply.status_code == 200, reply.json()
    viewer = AsyncClient()
    await sync_to_async(viewer.force_login)(await amake_user(f"viewer-{run_id}"))
    origin: dict[str, Any] = (await viewer.get(f"/api/runs/{run_id}")).json()["run"]["origin"]
    listed = (await viewer.get("/api/runs")).json()["runs"]
    assert [r["origin"] for r in listed if r["id"] == run_id] == [origin]
    page = (await viewer.get(f"/runs/{run_id}/")).content.decode()
    shown = re.search(r'<dd id="pf-origin"[^>]*>(.*?)</dd>', page)
    assert shown is not None and shown.group(1) == f"remote · {escape(origin['label'])}"
    return origin


async def test_a_named_source_labels_the_origin_and_a_bad_one_is_clamped_or_dropped(
        ) -> None:
    origin = await _source_run("lg-1", "LangGraph")
    assert origin == {"kind": "remote", "host": "laptop-7", "pid": 4242,
                      "source": "LangGraph", "label": "LangGraph on laptop-7 (pid 4242)"}
    assert (await _source_run("lg-2", "x" * 500))["source"] == "x" * 40
    script = await _source_run("lg-3", "<script>alert(1)</script>")
    assert script["label"] == "<script>alert(1)</script> on laptop-7 (pid 4242)"
    # The client sends a header's text as latin-1 bytes: "Lang\u00e9" is the raw byte 0xE9,
    # and the second value the UTF-8 bytes of "Lang\u00e9" as they arrive.
    utf8 = "Lang\u00e9".encode().decode("latin-1")
    for run_id, bad in (("lg-4", "Lang\u00e9"), ("lg-5", utf8), ("lg-6", " "),
                        ("lg-7", "Lang\tGraph")):
        dropped = await _source_run(run_id, bad)
        assert "source" not in dropped, bad
        assert dropped["label"] == "laptop-7 (pid 4242)"


async def test_resending_what_is_stored_is_accepted_and_stores_nothing_twice() -> None:
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    assert (await post(client, token, body_of(lines[:10]))).status_code == 200
    again = await post(client, token, body_of(lines[:14]))  # 10 resent, 4 new
    assert again.json()["runs"]["remote-1"]["last_seq"] == 13
    assert [e["seq"] for e in await stored("remote-1")] == list(range(14))


async def test_a_gap_is_refused_with_the_expected_seq_and_stores_nothing() -> None:
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    await post(client, token, body_of(lines[:5]))
    refused = await post(client, token, body_of([lines[5], lines[7]]))
    assert refused.status_code == 409
    assert refused.json() == {
        "type": "error", "code": "seq_gap", "error_code": "seq_gap", "run_id": "remote-1",
        "expected_seq": 6, "line": 2, "message": "Line 2: run remote-1 continues at seq 6, not 7."}
    assert len(await stored("remote-1")) == 5  # not even line 1 (seq 5) of the refusal


async def test_a_new_run_must_start_with_its_first_event() -> None:
    lines = await recorded_turn()
    response = await post(AsyncClient(), await ingest_token(), body_of(lines[3:]))
    assert response.status_code == 409
    assert response.json()["code"] == "seq_gap"
    assert response.json()["expected_seq"] == 0
    assert not await Run.objects.filter(id="remote-1").aexists()


async def test_events_of_several_runs_in_one_body_are_all_refused_with_one_bad_line() -> None:
    a, b = await recorded_turn("run-a"), await recorded_turn("run-b")
    token, client = await ingest_token(), AsyncClient()
    mixed = [a[0], b[0], a[1], b[1], "{not json"]
    response = await post(client, token, body_of(mixed))
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["line"]) == ("malformed_json", 5)
    assert not await Run.objects.filter(id__in=["run-a", "run-b"]).aexists()
    good = await post(client, token, body_of(mixed[:4]))
    assert good.json() == {"runs": {"run-a": {"last_seq": 1, "status": "running"},
                                    "run-b": {"last_seq": 1, "status": "running"}}}


def _with(line: str, **changes: Any) -> str:
    return json.dumps({**json.loads(line), **changes})


BAD_LINES = {
    "malformed_json": lambda line: line[:-3],
    "malformed_event": lambda line: "[1, 2, 3]",
    "unknown_event_type": lambda line: _with(line, type="turn.exploded"),
    "schema_version": lambda line: _with(line, v=99),
    "invalid_event": lambda line: _with(line, seq="zero"),
    "reserved_event_type": lambda line: _with(line, type="run.interrupted", reason="r",
                                              silent_for=1.0),
    "invalid_text": lambda line: _with(line, message="a\ud800b"),
    "not_utf8": lambda line: "NOT_UTF8",
}


@pytest.mark.parametrize("code", sorted(BAD_LINES))
async def test_a_bad_line_is_refused_with_its_number_and_nothing_is_stored(code: str) -> None:
    lines = await recorded_turn()
    bad = BAD_LINES[code](lines[0])
    body = (lines[0] + "\n").encode() + (
        b"\xff\xfe{}" if bad == "NOT_UTF8" else bad.encode("utf-8", "surrogatepass")) + b"\n"
    response = await post(AsyncClient(), await ingest_token(), body)
    assert response.status_code == 400, response.json()
    assert (response.json()["type"], response.json()["code"]) == ("error", code)
    assert response.json()["line"] == 2
    assert response.json()["message"].startswith("Line 2: ")
    assert not await Run.objects.filter(id="remote-1").aexists()


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_refused_as_not_json(constant: str) -> None:
    """Python's json reads them; the store (and every browser) would not: refused, not a
    server error when the database rejects the row."""
    lines = await recorded_turn()
    bad, count = re.subn(r'"offset":[^,]+', f'"offset":{constant}', lines[1], count=1)
    assert count == 1
    response = await post(AsyncClient(), await ingest_token(), body_of([lines[0], bad]))
    assert response.status_code == 400, response.content
    assert (response.json()["code"], response.json()["line"]) == ("malformed_json", 2)
    assert constant.lstrip("-") in response.json()["message"]
    assert not await Run.objects.filter(id="remote-1").aexists()


async def test_deeply_nested_values_are_refused_not_a_server_error() -> None:
    lines = await recorded_turn()
    nested = '{"message": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = await post(AsyncClient(), await ingest_token(), lines[0] + "\n" + nested)
    assert response.status_code == 400
    assert response.json()["code"] in ("malformed_json", "malformed_event")
    assert not await Run.objects.filter(id="remote-1").aexists()


async def test_an_oversized_line_and_an_oversized_body_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    monkeypatch.setattr(ingest, "MAX_LINE_BYTES", max(len(x) for x in lines[:3]) - 1)
    response = await post(client, token, body_of(lines[:3]))
    assert response.status_code == 413
    assert response.json()["code"] == "line_too_large"
    monkeypatch.setattr(ingest, "MAX_BODY_BYTES", 100)
    response = await post(client, token, body_of(lines[:3]))
    assert (response.status_code, response.json()["code"]) == (413, "body_too_large")
    assert not await Run.objects.filter(id="remote-1").aexists()


class Wide(Flow):
    """One fork of ``config.branches`` no-op branches, each with a note in its params."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [WideFork(self), Noop(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=100_000)


class WideFork(LogicStep):
    async def run_logic(self) -> Routable:
        branches = int(self.get_context("config.branches"))
        note = "n" * 300
        await self.run_steps([RunStepRequest(Noop, key=str(i), params={"note": note})
                              for i in range(branches)])
        return "done"


class Noop(LogicStep):
    async def run_logic(self) -> Routable:
        return None


def unpaged(lines: list[str]) -> list[str]:
    """``lines`` as a recorder wrote them before forks were paged: every request in the
    fork's ``barrier.forked``, no count, no ``barrier.requested``."""
    events = [json.loads(line) for line in lines]
    pages: dict[str, list[Any]] = {}
    for e in events:
        if e["type"] == "barrier.requested":
            pages.setdefault(e["barrier"], []).extend(e["requests"])
    out: list[str] = []
    for e in events:
        if e["type"] == "barrier.requested":
            continue
        if e["type"] == "barrier.forked":
            e.pop("count", None)
            e["requests"] += pages.get(e["barrier"], [])
        e["seq"] = len(out)
        out.append(json.dumps(e, separators=(",", ":")))
    return out


async def test_a_fork_of_many_thousands_of_branches_is_ingested_exported_and_imported() -> None:
    sink = MemorySink()
    engine = FlowEngine(flows=[Wide], sinks=[sink])
    reply = await engine.run("Wide", "go", config={"branches": 14_000}, run_id="wide-1")
    assert reply.success, reply.message
    assert max(len(dump_event(event).encode()) for event in sink.events) <= 64 * 1024
    # As an older recorder wrote it: one event, over the 4 MiB an event could once be (a
    # fork of 100,000 bare branches is 9 MB): refusing it lost the fork of a remote run,
    # and an export could not come back.
    lines = unpaged([dump_event(event) for event in sink.events])
    fork = next(i for i, line in enumerate(lines) if '"type":"barrier.forked"' in line)
    assert len(lines[fork].encode()) > 4 * 1024 * 1024
    response = await post(AsyncClient(), await ingest_token(), body_of(lines))
    assert response.status_code == 200, response.json()
    assert response.json()["runs"]["wide-1"]["last_seq"] == len(lines) - 1
    assert (await stored("wide-1"))[fork] == json.loads(lines[fork])

    auth = bearer(await atoken(await amake_user("operator")))
    exported = await AsyncClient().get("/api/runs/wide-1/export", headers=auth)
    body = b"".join([chunk async for chunk in exported.streaming_content])
    copied = await AsyncClient().post("/api/import?copy=1", data=body, content_type=NDJSON,
                                      headers=auth)
    assert copied.status_code == 201, copied.content
    copy = await Run.objects.exclude(id="wide-1").aget()
    assert copy.event_count == len(lines)
    assert copy.branch_count == (await Run.objects.aget(id="wide-1")).branch_count == 14_000
    assert (await stored(copy.id))[fork]["requests"] == json.loads(lines[fork])["requests"]


async def test_ingest_needs_an_ndjson_body() -> None:
    lines = await recorded_turn()
    response = await post(AsyncClient(), await ingest_token(), body_of(lines[:2]),
                          content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (415, "unsupported_media_type")


async def test_ingest_needs_a_token_with_the_ingest_scope() -> None:
    lines = await recorded_turn()
    body, client = body_of(lines[:2]), AsyncClient()
    assert (await post(client, None, body)).status_code == 401
    user = await amake_user("reader")
    plain = await atoken(user)  # the default scopes: read and run
    response = await post(client, plain, body)
    assert (response.status_code, response.json()["code"]) == (403, "scope")
    assert "--scope ingest" in response.json()["message"]
    await sync_to_async(client.force_login)(user)
    assert (await post(client, None, body)).status_code == 403  # a browser session
    assert not await Run.objects.filter(id="remote-1").aexists()


async def test_an_ingest_token_cannot_read_or_run() -> None:
    client, token = AsyncClient(), await ingest_token()
    assert (await client.get("/api/runs", headers=bearer(token))).status_code == 403
    started = await client.post("/ai/run", data={"flowName": "HotelFlow", "message": "hi"},
                                content_type="application/json", headers=bearer(token))
    assert (started.status_code, started.json()["code"]) == (403, "scope")


async def test_tokens_made_before_scopes_keep_reading_and_running() -> None:
    user = await amake_user("old")
    _, raw = await sync_to_async(ApiToken.issue)(user, "old")
    assert (await sync_to_async(ApiToken.objects.get)(user=user)).scopes == "read,run"
    assert (await AsyncClient().get("/api/runs", headers=bearer(raw))).status_code == 200


def test_create_api_token_prints_an_ingest_token_on_its_last_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("cli-user", password="x")
    call_command("create_api_token", "cli-user", "--scope", "ingest")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    token = ApiToken.objects.get(digest=ApiToken.hash(raw))
    assert token.scope_set() == {"ingest"}


async def test_a_dashboard_run_cannot_be_written_to_through_ingest() -> None:
    lines = await recorded_turn()
    await Run.objects.acreate(id="remote-1", flow="TeamSurvey")
    response = await post(AsyncClient(), await ingest_token(), body_of(lines[:2]))
    assert (response.status_code, response.json()["code"]) == (409, "not_remote")
    assert await stored("remote-1") == []


async def test_stored_events_are_broadcast_to_the_runs_group_after_they_are_stored() -> None:
    lines = await recorded_turn()
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(run_group("remote-1"), channel)
    await post(AsyncClient(), await ingest_token(), body_of(lines))
    received: list[dict[str, Any]] = []
    with anyio.fail_after(10):
        while len(received) < len(lines):
            message = await layer.receive(channel)
            assert message["type"] == "run.events"
            # Persist before broadcast: every event a watcher hears of is stored already.
            assert len(await stored("remote-1")) == len(lines)
            # The events travel as the text that was stored, never parsed on the way.
            assert isinstance(message["events"], str)
            batch = json.loads(message["events"])
            assert (message["first"], message["upto"]) == (len(received),
                                                           len(received) + len(batch) - 1)
            received.extend(batch)
    assert received == [json.loads(line) for line in lines]


async def _silence(run_id: str, seconds: float) -> None:
    await Run.objects.filter(id=run_id).aupdate(
        last_seen_at=timezone.now() - timedelta(seconds=seconds))


@override_settings(PICOFLOW_REMOTE_TIMEOUT=30.0)
async def test_a_silent_remote_run_is_interrupted_and_refuses_what_comes_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # This test decides when a round runs: a round of the watchdog an ingest request starts
    # could land after the silence below and interrupt the run before the test's round.
    monkeypatch.setattr(watchdog, "ensure", lambda: None)
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    await post(client, token, body_of(lines[:12]))
    await _silence("remote-1", 29)
    assert await interruption.sweep() == 0  # not silent long enough yet
    await _silence("remote-1", 31)
    assert await interruption.sweep() == 1
    run = await Run.objects.aget(id="remote-1")
    assert run.status == "interrupted"
    events = await stored("remote-1")
    assert [e["seq"] for e in events] == list(range(13))
    last = events[-1]
    assert (last["type"], last["run_id"], last["session_id"]) == (
        "run.interrupted", "remote-1", events[0]["session_id"])
    assert last["silent_for"] >= 31
    assert "30 s" in last["reason"]
    assert run.summary()["interruption"] == {"reason": last["reason"],
                                             "silent_for": last["silent_for"]}

    late = await post(client, token, body_of(lines[12:]))
    assert (late.status_code, late.json()["code"]) == (409, "run_interrupted")
    assert len(await stored("remote-1")) == 13
    resent = await post(client, token, body_of(lines[:12]))  # nothing new: still accepted
    assert resent.json() == {"runs": {"remote-1": {"last_seq": 12, "status": "interrupted"}}}
    beat = await post(client, token, json.dumps({"runs": ["remote-1"]}),
                      content_type="application/json", path="/api/ingest/heartbeat")
    assert beat.json() == {"runs": {"remote-1": {"last_seq": 12, "status": "interrupted"}}}


@override_settings(PICOFLOW_REMOTE_TIMEOUT=30.0)
async def test_a_heartbeat_keeps_a_quiet_remote_run_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # This test decides when a round runs: the watchdog an ingest request starts would run
    # one of its own between the silence and the heartbeat, whenever its timer says.
    monkeypatch.setattr(watchdog, "ensure", lambda: None)
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    await post(client, token, body_of(lines[:12]))
    await _silence("remote-1", 31)
    beat = await post(client, token, json.dumps({"runs": ["remote-1", "no-such-run"]}),
                      content_type="application/json", path="/api/ingest/heartbeat")
    assert beat.json() == {"runs": {"remote-1": {"last_seq": 11, "status": "running"}}}
    assert await interruption.sweep() == 0
    assert (await Run.objects.aget(id="remote-1")).status == "running"


@override_settings(PICOFLOW_REMOTE_TIMEOUT=30.0)
async def test_the_runs_list_never_shows_a_silent_remote_run_as_running() -> None:
    lines = await recorded_turn()
    await post(AsyncClient(), await ingest_token(), body_of(lines[:12]))
    await _silence("remote-1", 60)
    reader = AsyncClient()
    response = await reader.get("/api/runs", headers=bearer(await atoken(
        await amake_user("viewer"))))
    (listed,) = response.json()["runs"]
    assert (listed["id"], listed["status"]) == ("remote-1", "interrupted")


async def test_a_gap_a_sink_reports_as_lost_is_accepted_and_others_are_not() -> None:
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    await post(client, token, body_of(lines[:5]))
    overflow = {**{k: json.loads(lines[9])[k] for k in ("v", "run_id", "session_id", "time",
                                                          "offset", "path")},
                "seq": 9, "type": "sink.overflowed", "sink": "dashboard", "first_seq": 5,
                "last_seq": 7, "dropped": 3}
    # Seqs 5-7 lost, 8 kept, then the report of the loss at 9: accepted as sent.
    accepted = await post(client, token, body_of([lines[8], json.dumps(overflow)]))
    assert accepted.json() == {"runs": {"remote-1": {"last_seq": 9, "status": "running"}}}
    assert [e["seq"] for e in await stored("remote-1")] == [0, 1, 2, 3, 4, 8, 9]
    # A gap no report covers is still refused.
    refused = await post(client, token, body_of([lines[11]]))
    assert (refused.status_code, refused.json()["expected_seq"]) == (409, 10)


async def test_a_remote_session_is_recorded_from_its_events_and_never_continued_here() -> None:
    lines = await recorded_turn()
    await post(AsyncClient(), await ingest_token(), body_of(lines))
    run = await Run.objects.aget(id="remote-1")
    found = await selectors.session_get(run.session_id, projects=None)
    assert found is not None
    assert (found["flow"], found["run_status"], found["doc"]["remote"]) == (
        "TeamSurvey", "running", True)
    steps = {s["name"]: s["state"] for s in found["doc"]["flow"]["steps"]}
    assert steps["Survey"]["plan"]["question"] == "What slows us down?"
    assert sorted(steps["Team"]["answers"]) == [
        "analyst1", "analyst2", "research", "team1", "team2"]
    assert [r["id"] for r in found["runs"]] == ["remote-1"]
    viewer = AsyncClient()
    await sync_to_async(viewer.force_login)(await amake_user("viewer"))
    page = await viewer.get(f"/sessions/{run.session_id}/")
    assert page.status_code == 200
    assert "What slows us down?" in page.content.decode()
    # The dashboard's own store refuses to load it: only the process has the whole doc.
    with pytest.raises(SessionStoreError):
        await SessionDocumentStore().load(run.session_id)


class Appender(Flow):
    """One branch that appends ``config.items`` items to a channel, one at a time."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [AppendFork(self), Append(self)]


class AppendFork(LogicStep):
    async def run_logic(self) -> Routable:
        await self.run_steps([RunStepRequest(Append, key="one")])
        return "done"


class Append(LogicStep):
    def parallel_state_channels(self) -> dict[str, Any]:
        return {"items": StepChannels.append()}

    async def run_logic(self) -> Routable:
        for i in range(int(self.get_context("config.items"))):
            self.contribute_state("items", i)
        return None


async def test_a_remote_session_s_record_costs_no_draft_reducing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The record reads the canonical state alone. Folding the drafts too, the server kept
    # one growing copy of the list per contribution (8,000 contributions: 274 MB, 1.6 s;
    # 50,000 would be some 10 GB) for a remote run of a few MB.
    import importlib

    fold_module = importlib.import_module("runtime.events.fold.reduce")
    reduced: list[Any] = []
    real = fold_module.reduce_one

    def counting(*args: Any) -> Any:
        reduced.append(args[0])
        return real(*args)

    monkeypatch.setattr(fold_module, "reduce_one", counting)
    sink = MemorySink()
    engine = FlowEngine(flows=[Appender], sinks=[sink])
    reply = await engine.run("Appender", "go", config={"items": 500}, run_id="appender-1")
    assert reply.success, reply.message
    reduced.clear()  # the engine's own folds are not the server's
    response = await post(AsyncClient(), await ingest_token(),
                          body_of([dump_event(event) for event in sink.events]))
    assert response.status_code == 200, response.json()
    found = await selectors.session_get(reply.session_id, projects=None)
    assert found is not None
    steps = {s["name"]: s["state"] for s in found["doc"]["flow"]["steps"]}
    assert steps["Append"]["items"] == list(range(500))
    assert reduced == []


async def test_an_id_longer_than_the_store_holds_is_refused() -> None:
    lines = await recorded_turn()
    long_id = _with(lines[0], run_id="r" * 65)
    response = await post(AsyncClient(), await ingest_token(), long_id + "\n")
    assert (response.status_code, response.json()["code"]) == (400, "invalid_event")
    assert response.json()["error_code"] == "bad_run_id"
    assert response.json()["message"] == (
        "Line 1: The run id must be at most 64 characters, not 65.")


async def test_an_ended_run_takes_only_a_sinks_report_of_what_it_lost() -> None:
    lines = await recorded_turn()
    token, client = await ingest_token(), AsyncClient()
    await post(client, token, body_of(lines))
    last = json.loads(lines[-1])
    late = {**{k: last[k] for k in ("v", "run_id", "session_id", "time", "offset", "path")},
            "seq": last["seq"] + 1}
    report = {**late, "type": "sink.overflowed", "sink": "dashboard", "first_seq": 3,
              "last_seq": 3, "dropped": 1}
    accepted = await post(client, token, json.dumps(report) + "\n")
    assert accepted.json()["runs"]["remote-1"] == {"last_seq": len(lines), "status": "finished"}
    other = {**late, "seq": last["seq"] + 2, "type": "step.exited", "step": "Survey"}
    refused = await post(client, token, json.dumps(other) + "\n")
    assert (refused.status_code, refused.json()["code"]) == (409, "run_ended")


async def test_an_ingested_run_counts_its_rejected_branches() -> None:
    from pathlib import Path

    lines = (Path(__file__).parents[1] / "golden" / "atomic_failure.jsonl").read_text()
    rejected = sum(json.loads(line)["type"] == "branch.rejected" for line in lines.splitlines())
    response = await post(AsyncClient(), await ingest_token(), lines)
    assert response.status_code == 200, response.json()
    (run_id,) = response.json()["runs"]
    assert rejected >= 1
    assert (await Run.objects.aget(id=run_id)).summary()["rejected_count"] == rejected


async def test_an_ingested_run_s_duration_is_its_greatest_offset() -> None:
    lines = await recorded_turn("remote-timed")
    await post(AsyncClient(), await ingest_token(), body_of(lines))
    offsets = [json.loads(line)["offset"] for line in lines]
    assert (await Run.objects.aget(id="remote-timed")).summary()["duration"] == max(offsets)


async def test_a_line_is_stored_as_the_text_it_came_as_and_a_secret_in_one_redacted() -> None:
    """Serialised once, by the process that sent it: the dashboard stores (and broadcasts)
    the line's own text, except where redaction had to change it."""
    lines = await recorded_turn()
    loaded = next(i for i, line in enumerate(lines) if '"session.loaded"' in line)
    data = json.loads(lines[loaded])
    data["context"] = {"api_key": "sk-live-1", "region": "eu"}
    lines[loaded] = json.dumps(data, separators=(",", ":"))
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(run_group("remote-1"), channel)
    response = await post(AsyncClient(), await ingest_token(), body_of(lines))
    assert response.status_code == 200, response.content
    texts = await sync_to_async(read_texts)("remote-1", -1, len(lines) + 1)
    assert [seq for seq, _ in texts] == list(range(len(lines)))
    assert [text for i, (_, text) in enumerate(texts) if i != loaded] == [
        line for i, line in enumerate(lines) if i != loaded]
    assert "sk-live-1" not in texts[loaded][1]
    assert json.loads(texts[loaded][1])["context"] == {"api_key": MARKER, "region": "eu"}
    broadcast = ""
    with anyio.fail_after(10):
        while broadcast.count('"seq":') < len(lines):
            broadcast += (await layer.receive(channel))["events"]
    assert "sk-live-1" not in broadcast and MARKER in broadcast
