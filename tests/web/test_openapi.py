"""``/api/openapi.json``: an OpenAPI 3.1 document generated from the API's pydantic models,
and the real answers fit those models."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from picoflow_web import openapi
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
        "/ai/end"}
    schemas = document["components"]["schemas"]
    assert "HotelFlow" in schemas["RunStart"]["properties"]["flow"]["enum"]
    assert set(schemas["Error"]["required"]) >= {"type", "message", "code", "error_code"}


async def test_real_answers_fit_the_models() -> None:
    auth = bearer(await atoken(await amake_user()))
    client = AsyncClient()
    made = await client.post("/api/runs", data=json.dumps({"flow": "HotelFlow",
                                                           "message": "Hi"}),
                             content_type="application/json", headers=auth)
    openapi.RunOut.model_validate(made.json())
    run = await wait_run_done(made.json()["run"]["id"])
    openapi.RunList.model_validate((await client.get("/api/runs", headers=auth)).json())
    openapi.EventPage.model_validate((await client.get(f"/api/runs/{run.id}/events",
                                                       headers=auth)).json())
    openapi.SessionOut.model_validate((await client.get(f"/api/sessions/{run.session_id}",
                                                        headers=auth)).json())
    openapi.FlowList.model_validate((await client.get("/api/flows", headers=auth)).json())
    error = await client.get("/api/runs/nope", headers=auth)
    openapi.Error.model_validate(error.json())


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
