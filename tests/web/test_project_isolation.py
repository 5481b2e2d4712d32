"""Ids of another project answer as unknown ids do, at every door that takes an id.

Two projects, P and Q. A client of P names Q's run and session ids on ``/api/ingest``,
``/api/import`` and ``/ai/run`` (``PicoFlow-Run-Id``, ``PicoFlow-Coordinator-Run``, the
session). Where an unknown id is refused, Q's id gets the same refusal, word for word but
the id; where an unknown id would be created, Q's is a 404 (``not_found``), never a 409
saying it exists; and nothing of the request is stored.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient

from picoflow_web.execute import services
from picoflow_web.models import EventRecord, Project, Run, StoredSession
from runtime import FlowEngine
from runtime.events import MemorySink, dump_event
from tests.golden.goldens import BY_NAME
from tests.remoteflow import TeamSurvey
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

NDJSON = "application/x-ndjson"


async def turn_lines(run_id: str, session_id: str | None = None) -> list[str]:
    """The event lines of one real remote turn (what a process's sink would send)."""
    sink = MemorySink()
    reply = await FlowEngine(flows=[TeamSurvey], sinks=[sink]).run(
        "TeamSurvey", "survey", session_id, config={"teams": 2}, run_id=run_id)
    assert reply.success, reply.message
    return [dump_event(event) for event in sink.events]


def body(*lines: str) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


async def ingest(token: str, data: bytes) -> Any:
    return await AsyncClient().post("/api/ingest", data=data, content_type=NDJSON,
                                    headers=bearer(token))


async def import_file(token: str, data: bytes, query: str = "") -> Any:
    return await AsyncClient().post(f"/api/import{query}", data=data, content_type=NDJSON,
                                    headers=bearer(token))


async def ai_run(token: str, message: str = "Hi", **headers: str) -> Any:
    return await AsyncClient().post(
        "/ai/run", data=json.dumps({"flowName": "HotelFlow", "message": message}),
        content_type="application/json", headers={**bearer(token), **headers})


def refusal(response: Any, *, unknown: str | None = None, known: str | None = None
            ) -> tuple[int, dict[str, Any]]:
    """The status and JSON of a refusal; with ``unknown`` and ``known``, the id ``unknown``
    spelt as ``known`` in it (so two refusals compare but for the id they name)."""
    text = response.content.decode()
    if unknown is not None and known is not None:
        text = text.replace(unknown, known)
    return response.status_code, json.loads(text)


async def snapshot() -> tuple[Any, ...]:
    runs = [r async for r in Run.objects.order_by("id").values_list(
        "id", "project_id", "status", "last_seq", "session_id")]
    sessions = [s async for s in StoredSession.objects.order_by("id").values_list(
        "id", "project_id", "revision")]
    return runs, await EventRecord.objects.acount(), sessions


@pytest.fixture
async def tokens() -> dict[str, str]:
    for name in ("p", "q"):
        await Project.objects.aget_or_create(name=name)
    pam = await amake_user("pam", project="p", role="operator")
    quinn = await amake_user("quinn", project="q", role="operator")
    return {"p_ingest": await atoken(pam, "ingest", ("ingest",), project="p"),
            "q_ingest": await atoken(quinn, "ingest", ("ingest",), project="q"),
            "p_run": await atoken(pam, "run", ("read", "run"), project="p"),
            "q_run": await atoken(quinn, "run", ("read", "run"), project="q")}


# -- /api/ingest ----------------------------------------------------------------------------


async def test_ingest_answers_another_projects_run_as_an_unknown_one(
        tokens: dict[str, str]) -> None:
    theirs = await turn_lines("q-run")
    assert (await ingest(tokens["q_ingest"], body(*theirs[:3]))).status_code == 200
    before = await snapshot()
    # A batch that continues the run: refused exactly as for a run nobody has.
    unknown = await turn_lines("zz-run")
    foreign = await ingest(tokens["p_ingest"], body(*theirs[3:]))
    nobodys = await ingest(tokens["p_ingest"], body(*unknown[3:]))
    assert refusal(foreign) == refusal(nobodys, unknown="zz-run", known="q-run")
    assert foreign.json()["code"] != "run_id_taken"
    # A first batch, which would start a run of an unknown id: not found, not "taken".
    first = await ingest(tokens["p_ingest"], body(*await turn_lines("q-run", "p-session")))
    assert (first.status_code, first.json()["code"]) == (404, "not_found"), first.content
    assert (first.json()["run_id"], first.json()["line"]) == ("q-run", 1)
    # Beside a run refused for its own fault, it changes nothing of the answer.
    for bad_first in (theirs, await turn_lines("yy-run")):
        mixed = await ingest(tokens["p_ingest"], body(*bad_first, *unknown[3:]))
        assert mixed.json()["code"] == "seq_gap" and mixed.json()["run_id"] == "zz-run"
    assert await snapshot() == before
    # Q's own token goes on with it.
    assert (await ingest(tokens["q_ingest"], body(*theirs[3:]))).status_code == 200


async def test_a_remote_run_names_only_sessions_of_its_project(
        tokens: dict[str, str]) -> None:
    done = await wait_run_done((await services.run_start(
        flow="HotelFlow", message="Hi", project="q")).id)
    live = await turn_lines("q-live", session_id="q-live-session")
    assert (await ingest(tokens["q_ingest"], body(*live[:3]))).status_code == 200
    before = await snapshot()
    for session in (done.session_id, "q-live-session"):
        named = await ingest(tokens["p_ingest"], body(*await turn_lines("p-run", session)))
        assert (named.status_code, named.json().get("code")) == (404, "not_found"), named.content
        assert (named.json()["session_id"], named.json()["line"]) == (session, 1)
        assert "p-run" not in named.content.decode()
    assert await snapshot() == before
    # A session id nobody uses is the run's own.
    own = await ingest(tokens["p_ingest"], body(*await turn_lines("p-run", "p-session")))
    assert own.status_code == 200, own.content
    assert (await Run.objects.aget(id="p-run")).session_id == "p-session"
    assert (await StoredSession.objects.aget(id="p-session")).project_id == "p"


# -- /api/import ----------------------------------------------------------------------------

HOTEL = BY_NAME["hotel"].jsonl_path.read_bytes()
FAILED = BY_NAME["turn_failure"].jsonl_path.read_bytes()


def first_run_of(data: bytes) -> str:
    return str(json.loads(data.splitlines()[0])["run_id"])


async def test_import_answers_another_projects_ids_as_unknown_ones(
        tokens: dict[str, str]) -> None:
    assert (await import_file(tokens["q_run"], HOTEL)).status_code == 201
    assert (await import_file(tokens["p_run"], FAILED)).status_code == 201
    before = await snapshot()
    hotel, session_id = first_run_of(HOTEL), json.loads(HOTEL.splitlines()[0])["session_id"]
    own_session = HOTEL.replace(f'"session_id":"{session_id}"'.encode(),
                                b'"session_id":"p-session"')
    taken = await import_file(tokens["p_run"], own_session)
    assert (taken.status_code, taken.json()["code"]) == (404, "not_found"), taken.content
    assert (taken.json()["run_id"], taken.json()["line"]) == (hotel, 1)
    assert "copy" in taken.json()["message"] and "exists" not in taken.json()["message"]
    # Q's session, with its runs or with new run ids.
    for data in (HOTEL, HOTEL.replace(b'"run_id":"hotel-', b'"run_id":"mine-')):
        session = await import_file(tokens["p_run"], data)
        assert (session.status_code, session.json()["code"]) == (404, "not_found")
        assert (session.json()["session_id"], session.json()["line"]) == (session_id, 1)
    # A file of Q's run and P's own: refused for P's own run, as if Q's were unknown.
    mixed = await import_file(tokens["p_run"], HOTEL.rstrip(b"\n") + b"\n" + FAILED)
    assert (mixed.status_code, mixed.json()["code"]) == (409, "run_exists"), mixed.content
    assert mixed.json()["run_id"] == first_run_of(FAILED)
    assert await snapshot() == before
    copied = await import_file(tokens["p_run"], HOTEL, "?copy=1")
    assert copied.status_code == 201, copied.content


# -- /ai/run --------------------------------------------------------------------------------


async def test_ai_run_with_another_projects_run_id_is_not_found(tokens: dict[str, str]) -> None:
    theirs = await wait_run_done((await services.run_start(
        flow="HotelFlow", message="Hi", project="q")).id)
    mine = await wait_run_done((await services.run_start(
        flow="HotelFlow", message="Hi", project="p")).id)
    before = await snapshot()
    foreign = await ai_run(tokens["p_run"], **{"PicoFlow-Run-Id": theirs.id})
    assert (foreign.status_code, foreign.json()["code"]) == (404, "not_found"), foreign.content
    assert "exists" not in foreign.json()["message"]
    again = await ai_run(tokens["p_run"], **{"PicoFlow-Run-Id": mine.id})
    assert (again.status_code, again.json()["code"]) == (409, "run_exists")
    assert await snapshot() == before


async def test_a_child_names_only_a_coordinator_of_its_project(tokens: dict[str, str]) -> None:
    theirs = await wait_run_done((await services.run_start(
        flow="HotelFlow", message="Hi", project="q")).id)
    mine = await wait_run_done((await services.run_start(
        flow="HotelFlow", message="Hi", project="p")).id)
    before = await snapshot()

    def child(coordinator: str) -> dict[str, str]:
        return {"PicoFlow-Run-Id": f"{coordinator}-c0-0", "PicoFlow-Coordinator-Run": coordinator,
                "PicoFlow-Coordinator-Group": "c0", "PicoFlow-Coordinator-Batch": "0",
                "PicoFlow-Coordinator-Item": "0"}

    foreign = await ai_run(tokens["p_run"], **child(theirs.id))
    nobodys = await ai_run(tokens["p_run"], **child("nobody-1"))
    assert foreign.status_code == 404, foreign.content
    assert refusal(foreign) == refusal(nobodys, unknown="nobody-1", known=theirs.id)
    assert await snapshot() == before
    own = await ai_run(tokens["p_run"], **child(mine.id))
    assert own.status_code == 200, own.content
    run = await Run.objects.aget(id=f"{mine.id}-c0-0")
    assert (run.project_id, run.origin["coordinator"]["run_id"]) == ("p", mine.id)
