"""``GET /api/runs``: text search (message, reply, flow, branch keys), sort by any column,
a time range of start times and session id prefixes; a bad parameter is a 400 naming it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import AsyncClient

from picoflow_web.models import EventRecord, Run
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


async def made(run_id: str, *, minutes: int, lasted: int | None, events: int,
               **fields: Any) -> Run:
    run = await Run.objects.acreate(id=run_id, status="finished", event_count=events,
                                    duration=lasted, **fields)
    started = T0 + timedelta(minutes=minutes)
    finished = None if lasted is None else started + timedelta(seconds=lasted)
    await Run.objects.filter(id=run_id).aupdate(started_at=started, finished_at=finished)
    return run


@pytest.fixture
async def runs() -> None:
    await made("r-hotel", minutes=0, lasted=30, events=50, flow="HotelFlow",
               message="book a room", session_id="sess-abc-1",
               reply={"message": "Booked the Seaview for 3 nights"})
    await made("r-research", minutes=10, lasted=5, events=400, flow="ResearchFlow",
               message="research tides", session_id="sess-abc-2", reply=None)
    await made("r-fan", minutes=20, lasted=None, events=7, flow="FanOutFlow",
               message="go", session_id="other-9", reply={"message": "SoldOutError: car"})
    await EventRecord.objects.acreate(run_id="r-fan", seq=3, type="barrier.forked", path="",
                                      payload={"type": "barrier.forked", "requests": [
                                          {"key": "tidepool-north", "step": "Finder"}]})


async def listed(**params: str) -> Any:
    user = await User.objects.filter(username="reader").afirst() or await amake_user("reader")
    auth = bearer(await atoken(user))
    return await AsyncClient().get("/api/runs", params, headers=auth)


async def ids(**params: str) -> list[str]:
    response = await listed(**params)
    assert response.status_code == 200, response.content
    return [run["id"] for run in response.json()["runs"]]


@pytest.mark.usefixtures("runs")
@pytest.mark.parametrize(("text", "expected"), [
    ("ROOM", ["r-hotel"]),            # the message, any case
    ("seaview", ["r-hotel"]),         # the reply
    ("researchflow", ["r-research"]), # the flow
    ("soldouterror", ["r-fan"]),      # a failed turn's error in its reply
    ("tidepool-north", ["r-fan"]),    # a branch key of one of its forks
    ("nothing like it", []),
])
async def test_text_search_looks_in_message_reply_flow_and_branch_keys(
        text: str, expected: list[str]) -> None:
    assert await ids(q=text) == expected


@pytest.mark.usefixtures("runs")
async def test_the_list_sorts_by_any_column_both_ways() -> None:
    assert await ids() == ["r-fan", "r-research", "r-hotel"]  # newest first by default
    assert await ids(sort="started_at") == ["r-hotel", "r-research", "r-fan"]
    assert await ids(sort="-events") == ["r-research", "r-hotel", "r-fan"]
    assert await ids(sort="flow") == ["r-fan", "r-hotel", "r-research"]
    # An unfinished run has no duration: last, whichever way.
    assert await ids(sort="duration") == ["r-research", "r-hotel", "r-fan"]
    assert await ids(sort="-duration") == ["r-hotel", "r-research", "r-fan"]


@pytest.mark.usefixtures("runs")
async def test_a_time_range_and_a_session_prefix_narrow_the_list() -> None:
    assert await ids(since=(T0 + timedelta(minutes=5)).isoformat(),
                     until=(T0 + timedelta(minutes=15)).isoformat()) == ["r-research"]
    assert await ids(since="2026-11-30T09:15:00") == ["r-fan"]  # no zone: UTC
    assert await ids(session="sess-abc", sort="started_at") == ["r-hotel", "r-research"]
    assert await ids(session="sess-abc-2") == ["r-research"]


@pytest.mark.parametrize(("params", "named"), [
    ({"sort": "colour"}, "sort"),
    ({"since": "yesterday"}, "since"),
    ({"until": "2026-13-45T99:00"}, "until"),
    ({"since": "2026-12-02T00:00Z", "until": "2026-12-01T00:00Z"}, "since"),
    ({"q": "x" * 201}, "q"),
])
async def test_a_bad_parameter_is_refused_by_name(params: dict[str, str], named: str) -> None:
    response = await listed(**params)
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == "bad_parameter" and body["message"].startswith(named)


async def test_runs_with_rejected_branches_are_counted_from_their_events_and_listed() -> None:
    # AtomicFlow's batch has a branch that fails (its car is sold out): a real turn.
    from picoflow_web.execute import services
    from tests.webhelpers import wait_run_done

    failing = await wait_run_done((await services.run_start(
        flow="AtomicFlow", message="book the trip")).id)
    clean = await wait_run_done((await services.run_start(
        flow="ResearchFlow", message="research tides")).id)
    stored = await EventRecord.objects.filter(run_id=failing.id,
                                              type="branch.rejected").acount()
    # The list's duration is the turn's as its events tell it, as the run page shows it
    # (the greatest offset), not the time since it was queued.
    offsets = [p["offset"] async for p in EventRecord.objects.filter(
        run_id=failing.id).values_list("payload", flat=True)]
    assert failing.duration == max(offsets)
    assert stored >= 1 and failing.rejected_count == stored
    assert clean.rejected_count == 0
    summary = (await listed(rejected="1")).json()["runs"]
    assert [run["id"] for run in summary] == [failing.id]
    assert summary[0]["rejected_count"] == stored
    assert clean.id in await ids(rejected="0") and failing.id not in await ids(rejected="0")
