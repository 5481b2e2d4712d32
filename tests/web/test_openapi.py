"""``/api/openapi.json``: an OpenAPI 3.1 document generated from the API's pydantic models,
and the real answers fit those models."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import pytest
from django.test import AsyncClient
from pydantic import ValidationError

from picoflow_web.http import bodies
from picoflow_web.models import Run
from tests.web.test_ingest import recorded_turn
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]


async def test_the_document_is_served_and_names_every_endpoint() -> None:
    response = await AsyncClient().get("/api/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) >= {
        "/api/flows", "/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/events",
        "/api/runs/{run_id}/cancel", "/api/sessions/{session_id}", "/ai/run", "/ai/flows",
        "/ai/end", "/api/ingest", "/api/ingest/heartbeat", "/api/runs/{run_id}/export",
        "/api/sessions/{session_id}/export", "/api/import", "/api/runs/{run_id}/otlp"}
    schemas = document["components"]["schemas"]
    assert "HotelFlow" in schemas["RunStart"]["properties"]["flow"]["enum"]
    assert set(schemas["Error"]["required"]) >= {"type", "message", "code", "error_code"}
    # The server refuses a request line or headers over its limits before any view reads
    # them (tests/web/test_http_limits.py): every operation may answer so.
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if isinstance(operation, dict) and "responses" in operation:
                assert {"414", "431"} <= set(operation["responses"]), (method, path)


async def test_real_answers_fit_the_models() -> None:
    auth = bearer(await atoken(await amake_user()))
    client = AsyncClient()
    made = await client.post("/api/runs", data=json.dumps({"flow": "HotelFlow",
                                                           "message": "Hi"}),
                             content_type="application/json", headers=auth)
    bodies.RunOut.model_validate(made.json())
    run = await wait_run_done(made.json()["run"]["id"])
    bodies.RunList.model_validate((await client.get("/api/runs", headers=auth)).json())
    bodies.EventPage.model_validate((await client.get(f"/api/runs/{run.id}/events",
                                                       headers=auth)).json())
    bodies.SessionOut.model_validate((await client.get(f"/api/sessions/{run.session_id}",
                                                        headers=auth)).json())
    bodies.FlowList.model_validate((await client.get("/api/flows", headers=auth)).json())
    error = await client.get("/api/runs/nope", headers=auth)
    bodies.Error.model_validate(error.json())


@pytest.mark.parametrize(("path", "schema", "base", "fields"), [
    ("/api/runs", "RunStart", {"flow": "HotelFlow", "message": "Hi"}, 4),
    ("/ai/run", "AiRun", {"flowName": "HotelFlow", "message": "Hi"}, 4),
    ("/ai/end", "AiEnd", {}, 1),
])
async def test_a_request_body_is_checked_against_the_document(
        path: str, schema: str, base: dict[str, object], fields: int) -> None:
    # What the document says a field is, is what the server accepts: every string field
    # given a number, and every object field given a string, is refused naming that field.
    client = AsyncClient()
    auth = bearer(await atoken(await amake_user()))
    document = (await client.get("/api/openapi.json")).json()
    properties = document["components"]["schemas"][schema]["properties"]
    checked = 0
    for name, spec in properties.items():
        kinds = {option.get("type") for option in spec.get("anyOf", [spec])}
        wrong: object = 5 if "string" in kinds else "x" if "object" in kinds else None
        if wrong is None:
            continue
        response = await client.post(path, data=json.dumps({**base, name: wrong}),
                                     content_type="application/json", headers=auth)
        assert response.status_code == 400, (name, response.content)
        answer = response.json()
        assert answer["error_code"] == "wrong_type" and name in answer["fields"], answer
        checked += 1
    assert checked >= fields  # e.g. flow, message, a session field and config


async def test_the_ingest_endpoints_are_described_as_they_answer() -> None:
    document = (await AsyncClient().get("/api/openapi.json")).json()
    ingest = document["paths"]["/api/ingest"]["post"]
    assert set(ingest["requestBody"]["content"]) == {"application/x-ndjson"}
    assert {"200", "400", "403", "409", "413", "415"} <= set(ingest["responses"])
    reply = document["components"]["schemas"]["IngestReply"]
    assert reply["properties"]["runs"]["additionalProperties"] == {
        "$ref": "#/components/schemas/RunPosition"}

    user = await amake_user("shipper")
    auth = bearer(await atoken(user, scopes=("ingest",)))
    client = AsyncClient()
    lines = await recorded_turn("remote-doc")
    shipped = await client.post("/api/ingest", data="".join(f"{line}\n" for line in lines),
                                content_type="application/x-ndjson", headers=auth)
    assert bodies.IngestReply.model_validate(shipped.json()).runs["remote-doc"].status == (
        "finished")
    beat = await client.post("/api/ingest/heartbeat", data=json.dumps({"runs": "remote-doc"}),
                             content_type="application/json", headers=auth)
    assert beat.status_code == 400
    assert (beat.json()["error_code"], list(beat.json()["fields"])) == ("wrong_type", ["runs"])
    beat = await client.post("/api/ingest/heartbeat",
                             data=json.dumps({"runs": ["remote-doc"]}),
                             content_type="application/json", headers=auth)
    assert bodies.IngestReply.model_validate(beat.json()).runs["remote-doc"].last_seq == (
        len(lines) - 1)


async def test_an_answer_is_built_from_its_model_so_a_broken_one_is_never_sent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A summary that lost a promised field fails on the server instead of reaching a
    # client as a body the document does not describe.
    auth = bearer(await atoken(await amake_user()))
    client = AsyncClient()
    made = await client.post("/api/runs", data=json.dumps({"flow": "HotelFlow",
                                                           "message": "Hi"}),
                             content_type="application/json", headers=auth)
    run_id = made.json()["run"]["id"]
    whole = Run.summary
    monkeypatch.setattr(Run, "summary", lambda run: {
        k: v for k, v in whole(run).items() if k != "status"})
    with pytest.raises(ValidationError, match="status"):
        await client.get(f"/api/runs/{run_id}", headers=auth)


async def test_an_events_page_carries_the_events_as_stored() -> None:
    # Not parsed and re-encoded per request: the stored text is the answer's (stored here
    # with spaces a re-encoding would drop).
    from types import SimpleNamespace

    from asgiref.sync import sync_to_async

    from picoflow_web.data import eventlog

    run = await Run.objects.acreate(id="spaced", flow="HotelFlow")
    texts = [json.dumps({"v": 1, "run_id": "spaced", "session_id": "s", "seq": seq,
                         "time": 1.0, "offset": 0.5, "path": "", "type": "step.entered",
                         "step": "A", "level": 1, "how": "start"}) for seq in range(4)]
    events = [SimpleNamespace(seq=seq, type="step.entered", path="") for seq in range(4)]
    await sync_to_async(eventlog.insert_events)(run.id, events, texts)
    client, auth = AsyncClient(), bearer(await atoken(await amake_user()))
    page = await client.get(f"/api/runs/{run.id}/events?after=-1&limit=3", headers=auth)
    assert page.content.decode() == ('{"events":[' + ",".join(texts[:3])
                                     + '],"last_seq":2,"generation":0}')
    assert bodies.EventPage.model_validate(page.json()).last_seq == 2
    rest = await client.get(f"/api/runs/{run.id}/events?after=3", headers=auth)
    assert rest.json() == {"events": [], "last_seq": 3, "generation": 0}


# -- the document and the server agree ------------------------------------------------------


def _valid(document: dict[str, Any], schema: dict[str, Any], value: Any) -> bool:
    """Whether ``value`` fits ``schema`` (a schema of ``document``), formats included."""
    whole = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema,
             "components": document["components"]}
    return bool(jsonschema_rs.validator_for(whole, validate_formats=True).is_valid(value))


def _parameters_valid(document: dict[str, Any], operation: dict[str, Any], where: str,
                      values: dict[str, str]) -> bool:
    schemas = {p["name"].lower(): p["schema"] for p in operation.get("parameters", ())
               if p["in"] == where}
    return all(name.lower() in schemas and _valid(document, schemas[name.lower()], value)
               for name, value in values.items())


def _body_valid(document: dict[str, Any], operation: dict[str, Any], body: Any) -> bool:
    described = operation["requestBody"]
    if body is None:
        return not described["required"]
    return _valid(document, described["content"]["application/json"]["schema"], body)


@pytest.mark.parametrize(("path", "query", "documented", "status"), [
    # Empty is the same as absent for every filter of the list.
    ("/api/runs", {"since": ""}, True, 200),
    ("/api/runs", {"until": ""}, True, 200),
    ("/api/runs", {"sort": ""}, True, 200),
    ("/api/runs", {"until": "2024-01-01T12:99:00Z"}, False, 400),
    ("/api/runs/known/events", {"compact": "1"}, True, 200),
    ("/api/runs/known/events", {"compact": "0"}, True, 200),
    ("/api/runs/known/events", {"compact": "AAA"}, False, 400),
    ("/api/runs/known/events", {"compact": ""}, False, 400),
])
async def test_a_query_the_document_allows_is_answered_and_one_it_does_not_is_refused(
        path: str, query: dict[str, str], documented: bool, status: int) -> None:
    await Run.objects.acreate(id="known", flow="HotelFlow")
    client, auth = AsyncClient(), bearer(await atoken(await amake_user()))
    document = (await client.get("/api/openapi.json")).json()
    templated = path.replace("known", "{run_id}")
    assert _parameters_valid(document, document["paths"][templated]["get"], "query",
                             query) is documented
    response = await client.get(path, query, headers=auth)
    assert response.status_code == status, response.content
    if status == 400:
        assert response.json()["error_code"] == "bad_parameter"


@pytest.mark.parametrize(("path", "body", "headers", "documented", "status", "error_code"), [
    # A flow that needs a message: the document says so, flow by flow.
    ("/api/runs", {"flow": "ResearchFlow"}, {}, False, 400, "message_required"),
    ("/api/runs", {"flow": "ResearchFlow", "message": " \x1c\u3000\n"}, {}, False, 400,
     "message_required"),
    ("/api/runs", {"flow": "ResearchFlow", "message": "tides"}, {}, True, 201, None),
    ("/ai/run", {"flowName": "ResearchFlow", "message": "\t"}, {}, False, 400,
     "message_required"),
    ("/api/runs", {"flow": "ConflictFlow"}, {}, True, 201, None),
    # Session ids: one definition; empty is none (a new session).
    ("/api/runs", {"flow": "HotelFlow", "message": "Hi", "session_id": ""}, {}, True, 201,
     None),
    ("/api/runs", {"flow": "HotelFlow", "message": "Hi", "session_id": "a b"}, {}, False,
     400, "bad_session_id"),
    # /ai/end names its session in the body or, PicoFlow's way, in a header alone.
    ("/ai/end", None, {"Chat-Session-Id": "no-such-session"}, True, 404, None),
    ("/ai/end", {"session": "no-such-session"}, {}, True, 404, None),
    # A heartbeat names up to 1000 run ids of up to 64 characters, and only ids.
    ("/api/ingest/heartbeat", {"runs": [f"{n:064d}" for n in range(1000)]}, {}, True, 200,
     None),
    ("/api/ingest/heartbeat", {"runs": ["fine", "a b"]}, {}, False, 400, "bad_run_id"),
])
async def test_a_body_the_document_allows_is_taken_and_one_it_does_not_is_refused(
        path: str, body: Any, headers: dict[str, str], documented: bool, status: int,
        error_code: str | None) -> None:
    client = AsyncClient()
    auth = bearer(await atoken(await amake_user(), scopes=("read", "run", "ingest")))
    document = (await client.get("/api/openapi.json")).json()
    operation = document["paths"][path]["post"]
    assert (_body_valid(document, operation, body)
            and _parameters_valid(document, operation, "header", headers)) is documented
    sent = {} if body is None else {"data": json.dumps(body),
                                    "content_type": "application/json"}
    response = await client.post(path, **sent, headers={**auth, **headers})
    assert response.status_code == status, response.content
    if error_code is not None:
        assert response.json()["error_code"] == error_code
    if path == "/api/runs" and status == 201:
        # The run executes on this test's loop: left running, it would be destroyed with
        # the loop half started (a branch's watcher never awaited) and fail the teardown.
        await wait_run_done(response.json()["run"]["id"])
