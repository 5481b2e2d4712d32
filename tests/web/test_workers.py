"""Runs executed by workers: stopping them (``POST /api/runs/<id>/cancel``), claiming a
queued run once, lease expiry, and a task body that fails before the turn starts.

Queued runs execute on the test's loop (``tests/inline_tasks.py``); where a test needs a
run no worker touches, it makes the row itself as ``services.run_start`` does, without
queueing its task, and calls the task body (``execution.run_in_worker``) when it wants.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any
from unittest.mock import ANY

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError, transaction
from django.middleware.csrf import CSRF_ALLOWED_CHARS
from django.test import AsyncClient
from django.utils import timezone
from django.utils.crypto import get_random_string

from picoflow_web.execute import execution, leases, services
from picoflow_web.models import ApiToken, EventRecord, Run
from picoflow_web.record import interruption, watchdog
from tests.webhelpers import (
    amake_user,
    assert_gap_free,
    atoken,
    bearer,
    run_to_the_end,
    stored_count,
    wait_run_done,
    wait_until,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]


SLOW_FANOUT = {"branches": 400, "rate": 200, "concurrency": 20}
"""About two seconds of branches, twenty at a time: stopped long before the end."""


def cancel_path(run_id: str) -> str:
    return f"/api/runs/{run_id}/cancel"


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error" and body["code"] == code, body
    assert body["message"], body
    return body


async def queued_run(flow: str = "HotelFlow", message: str = "Hi",
                     **fields: Any) -> Run:
    """A run as ``run_start`` stores it, with no task queued for it."""
    values: dict[str, Any] = {"status": Run.Status.QUEUED, "origin": {"kind": "worker"},
                              **fields}
    return await Run.objects.acreate(id=uuid.uuid4().hex, flow=flow, message=message,
                                     session_id="", config=None, **values)


async def stored_payloads(run_id: str) -> list[dict[str, Any]]:
    return [p async for p in EventRecord.objects.filter(run_id=run_id).order_by("seq")
            .values_list("payload", flat=True)]


async def browser_with_csrf(user: Any) -> tuple[AsyncClient, str]:
    """A logged-in browser that enforces CSRF, with its CSRF cookie; and the token."""
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(user)
    secret = get_random_string(32, CSRF_ALLOWED_CHARS)
    client.cookies["csrftoken"] = secret
    return client, secret


# -- stopping a running run -----------------------------------------------------------------


async def test_stop_a_running_fanout_from_a_browser_session() -> None:
    user = await amake_user("ada")
    client, secret = await browser_with_csrf(user)

    # Without the CSRF token the browser's request is refused and nothing is asked.
    run = await services.run_start(flow="FanOutFlow", message="go", config=SLOW_FANOUT,
                                   user=user)
    try:
        async def running_with_events() -> bool:
            status = await Run.objects.filter(id=run.id).values_list(
                "status", flat=True).afirst()
            started = await EventRecord.objects.filter(
                run_id=run.id, type="branch.started").acount()
            return status == Run.Status.RUNNING and started >= 5

        await wait_until(running_with_events, what="the fan-out to be running")
        refused = await client.post(cancel_path(run.id))
        assert_error(refused, 403, "csrf")
        assert (await Run.objects.aget(id=run.id)).cancel_requested is None

        answer = await client.post(cancel_path(run.id), headers={"X-CSRFToken": secret})
        assert answer.status_code == 202, answer.content
        summary = answer.json()["run"]
        assert summary["id"] == run.id
        assert summary["cancel_requested"]["by"] == "ada"
    finally:
        ended = await wait_run_done(run.id)

    assert ended.status == Run.Status.CANCELLED
    assert ended.reply["error_code"] == services.TURN_CANCELLED
    assert ended.reply["success"] is False
    assert ended.cancel_requested["by"] == "ada"
    events = await stored_payloads(run.id)
    assert_gap_free([e["seq"] for e in events])
    assert ended.event_count == len(events)
    types = [e["type"] for e in events]
    assert types[0] == "turn.started"
    assert types[-1] == "turn.cancelled"
    assert events[-1]["requested_by"] == "ada"
    assert "turn.finished" not in types and "turn.failed" not in types
    assert "cancel.requested" in types
    assert types.index("cancel.requested") < len(types) - 1
    # Stopped early: branches queued behind the concurrency limit never started.
    assert types.count("branch.started") < SLOW_FANOUT["branches"]

    # The session takes its next turn.
    after, reply = await run_to_the_end(flow="FanOutFlow", message="again",
                                              session_id=ended.session_id)
    assert after.session_id == ended.session_id
    assert after.status == Run.Status.FINISHED, reply.message
    assert reply.success, reply.message


async def test_stop_a_running_run_with_a_token_of_scope_run() -> None:
    user = await amake_user("bob")
    token = await atoken(user)
    run = await services.run_start(flow="FanOutFlow", message="go", config=SLOW_FANOUT)
    try:
        async def started() -> bool:
            return await EventRecord.objects.filter(
                run_id=run.id, type="branch.started").aexists()

        await wait_until(started, what="the fan-out's first branch")
        answer = await AsyncClient(enforce_csrf_checks=True).post(cancel_path(run.id),
                                                                   headers=bearer(token))
        assert answer.status_code == 202, answer.content
        assert answer.json()["run"]["cancel_requested"]["by"] == "bob"
    finally:
        ended = await wait_run_done(run.id)
    assert ended.status == Run.Status.CANCELLED
    events = await stored_payloads(run.id)
    assert_gap_free([e["seq"] for e in events])
    assert events[-1]["type"] == "turn.cancelled"
    assert events[-1]["requested_by"] == "bob"


# -- stopping a queued run ------------------------------------------------------------------


async def test_a_queued_run_stopped_before_a_worker_took_it_is_never_executed() -> None:
    user = await amake_user("carol")
    run = await queued_run()
    answer = await AsyncClient().post(cancel_path(run.id), headers=bearer(await atoken(user)))
    assert answer.status_code == 202, answer.content
    summary = answer.json()["run"]
    assert summary["status"] == Run.Status.CANCELLED
    assert summary["cancel_requested"]["by"] == "carol"
    assert summary["reply"]["error_code"] == services.TURN_CANCELLED
    assert summary["finished_at"] is not None

    # The worker that takes its task later leaves it alone.
    assert await execution.run_in_worker(run.id, "w") == "skipped"
    after = await Run.objects.aget(id=run.id)
    assert after.status == Run.Status.CANCELLED
    assert after.worker == ""
    assert await stored_count(run.id) == 0


# -- refusals ---------------------------------------------------------------------------------


async def test_cancel_refusals_use_the_json_error_shape() -> None:
    user = await amake_user("dave")
    auth = bearer(await atoken(user))
    client = AsyncClient()

    assert_error(await client.post(cancel_path("no-such-run"), headers=auth), 404, "not_found")

    finished, _ = await run_to_the_end(flow="HotelFlow", message="Hi")
    assert finished.status == Run.Status.FINISHED
    assert_error(await client.post(cancel_path(finished.id), headers=auth), 409, "run_ended")
    assert (await Run.objects.aget(id=finished.id)).status == Run.Status.FINISHED

    # A traced process exports spans only: nothing would carry a stop request to it.
    traced = await Run.objects.acreate(
        id="traced-x", flow="HotelFlow", status=Run.Status.RUNNING,
        origin={"kind": "remote", "host": "laptop", "pid": 7, "source": "OpenTelemetry"})
    assert_error(await client.post(cancel_path(traced.id), headers=auth), 409,
                 "not_cancellable")
    traced = await Run.objects.aget(id=traced.id)
    assert (traced.status, traced.cancel_requested) == (Run.Status.RUNNING, None)

    queued = await queued_run()
    _, read_only = await sync_to_async(ApiToken.issue)(user, "reader", ("read",))
    assert_error(await client.post(cancel_path(queued.id), headers=bearer(read_only)), 403,
                 "scope")
    assert (await client.get(cancel_path(queued.id), headers=auth)).status_code == 405
    assert (await Run.objects.aget(id=queued.id)).status == Run.Status.QUEUED

    assert_error(await AsyncClient().post(cancel_path(queued.id)), 401, "unauthenticated")


async def test_asking_twice_keeps_the_first_request() -> None:
    first_user, second_user = await amake_user("erin"), await amake_user("frank")
    # Running in a worker that has not looked for stop requests yet.
    run = await queued_run(status=Run.Status.RUNNING, worker="w-busy",
                           lease_expires_at=timezone.now() + timedelta(hours=1))
    client = AsyncClient()
    first = await client.post(cancel_path(run.id), headers=bearer(await atoken(first_user)))
    second = await client.post(cancel_path(run.id), headers=bearer(await atoken(second_user)))
    assert (first.status_code, second.status_code) == (202, 202), (first.content,
                                                                   second.content)
    asked = first.json()["run"]["cancel_requested"]
    assert asked["by"] == "erin"
    assert second.json()["run"]["cancel_requested"] == asked
    stored = await Run.objects.aget(id=run.id)
    assert stored.cancel_requested == asked
    assert stored.status == Run.Status.RUNNING  # its worker stops it, not the request


# -- claimed once -----------------------------------------------------------------------------


async def test_two_workers_taking_one_run_execute_it_once() -> None:
    run = await queued_run()
    results = await asyncio.gather(execution.run_in_worker(run.id, "a"),
                                   execution.run_in_worker(run.id, "b"))
    assert sorted(results) == ["finished", "skipped"], results
    winner = "a" if results[0] == "finished" else "b"
    ended = await Run.objects.aget(id=run.id)
    assert ended.status == Run.Status.FINISHED
    assert ended.worker == winner
    assert ended.lease_expires_at is None
    events = await stored_payloads(run.id)
    seqs = [e["seq"] for e in events]
    assert_gap_free(seqs)
    assert ended.event_count == len(events)
    types = [e["type"] for e in events]
    assert types.count("turn.started") == 1 and types.count("turn.finished") == 1
    assert types[-1] == "turn.finished"


# -- lease expiry -----------------------------------------------------------------------------

SAVED_REVISION = 7


async def claimed_with_events(worker: str) -> tuple[Run, list[dict[str, Any]]]:
    """A run claimed by ``worker`` that stored a few events, a session save among them."""
    run = await queued_run()
    claimed = await sync_to_async(leases.claim)(run.id, worker)
    assert claimed is not None and claimed.status == Run.Status.RUNNING
    envelope = {"v": 1, "run_id": run.id, "session_id": "s-lease", "path": ""}
    payloads = [
        {**envelope, "seq": 0, "time": 1.0e9, "offset": 0.0, "type": "turn.started",
         "flow": "HotelFlow", "message": "Hi"},
        {**envelope, "seq": 1, "time": 1.0e9 + 0.1, "offset": 0.1, "type": "session.saved",
         "revision": SAVED_REVISION, "reason": "crossing"},
        {**envelope, "seq": 2, "time": 1.0e9 + 0.2, "offset": 0.2, "type": "step.entered",
         "step": "Greeter", "level": 1, "how": "goto"},
    ]
    await EventRecord.objects.abulk_create([
        EventRecord(run_id=run.id, seq=p["seq"], type=p["type"], path="", payload=p)
        for p in payloads])
    await Run.objects.filter(id=run.id).aupdate(event_count=len(payloads),
                                                session_id="s-lease")
    return claimed, payloads


async def lapse(run_id: str) -> None:
    """The worker stopped renewing: its lease ended a minute ago."""
    await Run.objects.filter(id=run_id).aupdate(
        lease_expires_at=timezone.now() - timedelta(minutes=1))


def lapse_and_expire(run_id: str) -> Any:
    """:func:`lapse` and a round of lease checks in one transaction: a lease keeper still
    running (a stuck worker's) cannot renew the lease in between; its next renewal waits for
    the write lock and then finds the run interrupted."""
    with transaction.atomic():
        Run.objects.filter(id=run_id).update(
            lease_expires_at=timezone.now() - timedelta(minutes=1))
        return interruption.expire_leases()


async def test_an_expired_lease_interrupts_the_run_once_and_for_good() -> None:
    dead, payloads = await claimed_with_events("w-dead")
    alive, _ = await claimed_with_events("w-alive")
    await lapse(dead.id)

    stored = await sync_to_async(interruption.expire_leases)()
    assert list(stored.events) == [dead.id]
    assert [s["id"] for s in stored.summaries] == [dead.id]

    run = await Run.objects.aget(id=dead.id)
    assert run.status == Run.Status.INTERRUPTED
    assert run.finished_at is not None
    assert run.interruption["worker"] == "w-dead"
    assert run.interruption["revision"] == SAVED_REVISION
    events = await stored_payloads(dead.id)
    assert_gap_free([e["seq"] for e in events])
    last = events[-1]
    assert last["type"] == "run.interrupted"
    assert last["seq"] == payloads[-1]["seq"] + 1
    assert last["worker"] == "w-dead"
    assert last["revision"] == SAVED_REVISION
    assert stored.events[dead.id] == [(last["seq"], ANY)]  # what is broadcast: the text
    assert json.loads(stored.events[dead.id][0][1]) == last
    assert run.event_count == len(events)

    # Once: a second round finds nothing, and stores nothing more.
    again = await sync_to_async(interruption.expire_leases)()
    assert not again.events and not again.summaries
    assert await stored_count(dead.id) == len(events)

    # The lost worker's late reply does not bring it back.
    await services.run_finish(dead.id, {
        "success": True, "completed": True, "session_id": "s-lease", "message": "late",
        "content_type": "text/plain", "error_code": None})
    late = await Run.objects.aget(id=dead.id)
    assert late.status == Run.Status.INTERRUPTED
    assert late.reply is None

    # A run whose worker still renews its lease is left alone.
    kept = await Run.objects.aget(id=alive.id)
    assert (kept.status, kept.worker, kept.interruption) == (Run.Status.RUNNING, "w-alive",
                                                             None)
    assert (await stored_payloads(alive.id))[-1]["type"] == "step.entered"


async def test_the_watchdog_sweep_counts_expired_leases() -> None:
    dead, _ = await claimed_with_events("w-gone")
    alive, _ = await claimed_with_events("w-here")
    assert await watchdog.sweep() == 0
    await lapse(dead.id)
    assert await watchdog.sweep() == 1
    assert (await Run.objects.aget(id=dead.id)).status == Run.Status.INTERRUPTED
    assert (await Run.objects.aget(id=alive.id)).status == Run.Status.RUNNING
    assert await watchdog.sweep() == 0


async def test_a_run_lost_mid_turn_stores_nothing_after_its_interruption() -> None:
    """The worker still plays the turn after its lease lapsed (stuck, not dead): its later
    events are not stored after ``run.interrupted``, and the run stays interrupted."""
    run = await services.run_start(flow="FanOutFlow", message="go", config=SLOW_FANOUT)
    try:
        async def started() -> bool:
            return await EventRecord.objects.filter(
                run_id=run.id, type="branch.started").acount() >= 5

        await wait_until(started, what="the fan-out's first branches")
        stored = await sync_to_async(lapse_and_expire)(run.id)
        assert list(stored.events) == [run.id]
        seq, text = stored.events[run.id][0]
        interrupted = json.loads(text)
        assert interrupted["seq"] == seq
    finally:
        ended = await wait_run_done(run.id)
    assert ended.status == Run.Status.INTERRUPTED
    assert ended.reply is None
    events = await stored_payloads(run.id)
    assert_gap_free([e["seq"] for e in events])
    assert events[-1] == interrupted
    assert interrupted["worker"] == "inline"
    assert ended.event_count == len(events)
    types = [e["type"] for e in events]
    assert "turn.finished" not in types and "turn.cancelled" not in types


async def test_a_run_lost_before_its_first_event_is_interrupted_at_seq_0() -> None:
    run = await queued_run()
    assert await sync_to_async(leases.claim)(run.id, "w-early") is not None
    await lapse(run.id)
    stored = await sync_to_async(interruption.expire_leases)()
    assert list(stored.events) == [run.id]
    events = await stored_payloads(run.id)
    assert [(e["seq"], e["type"], e["worker"]) for e in events] == [
        (0, "run.interrupted", "w-early")]
    assert events[0].get("revision") is None
    assert (await Run.objects.aget(id=run.id)).status == Run.Status.INTERRUPTED


# -- a worker that fails before the turn ------------------------------------------------------


async def test_a_task_body_that_raises_fails_the_run_instead_of_leaving_it_queued(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_claim(run_id: str, worker: str) -> Run | None:
        raise OperationalError("database is locked")

    monkeypatch.setattr(leases, "claim", broken_claim)
    run = await services.run_start(flow="HotelFlow", message="Hi")
    ended = await wait_run_done(run.id)
    assert ended.status == Run.Status.FAILED
    assert ended.reply["error_code"] == "worker_error"
    assert "database is locked" in ended.reply["message"]
    assert ended.finished_at is not None
    assert await stored_count(run.id) == 0
    reply = services.reply_of(ended)
    assert reply.error_code == "worker_error" and not reply.success
    assert json.loads(json.dumps(ended.summary()))["status"] == "failed"
