"""The HTTP API (``/api/*``) and PicoFlow's HTTP contract (``/ai/*``) through Django's
async test client (authentication, CSRF, real turns, filters, paging and bad input), and
the session header of the contract over a real Daphne process."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.middleware.csrf import CSRF_ALLOWED_CHARS
from django.test import AsyncClient
from django.utils.crypto import get_random_string

from picoflow_web.data import eventlog
from picoflow_web.execute import services
from picoflow_web.execute.engine import get_engine
from picoflow_web.models import EventRecord, Run, StoredSession
from runtime.events import parse_event
from tests import inline_tasks
from tests.livedaphne import LiveDaphne, SharedServer
from tests.webhelpers import (
    HttpSession,
    amake_user,
    assert_gap_free,
    atoken,
    bearer,
    wait_run_done,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

API_ENDPOINTS = [
    ("get", "/api/flows"),
    ("get", "/api/runs"),
    ("post", "/api/runs"),
    ("get", "/api/runs/some-run"),
    ("get", "/api/runs/some-run/events"),
    ("get", "/api/sessions/some-session"),
    ("post", "/ai/run"),
    ("get", "/ai/flows"),
    ("post", "/ai/end"),
]
PAGES = ["/", "/runs/some-run/", "/sessions/some-session/"]


def token_client() -> AsyncClient:
    """A client that enforces CSRF like a browser would (it is off by default in tests)."""
    return AsyncClient(enforce_csrf_checks=True)


async def post_json(client: AsyncClient, path: str, body: Any, **headers: str) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body)
    return await client.post(path, data=data, content_type="application/json",
                             headers=headers)


def assert_error(response: Any, status: int, code: str, fragment: str = "") -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["type"] == "error" and body["code"] == code, body
    assert fragment.lower() in body["message"].lower(), body


async def snapshot() -> tuple[int, int, list[tuple[str, int]]]:
    """What bad input must not change: runs, events, sessions and their revisions."""
    sessions = [(s, r) async for s, r in
                StoredSession.objects.order_by("id").values_list("id", "revision")]
    return await Run.objects.acount(), await EventRecord.objects.acount(), sessions


async def check_stored_events(run_id: str) -> list[dict[str, Any]]:
    """A run's stored events: valid runtime events, seqs 0..n-1, count on the run."""
    run = await Run.objects.aget(id=run_id)
    payloads = [p async for p in EventRecord.objects.filter(run_id=run_id)
                .order_by("seq").values_list("payload", flat=True)]
    events = [parse_event(p) for p in payloads]
    assert_gap_free([e.seq for e in events])
    assert run.event_count == len(events) > 0
    assert {e.run_id for e in events} == {run_id}
    assert events[0].type == "turn.started"
    assert events[-1].type in ("turn.finished", "turn.failed")
    return payloads


# -- authentication -----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), API_ENDPOINTS)
async def test_api_refuses_anonymous_with_401_json(method: str, path: str) -> None:
    response = await getattr(AsyncClient(), method)(path)
    assert_error(response, 401, "unauthenticated")


@pytest.mark.parametrize(("method", "path"), API_ENDPOINTS)
async def test_api_refuses_unknown_and_inactive_tokens(method: str, path: str) -> None:
    user = await amake_user("retired", is_active=False)
    for raw in ("pf_not-a-real-token", await atoken(user)):
        response = await getattr(AsyncClient(), method)(path, headers=bearer(raw))
        assert_error(response, 401, "unauthenticated")


@pytest.mark.parametrize("path", PAGES)
async def test_pages_redirect_anonymous_to_login(path: str) -> None:
    response = await AsyncClient().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


async def test_session_post_needs_csrf_token_and_bearer_does_not() -> None:
    user = await amake_user()
    browser = token_client()
    await browser.aforce_login(user)
    body = {"flow": "HotelFlow", "message": "Hi"}
    before = await snapshot()

    refused = await post_json(browser, "/api/runs", body)
    assert_error(refused, 403, "csrf")
    refused = await post_json(browser, "/ai/run", {"flowName": "HotelFlow", "message": "Hi"})
    assert_error(refused, 403, "csrf")
    refused = await browser.post("/ai/end", headers={"CHAT_SESSION_ID": "x"})
    assert_error(refused, 403, "csrf")
    assert await snapshot() == before

    # Safe methods need no token.
    assert (await browser.get("/api/runs")).status_code == 200

    # With the CSRF cookie and the matching header, the browser's POST goes through.
    secret = get_random_string(32, CSRF_ALLOWED_CHARS)
    browser.cookies["csrftoken"] = secret
    started = await post_json(browser, "/api/runs", body, X_CSRFTOKEN=secret)
    assert started.status_code == 201, started.content
    run = started.json()["run"]
    assert run["flow"] == "HotelFlow" and run["message"] == "Hi"
    assert (await Run.objects.aget(id=run["id"])).started_by_id == user.pk
    assert (await wait_run_done(run["id"])).status == Run.Status.FINISHED

    # A bearer token is not a browser session: CSRF does not apply.
    started = await post_json(token_client(), "/api/runs", body,
                              **bearer(await atoken(user)))
    assert started.status_code == 201, started.content
    assert (await wait_run_done(started.json()["run"]["id"])).status == Run.Status.FINISHED


async def drain_background(timeout: float = 10.0) -> None:
    """Let turns started by ``POST /api/runs`` end before the test's loop closes."""
    pending = [t for t in list(inline_tasks.RUNNING) if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)


async def test_run_started_over_http_finishes_and_stores_its_events() -> None:
    """``POST /api/runs`` answers at once; the turn goes on in the server and finishes.

    (Regression: the turn's task once inherited the request's asgiref executor, which
    quits with the response, so every later ORM call of the turn failed.)
    """
    user = await amake_user()
    started = await post_json(token_client(), "/api/runs",
                              {"flow": "ResearchFlow", "message": "research tides"},
                              **bearer(await atoken(user)))
    assert started.status_code == 201, started.content
    try:
        run = await wait_run_done(started.json()["run"]["id"], timeout=3)
        assert run.status == Run.Status.FINISHED
        await check_stored_events(run.id)
    finally:
        await drain_background()


# -- PicoFlow's HTTP contract ---------------------------------------------------------------


async def test_ai_run_plays_hotel_turns_and_continues_the_session() -> None:
    user = await amake_user()
    client = token_client()
    auth = bearer(await atoken(user))

    first = await post_json(client, "/ai/run", {"flowName": "HotelFlow", "message": "Hi"},
                            **auth)
    assert first.status_code == 200, first.content
    body = first.json()
    assert set(body) == {"success", "completed", "message", "session", "contentType", "run"}
    assert first["PicoFlow-Run-Id"] == body["run"]
    assert body["success"] is True and body["completed"] is False
    assert body["contentType"] == "text/plain"
    assert "hotel" in body["message"].lower()
    session_id = body["session"]
    assert session_id and first["CHAT_SESSION_ID"] == session_id

    second = await post_json(client, "/ai/run", {"flowName": "HotelFlow", "message": "yes"},
                             CHAT_SESSION_ID=session_id, **auth)
    assert second.status_code == 200, second.content
    again = second.json()
    assert again["session"] == session_id and second["CHAT_SESSION_ID"] == session_id
    assert again["success"] is True and again["message"] != body["message"]
    assert "dates" in again["message"]

    detail = await client.get(f"/api/sessions/{session_id}", headers=auth)
    assert detail.status_code == 200
    session = detail.json()["session"]
    assert session["flow"] == "HotelFlow"
    assert [r["message"] for r in session["runs"]] == ["Hi", "yes"]
    assert [r["id"] for r in session["runs"]] == [body["run"], again["run"]]
    assert all(r["status"] == "finished" for r in session["runs"])
    memory = session["doc"]["flow"]["memory"]
    human = [m["content"] for step in memory.values() for m in step["messages"]
             if m["type"] == "human"]
    assert human[-2:] == ["Hi", "yes"]
    for run in session["runs"]:
        await check_stored_events(run["id"])


async def test_ai_flows_and_api_flows_list_the_engine_flows() -> None:
    user = await amake_user()
    auth = bearer(await atoken(user))
    names = get_engine().get_flow_names()
    assert {"HotelFlow", "ResearchFlow", "ConflictFlow"} <= set(names)
    response = await AsyncClient().get("/ai/flows", headers=auth)
    assert response.status_code == 200 and response.json() == names
    response = await AsyncClient().get("/api/flows", headers=auth)
    assert response.status_code == 200
    assert [f["id"] for f in response.json()["flows"]] == names
    assert {tuple(sorted(f)) for f in response.json()["flows"]} == {
        ("config_schema", "description", "example_messages", "id", "needs_message")}


async def test_ai_end_deletes_the_session() -> None:
    user = await amake_user()
    client = token_client()
    auth = bearer(await atoken(user))
    first = await post_json(client, "/ai/run", {"flowName": "HotelFlow", "message": "Hi"},
                            **auth)
    session_id = first.json()["session"]

    assert_error(await client.post("/ai/end", headers=auth), 400, "bad_request",
                 "Chat-Session-Id")
    ended = await client.post("/ai/end", headers={"CHAT_SESSION_ID": session_id, **auth})
    assert ended.status_code == 200
    assert ended.json() == {"success": True, "session": session_id}
    assert not await StoredSession.objects.filter(id=session_id).aexists()
    assert_error(await client.get(f"/api/sessions/{session_id}", headers=auth), 404,
                 "not_found")
    # The turn's record stays: ending a session deletes its document, not history.
    listed = (await client.get(f"/api/runs?session={session_id}", headers=auth)).json()
    assert [r["message"] for r in listed["runs"]] == ["Hi"]

    again = await client.post("/ai/end", headers={"CHAT_SESSION_ID": session_id, **auth})
    assert again.status_code == 404
    assert again.json() == {"success": False, "session": session_id}
    unknown = await client.post("/ai/end", headers={"CHAT_SESSION_ID": "no-such", **auth})
    assert unknown.status_code == 404


# -- bad input ------------------------------------------------------------------------------
# (An oversized body is a 413: tests/web/test_errors.py.)

BAD_BODIES = [
    pytest.param(b"{not json", "not JSON", id="not-json"),
    pytest.param(b"\xff\xfe\x00", "not JSON", id="not-utf8"),
    pytest.param(b"[1, 2]", "JSON object", id="json-array"),
    pytest.param(b'"HotelFlow"', "JSON object", id="json-string"),
    pytest.param({"flowName": "NoSuchFlow", "flow": "NoSuchFlow", "message": "Hi"},
                 "Unknown flow", id="unknown-flow"),
    pytest.param({"flowName": "HotelFlow", "flow": "HotelFlow", "message": 42},
                 "message must be a string", id="number-message"),
    pytest.param({"flowName": "HotelFlow", "flow": "HotelFlow", "message": ["Hi"]},
                 "message must be a string", id="list-message"),
    pytest.param({"flowName": "HotelFlow", "flow": "HotelFlow", "message": "Hi",
                  "config": "fast"}, "config must be a JSON object", id="config-not-object"),
    pytest.param({"message": "Hi"}, "", id="no-flow"),
]


@pytest.mark.parametrize("path", ["/ai/run", "/api/runs"])
@pytest.mark.parametrize(("body", "fragment"), BAD_BODIES)
async def test_bad_input_gets_a_clear_400_and_loses_nothing(
    path: str, body: Any, fragment: str
) -> None:
    user = await amake_user()
    client = token_client()
    auth = bearer(await atoken(user))
    # An existing session with one turn: a bad request naming it must leave it intact.
    first = await post_json(client, "/ai/run", {"flowName": "HotelFlow", "message": "Hi"},
                            **auth)
    session_id = first.json()["session"]
    before = await snapshot()
    doc_before = (await StoredSession.objects.aget(id=session_id)).doc

    if path == "/api/runs" and isinstance(body, dict):
        body = {**body, "session_id": session_id}
    response = await post_json(client, path, body, CHAT_SESSION_ID=session_id, **auth)
    assert_error(response, 400, "bad_request", fragment)

    assert await snapshot() == before
    assert (await StoredSession.objects.aget(id=session_id)).doc == doc_before
    # The session goes on as if nothing had happened.
    going_on = await post_json(client, "/ai/run", {"flowName": "HotelFlow", "message": "yes"},
                               CHAT_SESSION_ID=session_id, **auth)
    assert going_on.status_code == 200 and "dates" in going_on.json()["message"]


async def test_unknown_ids_are_404_and_non_integer_paging_is_400() -> None:
    user = await amake_user()
    client = AsyncClient()
    auth = bearer(await atoken(user))
    for path in ("/api/runs/no-such-run", "/api/runs/no-such-run/events",
                 "/api/sessions/no-such-session"):
        assert_error(await client.get(path, headers=auth), 404, "not_found", "no-such")

    run, _ = await services.run_execute(flow="HotelFlow", message="Hi")
    for query in ("after=abc", "after=1.5", "limit=ten", "after="):
        assert_error(await client.get(f"/api/runs/{run.id}/events?{query}", headers=auth),
                     400, "bad_request", "integers")
    assert (await client.get("/ai/run", headers=auth)).status_code == 405


# -- runs list and events -------------------------------------------------------------------


async def test_runs_list_filters() -> None:
    user = await amake_user()
    client = AsyncClient()
    auth = bearer(await atoken(user))
    hotel_1, reply = await services.run_execute(flow="HotelFlow", message="Hi")
    hotel_2, _ = await services.run_execute(flow="HotelFlow", message="yes",
                                            session_id=reply.session_id)
    conflict, _ = await services.run_execute(flow="ConflictFlow", message="go")
    research, _ = await services.run_execute(flow="ResearchFlow", message="research tides")

    async def ids(query: str) -> set[str]:
        response = await client.get(f"/api/runs{query}", headers=auth)
        assert response.status_code == 200
        return {r["id"] for r in response.json()["runs"]}

    everything = {hotel_1.id, hotel_2.id, conflict.id, research.id}
    assert await ids("") == everything
    assert await ids("?flow=HotelFlow") == {hotel_1.id, hotel_2.id}
    assert await ids("?flow=ConflictFlow") == {conflict.id}
    assert await ids("?flow=NoSuchFlow") == set()
    assert await ids("?status=finished") == everything
    assert await ids("?status=running") == set()
    assert await ids(f"?session={reply.session_id}") == {hotel_1.id, hotel_2.id}
    assert await ids("?conflicts=1") == {conflict.id}
    assert await ids("?conflicts=true") == {conflict.id}
    assert await ids("?conflicts=0") == everything - {conflict.id}
    assert await ids("?flow=HotelFlow&conflicts=1") == set()

    newest_first = (await client.get("/api/runs", headers=auth)).json()["runs"]
    assert newest_first[0]["id"] == research.id
    summary = (await client.get(f"/api/runs/{conflict.id}", headers=auth)).json()["run"]
    assert summary["has_conflicts"] is True and summary["branch_count"] == 2
    assert summary["status"] == "finished" and summary["reply"]["success"] is True
    assert "Conflict" in summary["reply"]["message"]


async def test_stored_events_are_valid_gap_free_and_page_through_after() -> None:
    user = await amake_user()
    client = AsyncClient()
    auth = bearer(await atoken(user))
    run, _ = await services.run_execute(flow="ResearchFlow", message="research tide pools")
    stored = await check_stored_events(run.id)
    count = len(stored)
    assert count > 20 and run.event_count == count and run.branch_count == 4

    everything = (await client.get(f"/api/runs/{run.id}/events", headers=auth)).json()
    assert everything == {"events": stored, "last_seq": count - 1, "generation": 0}

    paged: list[dict[str, Any]] = []
    after = -1
    while True:
        response = await client.get(f"/api/runs/{run.id}/events?after={after}&limit=7",
                                    headers=auth)
        assert response.status_code == 200
        page = response.json()
        if not page["events"]:
            assert page["last_seq"] == after
            break
        assert len(page["events"]) <= 7
        assert page["events"][0]["seq"] == after + 1
        paged.extend(page["events"])
        after = page["last_seq"]
    assert paged == stored

    middle = count // 2
    tail = (await client.get(f"/api/runs/{run.id}/events?after={middle}", headers=auth)).json()
    assert [e["seq"] for e in tail["events"]] == list(range(middle + 1, count))
    beyond = (await client.get(f"/api/runs/{run.id}/events?after={count + 10}",
                               headers=auth)).json()
    assert beyond == {"events": [], "last_seq": count + 10, "generation": 0}


async def _streamed(response: Any) -> bytes:
    return b"".join([chunk async for chunk in response.streaming_content])


async def test_stored_events_stream_as_jsonl_of_the_stored_text() -> None:
    """``Accept: application/x-ndjson``: every event after ``after`` in one streamed
    response, each line the text as stored (nothing parsed and encoded again)."""
    user = await amake_user()
    client = AsyncClient()
    auth = bearer(await atoken(user))
    run, _ = await services.run_execute(flow="ResearchFlow", message="research tide pools")
    stored = await check_stored_events(run.id)
    texts = [text for _, text in await sync_to_async(eventlog.read_texts)(run.id, -1, 10**6)]
    ndjson = {**auth, "Accept": "application/x-ndjson"}

    response = await client.get(f"/api/runs/{run.id}/events", headers=ndjson)
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    body = await _streamed(response)
    assert body.decode().split("\n") == [*texts, ""]
    assert [json.loads(line) for line in body.splitlines()] == stored

    middle = len(stored) // 2
    tail = await _streamed(await client.get(f"/api/runs/{run.id}/events?after={middle}",
                                            headers=ndjson))
    assert [json.loads(line)["seq"] for line in tail.splitlines()] == list(
        range(middle + 1, len(stored)))
    # A JSON page still answers whoever asks for JSON (or for anything).
    for accept in ("application/json", "*/*", "application/json, application/x-ndjson"):
        page = await client.get(f"/api/runs/{run.id}/events", headers={**auth, "Accept": accept})
        assert page["Content-Type"] == "application/json" and page.json()["events"] == stored
    # Refusals keep the JSON error shape.
    assert_error(await client.get("/api/runs/no-such-run/events", headers=ndjson),
                 404, "not_found", "no-such-run")
    assert_error(await client.get(f"/api/runs/{run.id}/events?after=x", headers=ndjson),
                 400, "bad_request", "integers")
    assert_error(await client.get(f"/api/runs/{run.id}/events",
                                  headers={"Accept": "application/x-ndjson"}),
                 401, "unauthenticated")


async def test_a_compact_stream_gives_the_shared_fields_once_and_loses_nothing() -> None:
    """``?compact=1``: lines that begin with the run's shared fields (schema version, run
    id, session id) go without them; the ``PicoFlow-Envelope`` header has them, and
    putting them back gives every stored event exactly. A line that does not begin with
    them (here one stored with other fields first) goes whole."""
    user = await amake_user()
    client = AsyncClient()
    auth = bearer(await atoken(user))
    run, _ = await services.run_execute(flow="ResearchFlow", message="research tide pools")
    stored = await check_stored_events(run.id)
    # An event whose text orders the fields otherwise (as another writer might) is
    # stored as it came; it must reach the reader whole.
    odd = dict(reversed(list(stored[-1].items())))
    await EventRecord.objects.filter(run_id=run.id, seq=odd["seq"]).aupdate(payload=odd)

    response = await client.get(f"/api/runs/{run.id}/events?compact=1",
                                headers={**auth, "Accept": "application/x-ndjson"})
    assert response.status_code == 200
    envelope = json.loads(response["PicoFlow-Envelope"])
    assert envelope == {"v": stored[0]["v"], "run_id": run.id,
                        "session_id": stored[0]["session_id"]}
    lines = [json.loads(line) for line in (await _streamed(response)).splitlines()]
    assert len(lines) == len(stored)
    assert all("run_id" not in line and "v" not in line for line in lines[:-1])
    assert lines[-1] == odd
    assert [line if "run_id" in line else {**envelope, **line} for line in lines] == stored
    plain = await client.get(f"/api/runs/{run.id}/events",
                             headers={**auth, "Accept": "application/x-ndjson"})
    assert "PicoFlow-Envelope" not in plain
    assert all("run_id" in json.loads(line) for line in (await _streamed(plain)).splitlines())


# -- the contract over a real Daphne ----------------------------------------------------------


@pytest.fixture
def daphne(shared_daphne: SharedServer) -> tuple[LiveDaphne, str]:
    return shared_daphne.server, shared_daphne.token


def _turn(server: LiveDaphne, token: str, message: str, **headers: str) -> Any:
    answer = HttpSession(server.base_url).post(
        "/ai/run", json_body={"flowName": "HotelFlow", "message": message},
        headers={**headers, **bearer(token)})
    assert answer.status == 200, answer.body
    return answer


def test_ai_session_continues_over_daphne_with_the_hyphenated_header(daphne: Any) -> None:
    server, token = daphne
    first = _turn(server, token, "Hi")
    session_id = first.json()["session"]
    assert first.headers["CHAT_SESSION_ID"] == session_id  # response headers pass
    second = _turn(server, token, "yes", **{"Chat-Session-Id": session_id})
    assert second.json()["session"] == session_id and "dates" in second.json()["message"]
    ended = HttpSession(server.base_url).post(
        "/ai/end", headers={"Chat-Session-Id": session_id, **bearer(token)})
    assert ended.status == 200 and ended.json() == {"success": True, "session": session_id}


def test_ai_session_continues_over_daphne_with_the_session_body_field(daphne: Any) -> None:
    # Daphne drops request headers with underscores (CHAT_SESSION_ID), so the session can
    # also travel in the body.
    server, token = daphne
    session_id = _turn(server, token, "Hi").json()["session"]
    second = HttpSession(server.base_url).post(
        "/ai/run", json_body={"flowName": "HotelFlow", "message": "yes", "session": session_id},
        headers=bearer(token))
    assert second.status == 200, second.body
    assert second.json()["session"] == session_id, "a new session was started"
    ended = HttpSession(server.base_url).post(
        "/ai/end", json_body={"session": session_id}, headers=bearer(token))
    assert ended.status == 200, ended.body


async def test_a_coordinators_child_keeps_its_chosen_run_id_and_never_runs_twice() -> None:
    """What concurrent_steps() sends: the child's run id and session, and whose child it is.
    The child runs under that id and links back; the same id again is refused (409) and
    runs nothing; a malformed id is refused (400)."""
    user = await amake_user()
    client = token_client()
    auth = bearer(await atoken(user))
    # The coordinator: a run of the child's project.
    await Run.objects.acreate(id="coord-1", flow="HotelFlow", project_id="default")
    headers = {"PicoFlow-Run-Id": "coord-1-c0-3", "PicoFlow-Coordinator-Run": "coord-1",
               "PicoFlow-Coordinator-Group": "c0", "PicoFlow-Coordinator-Batch": "1",
               "PicoFlow-Coordinator-Item": "3"}
    body = {"flowName": "HotelFlow", "message": "Hi", "session": "coord-1-c0-3-s"}
    first = await post_json(client, "/ai/run", body, **auth, **headers)
    assert first.status_code == 200, first.content
    assert first.json()["run"] == "coord-1-c0-3" and first["PicoFlow-Run-Id"] == "coord-1-c0-3"
    assert first.json()["session"] == "coord-1-c0-3-s"
    run = await Run.objects.aget(id="coord-1-c0-3")
    assert run.origin["coordinator"] == {"run_id": "coord-1", "group": "c0", "batch": 1,
                                         "item": 3}
    summary = run.summary()
    assert summary["origin"]["coordinator"]["run_id"] == "coord-1"
    events = await EventRecord.objects.filter(run_id=run.id).acount()

    again = await post_json(client, "/ai/run", body, **auth, **headers)
    assert again.status_code == 409, again.content
    assert again.json()["code"] == "run_exists"
    assert await Run.objects.filter(id__startswith="coord-1-").acount() == 1
    assert await EventRecord.objects.filter(run_id=run.id).acount() == events

    bad = await post_json(client, "/ai/run", body,
                          **auth, **{"PicoFlow-Run-Id": "../etc/passwd"})
    assert bad.status_code == 400 and bad.json()["error_code"] == "bad_run_id"
