"""``GET /api/runs/<id>/whatif`` and ``GET /api/runs/<a>/compare/<b>``
(picoflow_web.http.analysis).

The seed's A/B flow (TimingFlow) is started through the API as the dashboard starts it and
run to its end; its what-if must show what the seed's table says: pipelined, A2 runs right
after A1 as recorded and under local barriers, but waits for B1 under graph-wide
supersteps; batched, A2 waits for B1 in every schedule; the totals stay close. Times are
compared with each other (ratios, one schedule against another), never with the clock.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import jsonschema_rs
import pytest
from django.test import AsyncClient

from picoflow_web.http import bodies
from picoflow_web.models import Project, Run
from runtime.events import read_jsonl, runs_of
from runtime.whatif import compare_runs
from tests.golden.goldens import BY_NAME
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

UNIT = 0.05
"""Demo time unit: B1 takes ten (half a second), far above scheduling jitter."""

SCHEDULES = ("recorded", "supersteps", "local_barriers")
NDJSON = "application/x-ndjson"
GOLDEN = BY_NAME["ab_timing"].jsonl_path


@pytest.fixture
async def auth() -> dict[str, str]:
    return bearer(await atoken(await amake_user()))


async def timing_run(auth: dict[str, str], message: str) -> str:
    """A TimingFlow run started as the dashboard starts it, once it finished."""
    made = await AsyncClient().post("/api/runs", data=json.dumps(
        {"flow": "TimingFlow", "message": message}), content_type="application/json",
        headers=auth)
    assert made.status_code == 201, made.content
    run = await wait_run_done(made.json()["run"]["id"])
    assert run.status == Run.Status.FINISHED
    return str(run.id)


async def get_ok(path: str, auth: dict[str, str]) -> dict[str, Any]:
    response = await AsyncClient().get(path, headers=auth)
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    answer: dict[str, Any] = response.json()
    return answer


def by_key(schedule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["key"]: op for op in schedule["operations"] if op["kind"] == "branch"}


EPS = 1e-5
"""Seconds: the report's rounding."""


def soon_after(moment: float, reference: float, b1: dict[str, Any]) -> bool:
    """Whether ``moment`` is at ``reference`` or shortly after: within a tenth of B1's
    duration (a unit), room for the coordinators' own work between two barriers, which a
    busy machine can stretch."""
    return reference - EPS <= moment <= reference + 0.1 * (b1["end"] - b1["start"])


def assert_close_totals(report: dict[str, Any]) -> None:
    totals = [report["schedules"][name]["total"] for name in SCHEDULES]
    assert max(totals) <= 1.15 * min(totals), totals


def assert_error(response: Any, status: int, error_code: str) -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert (body["type"], body["error_code"]) == ("error", error_code), body


async def test_the_seeds_ab_flow_pipelined_a2_waits_for_b1_under_supersteps_only(
        auth: dict[str, str], demo_latency: Any) -> None:
    demo_latency(UNIT)
    run_id = await timing_run(auth, "pipelined")
    report = await get_ok(f"/api/runs/{run_id}/whatif", auth)
    bodies.WhatIf.model_validate(report)
    assert (report["unit"], report["run"], report["flow"], report["complete"]) == (
        "s", run_id, "TimingFlow", True)

    recorded = by_key(report["schedules"]["recorded"])
    assert set(recorded) == {"A", "B", "A1", "A2", "B1", "B2"}
    # As recorded, worker A did not wait for B: A2 ended well before B1.
    assert recorded["A2"]["end"] < recorded["B1"]["end"]

    flat = report["schedules"]["supersteps"]
    steps = by_key(flat)
    a2, b1 = steps["A2"], steps["B1"]
    assert a2["start"] >= b1["end"] - EPS
    # A's first stage that B1's superstep held back names B1 as what it waited for: A2
    # (or A1, when a busy machine made worker A's own start, before its first fork, long
    # enough to be an operation of the flat graph: it then takes the first superstep).
    waiter = next(steps[key] for key in ("A1", "A2") if steps[key]["start"] >= b1["end"] - EPS)
    assert soon_after(waiter["start"], b1["end"], b1)
    assert b1["path"] in waiter["waited_for"]
    assert waiter["superstep"] == b1["superstep"] + 1
    wait = next(w for w in flat["waits"] if w["path"] == waiter["path"])
    assert (wait["for"], wait["for_keys"], wait["at"], wait["superstep"]) == (
        [b1["path"]], ["B1"], "superstep", waiter["superstep"])
    assert wait["wait"] >= 0.8 * (b1["end"] - b1["start"])  # about nine of B1's ten units

    local = by_key(report["schedules"]["local_barriers"])
    assert soon_after(local["A2"]["start"], local["A1"]["end"], local["B1"])
    assert local["A2"]["end"] < local["B1"]["end"]
    assert_close_totals(report)


async def test_the_seeds_ab_flow_batched_a2_waits_for_b1_in_every_schedule(
        auth: dict[str, str], demo_latency: Any) -> None:
    # The seed's remark: A1 and B1 in one run_steps() make A2 wait for B1 under local
    # barriers too.
    demo_latency(UNIT)
    run_id = await timing_run(auth, "batched")
    report = await get_ok(f"/api/runs/{run_id}/whatif", auth)
    bodies.WhatIf.model_validate(report)
    for name in SCHEDULES:
        ops = by_key(report["schedules"][name])
        assert set(ops) == {"A1", "A2", "B1", "B2"}, name
        assert soon_after(ops["A2"]["start"], ops["B1"]["end"], ops["B1"]), name
    assert_close_totals(report)


async def test_max_concurrency_one_runs_the_flat_graph_one_operation_at_a_time(
        auth: dict[str, str], demo_latency: Any) -> None:
    demo_latency(UNIT)
    run_id = await timing_run(auth, "pipelined")
    free = await get_ok(f"/api/runs/{run_id}/whatif", auth)
    one = await get_ok(f"/api/runs/{run_id}/whatif?max_concurrency=1", auth)
    bodies.WhatIf.model_validate(one)
    leaves = sorted((op["start"], op["end"]) for op in
                    by_key(one["schedules"]["supersteps"]).values() if "." in op["path"])
    assert len(leaves) == 4
    assert all(end <= after + 1e-6 for (_, end), (after, _) in pairwise(leaves))
    assert one["schedules"]["supersteps"]["total"] > free["schedules"]["supersteps"]["total"]
    # The limit is the flat graph's: the other schedules are the same.
    assert one["schedules"]["recorded"] == free["schedules"]["recorded"]
    assert one["schedules"]["local_barriers"] == free["schedules"]["local_barriers"]


async def test_two_timing_runs_compared(auth: dict[str, str], demo_latency: Any) -> None:
    demo_latency(UNIT)
    pipelined = await timing_run(auth, "pipelined")
    batched = await timing_run(auth, "batched")
    again = await timing_run(auth, "pipelined")

    answer = await get_ok(f"/api/runs/{pipelined}/compare/{batched}", auth)
    bodies.Comparison.model_validate(answer)
    assert (answer["a"]["run"], answer["b"]["run"], answer["same_flow"]) == (
        pipelined, batched, True)
    assert (answer["a"]["message"], answer["b"]["message"]) == ("pipelined", "batched")
    assert answer["missing"] == ["0", "0.0", "0.1:0", "1", "1.0", "1.1:0"]
    assert answer["added"] == ["0", "1", "1:0", "1:1"]
    assert answer["difference"]["tokens"] == 0
    assert answer["difference"]["duration"] == pytest.approx(
        answer["b"]["duration"] - answer["a"]["duration"], abs=1e-5)
    whatif = await get_ok(f"/api/runs/{pipelined}/whatif", auth)
    assert answer["timing"]["a"] == whatif["schedules"]["recorded"]
    assert by_key(answer["timing"]["b"]).keys() == {"A1", "A2", "B1", "B2"}

    same = await get_ok(f"/api/runs/{pipelined}/compare/{again}", auth)
    assert [(row["key"], row["match"]) for row in same["branches"]] == [
        ("A", "both"), ("A1", "both"), ("A2", "both"), ("B", "both"), ("B1", "both"),
        ("B2", "both")]
    assert same["added"] == same["missing"] == []
    # Same work, same answers: at most the durations moved.
    assert all(set(row["changed"]) <= {"duration"} for row in same["branches"])


async def test_the_answer_is_compare_runs_of_the_stored_events() -> None:
    user = await amake_user()
    auth = bearer(await atoken(user, scopes=("read", "run")))
    imported = await AsyncClient().post("/api/import", data=GOLDEN.read_bytes(),
                                        content_type=NDJSON, headers=auth)
    assert imported.status_code == 201, imported.content
    runs = runs_of(read_jsonl(GOLDEN))
    answer = await get_ok("/api/runs/ab_timing-1/compare/ab_timing-2", auth)
    assert answer == json.loads(json.dumps(compare_runs(runs["ab_timing-1"],
                                                        runs["ab_timing-2"])))


async def test_a_run_without_events_has_empty_schedules(auth: dict[str, str]) -> None:
    await Run.objects.acreate(id="queued-run", flow="TimingFlow")
    report = await get_ok("/api/runs/queued-run/whatif", auth)
    bodies.WhatIf.model_validate(report)
    assert (report["run"], report["flow"], report["complete"]) == (
        "queued-run", "TimingFlow", False)
    for name in SCHEDULES:
        assert report["schedules"][name]["total"] == 0.0
        assert by_key(report["schedules"][name]) == {}
    answer = await get_ok("/api/runs/queued-run/compare/queued-run", auth)
    assert answer["branches"] == [] and answer["a"]["duration"] is None
    assert (answer["a"]["run"], answer["b"]["flow"], answer["same_flow"]) == (
        "queued-run", "TimingFlow", True)


async def test_unknown_runs_are_not_found(auth: dict[str, str]) -> None:
    await Run.objects.acreate(id="known", flow="TimingFlow")
    client = AsyncClient()
    for path in ("/api/runs/nope/whatif", "/api/runs/nope/compare/known",
                 "/api/runs/known/compare/nope"):
        response = await client.get(path, headers=auth)
        assert_error(response, 404, "not_found")
        assert "nope" in response.json()["message"]


async def test_another_projects_run_is_not_found() -> None:
    await Project.objects.acreate(name="research")
    await Run.objects.acreate(id="theirs", flow="TimingFlow", project_id="research")
    await Run.objects.acreate(id="mine", flow="TimingFlow")
    auth = bearer(await atoken(await amake_user()))
    client = AsyncClient()
    for path in ("/api/runs/theirs/whatif", "/api/runs/mine/compare/theirs",
                 "/api/runs/theirs/compare/mine"):
        assert_error(await client.get(path, headers=auth), 404, "not_found")
    assert (await client.get("/api/runs/mine/compare/mine", headers=auth)).status_code == 200


async def test_credentials_and_scope_are_needed() -> None:
    await Run.objects.acreate(id="known", flow="TimingFlow")
    client = AsyncClient()
    runner = bearer(await atoken(await amake_user("runner"), scopes=("run",)))
    for path in ("/api/runs/known/whatif", "/api/runs/known/compare/known"):
        assert_error(await client.get(path), 401, "unauthenticated")
        assert_error(await client.get(path, headers=runner), 403, "scope")
        assert_error(await client.post(path, headers=runner), 405, "method_not_allowed")


@pytest.mark.parametrize(("value", "documented", "status"), [
    ("1", True, 200), ("12", True, 200), (str(2**31), True, 200),
    ("0", False, 400), ("-1", False, 400), ("", False, 400), ("x", False, 400),
    ("1.5", False, 400), (" 2", False, 400), ("2_0", False, 400), ("\u0662", False, 400),
    (str(2**31 + 1), False, 400),
])
async def test_max_concurrency_the_document_allows_is_answered_and_others_refused(
        auth: dict[str, str], value: str, documented: bool, status: int) -> None:
    await Run.objects.acreate(id="known", flow="TimingFlow")
    client = AsyncClient()
    document = (await client.get("/api/openapi.json")).json()
    (schema,) = [p["schema"] for p in
                 document["paths"]["/api/runs/{run_id}/whatif"]["get"]["parameters"]
                 if p["name"] == "max_concurrency"]
    try:
        number: Any = json.loads(value)
    except ValueError:
        number = value
    whole = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    fits = isinstance(number, int) and value == str(number) and bool(
        jsonschema_rs.validator_for(whole).is_valid(number))
    assert fits is documented
    response = await client.get("/api/runs/known/whatif", {"max_concurrency": value},
                                headers=auth)
    if status == 200:
        assert response.status_code == 200, response.content
    else:
        assert_error(response, 400, "bad_parameter")


async def test_the_document_describes_both_endpoints() -> None:
    document = (await AsyncClient().get("/api/openapi.json")).json()
    whatif = document["paths"]["/api/runs/{run_id}/whatif"]["get"]
    compare = document["paths"]["/api/runs/{run_id}/compare/{other_id}"]["get"]
    assert whatif["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WhatIf"}
    assert compare["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Comparison"}
    assert {"400", "401", "403", "404"} <= set(whatif["responses"]) & set(compare["responses"])
    assert [p["name"] for p in compare["parameters"]] == ["run_id", "other_id"]
    schemas = document["components"]["schemas"]
    assert set(schemas["WhatIfSchedules"]["required"]) == set(SCHEDULES)
    assert "for" in schemas["WhatIfWait"]["properties"]


def _seed_report() -> dict[str, Any]:
    from runtime.whatif import what_if
    from tests.whatif.timelines import seed_pipelined

    return what_if(seed_pipelined()).as_dict()


def test_an_answer_that_lost_a_promised_field_fails_on_the_server() -> None:
    from pydantic import ValidationError

    from picoflow_web.http.analysis import _checked_what_if

    whole = _checked_what_if(_seed_report())
    assert json.loads(whole.model_dump_json()) == json.loads(json.dumps(_seed_report()))
    for lose in (lambda r: r["schedules"]["supersteps"].pop("total"),
                 lambda r: r["schedules"]["recorded"]["operations"][0].pop("start"),
                 lambda r: r["schedules"]["local_barriers"]["waits"][0].pop("for"),
                 lambda r: r.pop("inferred")):
        report = _seed_report()
        lose(report)
        with pytest.raises(ValidationError):
            _checked_what_if(report)
