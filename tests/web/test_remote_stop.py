"""Stop on a remote run: the dashboard records the request; the process learns it from its
next ingest or heartbeat answer, or from ``GET /api/ingest/control`` (a long-poll); one
that never ends its turn is declared interrupted.

The events are a real turn of ``tests/remoteflow.py`` played in this process. Time is the
stored times (a request's ``at``, a run's ``last_seen_at``), set by the test; the long-poll
is watched through the gate of its subscription, never a sleep.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext
from django.contrib.auth.models import User
from django.test import AsyncClient, override_settings
from django.utils import timezone

from picoflow_web.execute import run_ends
from picoflow_web.models import Run
from picoflow_web.record import interruption, watchdog
from tests.runtime.helpers import until
from tests.web.test_ingest import body_of, ingest_token, post, recorded_turn
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

STOP = {"by": "ada", "reason": "stopped from the dashboard by ada"}


async def running_remote(run_id: str = "remote-1") -> tuple[AsyncClient, str, list[str]]:
    """A remote run with its first half ingested (running); the client, the ingest token
    and the turn's lines."""
    lines = await recorded_turn(run_id)
    token, client = await ingest_token(), AsyncClient()
    first = await post(client, token, body_of(lines[:len(lines) // 2]))
    assert first.json()["runs"][run_id]["status"] == "running"
    return client, token, lines


async def press_stop(run_id: str) -> Any:
    """Stop, as ada (an operator) presses it on the run's page."""
    user = await User.objects.filter(username="ada").afirst() or await amake_user("ada")
    return await AsyncClient().post(f"/api/runs/{run_id}/cancel",
                                    headers=bearer(await atoken(user)))


def without_at(position: dict[str, Any]) -> dict[str, Any]:
    stop = dict(position["stop"])
    assert isinstance(stop.pop("at"), str)
    return {**position, "stop": stop}


async def test_stop_on_a_remote_run_is_recorded_and_its_next_ingest_answer_carries_it(
        ) -> None:
    client, token, lines = await running_remote()
    half = len(lines) // 2
    answer = await press_stop("remote-1")
    assert answer.status_code == 202, answer.json()
    summary = answer.json()["run"]
    assert summary["status"] == "running"  # the process decides when the turn is over
    assert summary["cancel_requested"]["by"] == "ada"
    run = await Run.objects.aget(id="remote-1")
    assert run.cancel_requested is not None and run.cancel_requested["by"] == "ada"

    more = await post(client, token, body_of(lines[half:half + 1]))
    assert without_at(more.json()["runs"]["remote-1"]) == {
        "last_seq": half, "status": "running", "stop": STOP}
    beat = await post(client, token, '{"runs": ["remote-1"]}', "application/json",
                      "/api/ingest/heartbeat")
    assert without_at(beat.json()["runs"]["remote-1"]) == {
        "last_seq": half, "status": "running", "stop": STOP}
    # Asking twice is asking once: the first request (who, when) stays.
    again = await press_stop("remote-1")
    assert again.status_code == 202
    assert again.json()["run"]["cancel_requested"] == summary["cancel_requested"]


async def test_an_ended_remote_run_is_not_asked_and_stop_is_refused_with_run_ended() -> None:
    client, token, lines = await running_remote()
    assert (await press_stop("remote-1")).status_code == 202
    # This process's turn ended as it would have anyway (finished): no stop in the answer.
    rest = await post(client, token, body_of(lines[len(lines) // 2:]))
    assert rest.json()["runs"]["remote-1"] == {"last_seq": len(lines) - 1,
                                               "status": "finished"}
    refused = await press_stop("remote-1")
    assert refused.status_code == 409
    assert refused.json()["code"] == "run_ended"
    assert "has ended (finished)" in refused.json()["message"]


async def test_an_answer_without_a_stop_request_keeps_its_shape() -> None:
    client, token, lines = await running_remote()
    beat = await post(client, token, '{"runs": ["remote-1"]}', "application/json",
                      "/api/ingest/heartbeat")
    assert beat.json() == {"runs": {"remote-1": {"last_seq": len(lines) // 2 - 1,
                                                 "status": "running"}}}


async def _control(client: AsyncClient, token: str, query: str) -> Any:
    # A context of its own, as a server gives each request: the test client's requests
    # otherwise share one thread, which a held request would keep from the others.
    async with ThreadSensitiveContext():
        return await client.get(f"/api/ingest/control?{query}", headers=bearer(token))


async def _waiting(run_id: str) -> None:
    """Until a long-poll in this loop waits on ``run_id``'s summaries (its gate)."""
    def subscribed() -> bool:
        listener = run_ends._LISTENERS.get(asyncio.get_running_loop())
        return listener is not None and run_id in listener.watchers
    await until(subscribed, f"a long-poll waiting on {run_id}")


async def test_the_control_long_poll_answers_when_someone_presses_stop() -> None:
    client, token, lines = await running_remote()
    poll = asyncio.ensure_future(_control(client, token, "run=remote-1&run=unknown-9&wait=60"))
    await _waiting("remote-1")
    assert not poll.done()
    pressed = await press_stop("remote-1")

    assert pressed.status_code == 202, pressed.json()
    answer = await poll
    assert answer.status_code == 200, answer.json()
    assert without_at(answer.json()["runs"]["remote-1"]) == {
        "last_seq": len(lines) // 2 - 1, "status": "running", "stop": STOP}
    assert "unknown-9" not in answer.json()["runs"]
    # Asked again, it answers at once: the request stands until the turn ends.
    at_once = await _control(client, token, "run=remote-1")
    assert "stop" in at_once.json()["runs"]["remote-1"]


async def test_the_control_long_poll_answers_when_the_run_ends_and_after_its_wait() -> None:
    client, token, lines = await running_remote()
    quiet = await _control(client, token, "run=remote-1&wait=0")
    assert quiet.json() == {"runs": {"remote-1": {"last_seq": len(lines) // 2 - 1,
                                                  "status": "running"}}}
    poll = asyncio.ensure_future(_control(client, token, "run=remote-1&wait=60"))
    await _waiting("remote-1")
    await post(client, token, body_of(lines[len(lines) // 2:]))
    answer = await poll
    assert answer.json()["runs"]["remote-1"]["status"] == "finished"


@pytest.mark.parametrize(("query", "code"), [
    ("", "bad_parameter"), ("run=a%20b", "bad_run_id"), ("run=r&wait=61", "bad_parameter"),
    ("run=r&wait=soon", "bad_parameter"),
    # one run named 501 times is over the limit the document states (maxItems), repeats or not
    ("&".join(["run=r"] * 501), "bad_parameter")])
async def test_the_control_long_poll_refuses_bad_queries(query: str, code: str) -> None:
    answer = await _control(AsyncClient(), await ingest_token(), query)
    assert (answer.status_code, answer.json()["error_code"]) == (400, code)


async def test_the_control_long_poll_needs_the_ingest_scope() -> None:
    user = await amake_user("reader")
    answer = await _control(AsyncClient(), await atoken(user, scopes=("read",)), "run=r")
    assert (answer.status_code, answer.json()["code"]) == (403, "scope")


async def test_the_control_long_poll_is_no_sign_of_life() -> None:
    client, token, _ = await running_remote()
    await Run.objects.filter(id="remote-1").aupdate(
        last_seen_at=timezone.now() - timedelta(seconds=100))
    await _control(client, token, "run=remote-1&wait=0")
    run = await Run.objects.aget(id="remote-1")
    assert run.last_seen_at is not None
    assert (timezone.now() - run.last_seen_at).total_seconds() >= 100


async def _asked(run_id: str, seconds_ago: float) -> None:
    at = (timezone.now() - timedelta(seconds=seconds_ago)).isoformat()
    await Run.objects.filter(id=run_id).aupdate(cancel_requested={"by": "ada", "at": at},
                                                last_seen_at=timezone.now())


@override_settings(PICOFLOW_REMOTE_TIMEOUT=30.0)
async def test_a_process_that_never_obeys_a_stop_ends_interrupted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # This test decides when a round runs: the watchdog its first ingest request starts
    # runs one at once, in a thread, which under load can land after the request below is
    # dated 31 s back, interrupting the run before the test's own round counts it.
    monkeypatch.setattr(watchdog, "ensure", lambda: None)
    client, token, lines = await running_remote()
    await _asked("remote-1", 20)  # heard from just now, asked 20 s ago: still its turn
    assert await interruption.sweep() == 0
    assert (await Run.objects.aget(id="remote-1")).status == "running"
    await _asked("remote-1", 31)
    assert await interruption.sweep() == 1
    run = await Run.objects.aget(id="remote-1")
    assert run.status == "interrupted"
    assert run.interruption is not None
    assert run.interruption["reason"].startswith("Stop requested by ada 31 s ago: the "
                                                 "process running it did not end the turn")
    late = await post(client, token, body_of(lines[len(lines) // 2:]))
    assert (late.status_code, late.json()["code"]) == (409, "run_interrupted")
    refused = await press_stop("remote-1")
    assert (refused.status_code, refused.json()["code"]) == (409, "run_ended")


async def test_the_control_long_poll_answers_at_once_for_runs_it_does_not_know() -> None:
    # Its first events are still on the way: the process asks again once they are stored.
    answer = await _control(AsyncClient(), await ingest_token(), "run=not-yet-1&wait=60")
    assert answer.json() == {"runs": {}}
