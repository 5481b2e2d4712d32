"""Your own flows in the dashboard (``PICOFLOW_FLOWS``, ``PICOFLOW_DEMOS``), and a start
request that fits the flow: config validated against the flow's schema, a message where the
flow needs one, the demos' answer off their script, and events naming the scripted model.

Start-up failures run ``manage.py check`` in a subprocess (a bad entry is a system check
error, so ``check``, ``runserver`` and ``migrate`` stop), and Daphne, which builds the
engine when it imports the ASGI application.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import AsyncClient

from picoflow_web.execute.engine import get_engine
from picoflow_web.models import EventRecord, Run, StoredSession
from tests.flows_pkg.greeter import GreeterConfig
from tests.livedaphne import REPO_ROOT, DaphneStartError, build_env, live_daphne, run_manage
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio]


# -- start-up --------------------------------------------------------------------------------


def manage_check(tmp_path: Path, **env: str) -> Any:
    return run_manage("check", env=build_env(tmp_path, {"PYTHONPATH": str(REPO_ROOT), **env}))


@pytest.mark.parametrize(("flows", "fragments"), [
    pytest.param("tests.flows_pkg.no_such_module:Flow",
                 ["'tests.flows_pkg.no_such_module:Flow'", "cannot be imported",
                  "No module named 'tests.flows_pkg.no_such_module'"], id="bad-module"),
    pytest.param("tests.flows_pkg.greeter:NoSuchFlow",
                 ["'tests.flows_pkg.greeter:NoSuchFlow'", "has no attribute 'NoSuchFlow'"],
                 id="bad-attribute"),
    pytest.param("tests.flows_pkg.greeter.GreeterFlow",
                 ["'tests.flows_pkg.greeter.GreeterFlow'", "not of the form package.module:"],
                 id="no-colon"),
    pytest.param("tests.flows_pkg.broken:NotAFlow",
                 ["'tests.flows_pkg.broken:NotAFlow'",
                  "class tests.flows_pkg.broken.NotAFlow is not a Flow subclass"],
                 id="class-not-a-flow"),
    pytest.param("tests.flows_pkg.broken:not_a_class",
                 ["'tests.flows_pkg.broken:not_a_class'", "is not a Flow subclass (it is int 42)"],
                 id="value-not-a-flow"),
    pytest.param("tests.flows_pkg.broken:none_here",
                 ["'tests.flows_pkg.broken:none_here'", "holds no flows"], id="empty-list"),
    pytest.param("tests.flows_pkg.broken:HotelFlow",
                 ["'tests.flows_pkg.broken:HotelFlow'", "flow id 'HotelFlow'",
                  "already taken by the demo flow picoflow_web.demos.hotel.flow.HotelFlow"],
                 id="duplicate-of-a-demo"),
    pytest.param("tests.flows_pkg.greeter:flows, tests.flows_pkg.broken:Greeter2",
                 ["'tests.flows_pkg.broken:Greeter2'", "flow id 'GreeterFlow'",
                  "already taken by tests.flows_pkg.greeter.GreeterFlow (entry "
                  "'tests.flows_pkg.greeter:flows')"], id="duplicate-of-an-entry"),
    pytest.param("tests.flows_pkg.broken:BadSchemaFlow",
                 ["Flow 'BadSchemaFlow' cannot say how to start it",
                  "AttributeError: type object 'dict' has no attribute 'model_json_schema'"],
                 id="bad-config-schema"),
])
def test_a_bad_flow_list_stops_start_up_naming_the_entry_and_the_reason(
    tmp_path: Path, flows: str, fragments: list[str]
) -> None:
    result = manage_check(tmp_path, PICOFLOW_FLOWS=flows)
    assert result.returncode != 0, result.stdout
    (line,) = [line for line in result.stderr.splitlines() if "picoflow_web.E001" in line]
    assert line.startswith("?: (picoflow_web.E001) "), line
    for fragment in fragments:
        assert fragment in line, line
    assert "HINT: Fix or remove the entry in PICOFLOW_FLOWS." in result.stderr


def test_daphne_refuses_to_start_on_a_bad_flow_list() -> None:
    with pytest.raises(DaphneStartError) as caught, live_daphne(
        {"PICOFLOW_FLOWS": "tests.flows_pkg.broken:NotAFlow", "PYTHONPATH": str(REPO_ROOT)},
        migrate=False,
    ):
        pass
    assert "exited with code" in str(caught.value)
    assert ("picoflow_web.execute.flows.FlowsConfigError: PICOFLOW_FLOWS entry "
            "'tests.flows_pkg.broken:NotAFlow': class tests.flows_pkg.broken.NotAFlow is not "
            "a Flow subclass.") in str(caught.value)


def test_a_bad_demos_switch_stops_start_up(tmp_path: Path) -> None:
    result = manage_check(tmp_path, PICOFLOW_DEMOS="maybe")
    assert result.returncode != 0
    assert "(picoflow_web.E001) PICOFLOW_DEMOS='maybe' is not a boolean" in result.stderr


def test_a_good_flow_list_passes_the_checks_and_may_replace_a_demo_id_without_demos(
    tmp_path: Path,
) -> None:
    assert manage_check(tmp_path, PICOFLOW_FLOWS="tests.flows_pkg.greeter:flows").returncode == 0
    alone = manage_check(tmp_path, PICOFLOW_DEMOS="0",
                         PICOFLOW_FLOWS="tests.flows_pkg.broken:HotelFlow")
    assert alone.returncode == 0, alone.stderr


# -- in-process: the engine built from the environment ---------------------------------------

db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_flows(monkeypatch: pytest.MonkeyPatch, demo_latency: Any) -> Iterator[None]:
    monkeypatch.setenv("PICOFLOW_FLOWS", "tests.flows_pkg.greeter:flows")
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


async def auth() -> dict[str, str]:
    return bearer(await atoken(await amake_user()))


async def post(path: str, body: Any, headers: dict[str, str]) -> Any:
    return await AsyncClient().post(path, data=json.dumps(body), content_type="application/json",
                                    headers=headers)


@db
async def test_own_flows_are_listed_after_the_demos_and_described(own_flows: None) -> None:
    headers = await auth()
    names = (await AsyncClient().get("/ai/flows", headers=headers)).json()
    assert names[-2:] == ["GreeterFlow", "EchoFlow"] and "HotelFlow" in names
    listed = (await AsyncClient().get("/api/flows", headers=headers)).json()["flows"]
    assert [f["id"] for f in listed] == names
    greeter = listed[-2]
    assert greeter == {
        "id": "GreeterFlow", "description": "Greets whoever the config names, as often as it says.",
        "config_schema": GreeterConfig.model_json_schema(),
        "example_messages": ["good morning", "<b>hostile</b> & sly"], "needs_message": True,
    }
    fanout = next(f for f in listed if f["id"] == "FanOutFlow")
    assert fanout["config_schema"]["properties"]["branches"]["maximum"] == 100_000
    assert fanout["needs_message"] is False
    hotel = next(f for f in listed if f["id"] == "HotelFlow")
    assert hotel["example_messages"][:2] == ["Hi", "yes"] and hotel["needs_message"] is True


@db
async def test_without_demos_only_own_flows_are_served(
    own_flows: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOFLOW_DEMOS", "0")
    get_engine.cache_clear()
    headers = await auth()
    assert (await AsyncClient().get("/ai/flows", headers=headers)).json() == [
        "GreeterFlow", "EchoFlow"]


@db
async def test_an_own_flow_runs_with_its_config_and_its_own_model(own_flows: None) -> None:
    headers = await auth()
    reply = await post("/ai/run", {"flowName": "GreeterFlow", "message": "hi there",
                                   "config": {"name": "Grace", "times": 2, "shout": True}},
                       headers)
    assert reply.status_code == 200, reply.content
    assert reply.json()["message"] == "HELLO, GRACE! HELLO, GRACE! You said: hi there"
    run = await Run.objects.aget(session_id=reply.json()["session"])
    started = [p async for p in EventRecord.objects.filter(run_id=run.id, type="model.started")
               .values_list("payload", flat=True)]
    assert [p["model"]["name"] for p in started] == ["greeter-script"]
    assert started[0]["model"]["requested"]["name"] == "greeter-large"


BAD_CONFIGS = [
    pytest.param({"times": 6}, {"times": "Input should be less than or equal to 5"}, id="too-many"),
    pytest.param({"times": "often", "tone": "rude"},
                 {"times": "Input should be a valid integer, unable to parse string as an "
                           "integer", "tone": "Input should be 'warm' or 'formal'"},
                 id="two-fields"),
    pytest.param({"name": ""}, {"name": "String should have at least 1 character"},
                 id="empty-name"),
]


@db
@pytest.mark.parametrize("path", ["/api/runs", "/ai/run"])
@pytest.mark.parametrize(("config", "fields"), BAD_CONFIGS)
async def test_a_config_that_does_not_fit_is_a_400_and_starts_nothing(
    own_flows: None, path: str, config: dict[str, Any], fields: dict[str, str]
) -> None:
    headers = await auth()
    response = await post(path, {"flow": "GreeterFlow", "flowName": "GreeterFlow",
                                 "message": "hi", "config": config}, headers)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["type"] == "error" and body["code"] == "invalid_config"
    assert body["fields"] == fields
    assert body["message"].startswith("Config of flow 'GreeterFlow' is not valid: ")
    assert all(f"{name}: {text}" in body["message"] for name, text in fields.items())
    assert await Run.objects.acount() == 0 and await StoredSession.objects.acount() == 0


@db
@pytest.mark.parametrize("path", ["/api/runs", "/ai/run"])
@pytest.mark.parametrize("message", [None, "", "  "])
async def test_an_empty_message_is_refused_where_the_flow_needs_one(
    own_flows: None, path: str, message: str | None
) -> None:
    headers = await auth()
    for flow in ("GreeterFlow", "HotelFlow", "ResearchFlow"):
        response = await post(path, {"flow": flow, "flowName": flow, "message": message},
                              headers)
        assert response.status_code == 400, response.content
        assert response.json() == {"type": "error", "code": "message_required",
                                   "error_code": "message_required",
                                   "message": f"Flow '{flow}' needs a message."}
    assert await Run.objects.acount() == 0
    # A flow that needs none starts without one.
    response = await post("/ai/run", {"flowName": "ConflictFlow", "message": message}, headers)
    assert response.status_code == 200, response.content


@db
async def test_fan_out_takes_ten_thousand_branches_and_refuses_more_than_the_cap(
    own_flows: None,
) -> None:
    headers = await auth()
    too_wide = await post("/ai/run", {"flowName": "FanOutFlow",
                                      "config": {"branches": 100_001}}, headers)
    assert too_wide.status_code == 400
    assert too_wide.json()["fields"] == {
        "branches": "Input should be less than or equal to 100000"}
    reply = await post("/ai/run", {"flowName": "FanOutFlow",
                                   "config": {"branches": 10_000, "concurrency": 500}}, headers)
    assert reply.status_code == 200, reply.content
    assert reply.json()["message"] == "10000 of 10000 branches joined; total 10000."


# -- the demos off their script ---------------------------------------------------------------


@db
async def test_hotel_answers_off_script_with_what_it_can_do_and_the_session_goes_on(
    demo_latency: Any,
) -> None:
    headers = await auth()
    first = (await post("/ai/run", {"flowName": "HotelFlow", "message": "Hi"}, headers)).json()
    session = {"Chat-Session-Id": first["session"], **headers}
    off = await post("/ai/run", {"flowName": "HotelFlow", "message": "what is the weather?"},
                     session)
    assert off.status_code == 200, off.content
    body = off.json()
    assert body["success"] is True and body["completed"] is False
    assert "book a hotel in the Portland, Oregon area" in body["message"]
    assert body["message"].endswith("Next in the script: \u201cyes\u201d.")
    stored = await StoredSession.objects.aget(id=first["session"])
    assert stored.doc["run_status"] == "running"
    going_on = (await post("/ai/run", {"flowName": "HotelFlow", "message": "yes"},
                           session)).json()
    assert going_on["success"] is True and "dates" in going_on["message"]
    again = (await post("/ai/run", {"flowName": "HotelFlow", "message": "book me a castle"},
                        session)).json()
    assert again["message"].endswith("Next in the script: \u201c8/1/2027 to 8/8/2027\u201d.")


@db
async def test_hotel_suggests_the_next_line_at_each_stage(demo_latency: Any) -> None:
    from picoflow_web.demos.hotel.script import REFERENCE_TURNS

    headers = await auth()
    session: dict[str, str] = dict(headers)
    expected = {8: "change to a 2 bed rooms, search", 9: "compare hotel 2,5,8 on price",
                10: "compare on amenities", 12: "resume booking", 13: "8"}
    for index, line in enumerate(REFERENCE_TURNS):
        reply = (await post("/ai/run", {"flowName": "HotelFlow", "message": line},
                            session)).json()
        assert reply["success"] is True, reply
        session["Chat-Session-Id"] = reply["session"]
        if index + 1 in expected:
            off = (await post("/ai/run", {"flowName": "HotelFlow", "message": "hmm?"},
                              session)).json()
            assert off["message"].endswith(
                f"Next in the script: \u201c{expected[index + 1]}\u201d."), (line, off)
    assert reply["completed"] is True and "confirmation number" in reply["message"]


@db
async def test_scripted_calls_name_the_scripted_model_not_the_flow_selection(
    demo_latency: Any,
) -> None:
    headers = await auth()
    reply = (await post("/ai/run", {"flowName": "HotelFlow", "message": "Hi"}, headers)).json()
    run = await Run.objects.aget(session_id=reply["session"])
    (started,) = [p async for p in EventRecord.objects.filter(run_id=run.id,
                                                             type="model.started")
                  .values_list("payload", flat=True)]
    assert started["model"] == {
        "provider": "scripted", "name": "HotelFlow script", "params": {},
        "requested": {"provider": "openai", "name": "gpt-5.1",
                      "params": {"reasoning_effort": "low"}}}
