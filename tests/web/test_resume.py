"""Resuming a run (``POST /api/runs/<id>/resume``): a run of a ledgered flow that was
interrupted (its worker's lease lapsed, the watchdog's path) or stopped is resumed by a new
run whose worker calls ``FlowEngine.resume``; the branches the ledger holds are reused, and
their models are not called again. And every refusal.

The flow is ``tests/flows_pkg/ledgered.py``: six model-calling surveyors in one ledgered
barrier, whose sites from 3 on wait for the test's gate (a file) before their model
answers, and whose model writes every call to a file. Runs execute on the test's loop.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.test import AsyncClient
from django.utils import timezone

from picoflow_web.execute import execution, services
from picoflow_web.execute.engine import get_engine
from picoflow_web.models import ApiToken, EventRecord, LedgerEntry, LedgerTurn, Run
from picoflow_web.record import interruption
from tests.flows_pkg.ledgered import USAGE, calls
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

FLOW = "SiteSurveyFlow"
BRANCHES, HELD_FROM = 6, 3


@pytest.fixture(autouse=True)
def survey_flow(monkeypatch: pytest.MonkeyPatch, demo_latency: Any) -> Iterator[None]:
    monkeypatch.setenv("PICOFLOW_FLOWS", "tests.flows_pkg.ledgered:SiteSurveyFlow")
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


def resume_path(run_id: str) -> str:
    return f"/api/runs/{run_id}/resume"


def assert_error(response: Any, status: int, error_code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error" and body["error_code"] == error_code, body
    assert body["message"], body
    return body


async def payloads(run_id: str) -> list[dict[str, Any]]:
    return [p async for p in EventRecord.objects.filter(run_id=run_id).order_by("seq")
            .values_list("payload", flat=True)]


async def held_run(folder: Path, session_id: str) -> Run:
    """A run of the survey whose first sites are ledgered and whose others wait."""
    user = await amake_user("starter")
    run = await services.run_start(
        flow=FLOW, message="survey", session_id=session_id, user=user,
        config={"folder": str(folder), "branches": BRANCHES, "hold_from": HELD_FROM})
    await wait_for_ledger(session_id, HELD_FROM)
    return run


async def wait_for_ledger(session_id: str, entries: int) -> None:
    async def ledgered() -> bool:
        return await LedgerEntry.objects.filter(session_id=session_id).acount() >= entries

    await wait_until(ledgered, timeout=30, what=f"{entries} ledger entries")


def lapse_and_expire(run_id: str) -> Any:
    """The worker's lease lapses and the watchdog's round declares the run interrupted."""
    with transaction.atomic():
        Run.objects.filter(id=run_id).update(
            lease_expires_at=timezone.now() - timedelta(minutes=1))
        return interruption.expire_leases()


async def interrupt(run: Run, auth: dict[str, str]) -> Run:
    await sync_to_async(lapse_and_expire)(run.id)
    return await wait_run_done(run.id, timeout=30)


async def stop(run: Run, auth: dict[str, str]) -> Run:
    answer = await AsyncClient().post(f"/api/runs/{run.id}/cancel", headers=auth)
    assert answer.status_code == 202, answer.content
    return await wait_run_done(run.id, timeout=30)


async def detail(run_id: str, auth: dict[str, str]) -> dict[str, Any]:
    answer = await AsyncClient().get(f"/api/runs/{run_id}", headers=auth)
    assert answer.status_code == 200, answer.content
    return dict(answer.json()["run"])


async def resume(run_id: str, auth: dict[str, str]) -> dict[str, Any]:
    answer = await AsyncClient().post(resume_path(run_id), headers=auth)
    assert answer.status_code == 202, answer.content
    return dict(answer.json()["run"])


@pytest.mark.parametrize(("ended_by", "status"), [(interrupt, Run.Status.INTERRUPTED),
                                                  (stop, Run.Status.CANCELLED)])
async def test_a_resumed_run_reuses_the_ledgered_branches_without_calling_their_models(
        tmp_path: Path, ended_by: Any, status: str) -> None:
    auth = bearer(await atoken(await amake_user("ada")))
    session = f"survey-{status}"
    run = await held_run(tmp_path, session)
    ended = await ended_by(run, auth)
    assert ended.status == status
    old_events = await payloads(run.id)
    fulfilled = {e["key"]: e["seq"] for e in old_events if e["type"] == "branch.fulfilled"}
    assert sorted(fulfilled) == [f"site-{i}" for i in range(HELD_FROM)]

    shown = await detail(run.id, auth)
    assert shown["resumable"] == {"entries": HELD_FROM,
                                  "tokens": HELD_FROM * USAGE.total_tokens}
    assert shown["resumed_by"] is None
    before = Counter(calls(tmp_path))

    (tmp_path / "open").touch()
    queued = await resume(run.id, auth)
    assert queued["status"] == Run.Status.QUEUED
    assert queued["origin"]["resumes"] == run.id
    assert (queued["flow"], queued["message"], queued["session_id"], queued["project"]) == (
        FLOW, "survey", session, "default")
    stored = await Run.objects.select_related("started_by").aget(id=queued["id"])
    assert stored.config == run.config and stored.started_by.username == "ada"

    done = await wait_run_done(queued["id"], timeout=30)
    assert done.status == Run.Status.FINISHED, done.reply
    assert done.reply["message"] == f"{BRANCHES} sites surveyed"
    events = await payloads(done.id)
    assert events[0]["type"] == "turn.started" and events[0]["resumes"] == run.id
    reused = [e for e in events if e["type"] == "branch.reused"]
    assert {e["key"]: (e["original_run_id"], e["original_seq"]) for e in reused} == {
        key: (run.id, seq) for key, seq in fulfilled.items()}
    assert all(e["total_tokens"] == USAGE.total_tokens for e in reused)
    started = sorted(e["key"] for e in events if e["type"] == "branch.started")
    assert started == [f"site-{i}" for i in range(HELD_FROM, BRANCHES)]
    # The ledgered sites' models were not called again; the others once more each.
    again = Counter(calls(tmp_path)) - before
    assert again == Counter(f"site {i}" for i in range(HELD_FROM, BRANCHES))

    after = await detail(run.id, auth)
    assert after["resumable"] is None and after["resumed_by"] == done.id
    assert (await detail(done.id, auth))["resumable"] is None
    assert_error(await AsyncClient().post(resume_path(run.id), headers=auth), 409,
                 "not_resumable")


async def test_only_the_latest_run_of_a_turn_resumes_and_a_resume_resumes_once(
        tmp_path: Path) -> None:
    auth = bearer(await atoken(await amake_user("bo")))
    first = await stop(await held_run(tmp_path, "survey-chain"), auth)

    # Resumed, and stopped again while its held sites wait: the resumption is the
    # turn's latest run now, and the one to resume.
    second = await resume(first.id, auth)
    twice = await AsyncClient().post(resume_path(first.id), headers=auth)
    assert "already" in assert_error(twice, 409, "not_resumable")["message"]

    async def held_again() -> bool:
        return Counter(calls(tmp_path))[f"site {BRANCHES - 1}"] == 2

    await wait_until(held_again, timeout=30, what="the resumed run's held sites")
    second_run = await stop(await Run.objects.aget(id=second["id"]), auth)
    assert second_run.status == Run.Status.CANCELLED
    refused = assert_error(await AsyncClient().post(resume_path(first.id), headers=auth),
                           409, "not_resumable")
    assert second_run.id in refused["message"]
    assert (await detail(first.id, auth))["resumable"] is None
    assert (await detail(second_run.id, auth))["resumable"] == {
        "entries": HELD_FROM, "tokens": HELD_FROM * USAGE.total_tokens}

    (tmp_path / "open").touch()
    third = await resume(second_run.id, auth)
    done = await wait_run_done(third["id"], timeout=30)
    assert done.status == Run.Status.FINISHED, done.reply
    reused = [e for e in await payloads(done.id) if e["type"] == "branch.reused"]
    # Reused where they ran: in the first run, not in the resumption that reused them.
    assert len(reused) == HELD_FROM and {e["original_run_id"] for e in reused} == {first.id}
    assert Counter(calls(tmp_path))["site 0"] == 1


async def test_two_resumes_of_one_run_at_once_queue_one_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    auth = bearer(await atoken(await amake_user("di")))
    first = await stop(await held_run(tmp_path, "survey-race"), auth)
    checked, other = services.run_resumable, []

    async def then_another_request(run: Run) -> Any:
        found = await checked(run)
        if not other:  # a second request passes every check in this very moment
            other.append(None)
            other[0] = await AsyncClient().post(resume_path(first.id), headers=auth)
        return found

    monkeypatch.setattr(services, "run_resumable", then_another_request)
    late = await AsyncClient().post(resume_path(first.id), headers=auth)
    assert other[0].status_code == 202, other[0].content
    queued = other[0].json()["run"]["id"]
    assert assert_error(late, 409, "not_resumable")["resumed_by"] == queued
    assert [r async for r in Run.objects.filter(origin__resumes=first.id).values_list(
        "id", flat=True)] == [queued]
    (tmp_path / "open").touch()
    assert (await wait_run_done(queued, timeout=30)).status == Run.Status.FINISHED


async def test_resume_refusals_use_the_json_error_shape(tmp_path: Path) -> None:
    user = await amake_user("cy")
    auth = bearer(await atoken(user))
    client = AsyncClient()
    assert_error(await client.post(resume_path("no-such-run"), headers=auth), 404, "not_found")

    # A finished run, and a stopped one that left no ledger (stopped before it started).
    (tmp_path / "open").touch()
    finished, _ = await services.run_execute(
        flow=FLOW, message="survey", config={"folder": str(tmp_path), "branches": 2})
    await wait_run_done(finished.id)
    assert finished.status == Run.Status.FINISHED
    body = assert_error(await client.post(resume_path(finished.id), headers=auth), 409,
                        "not_resumable")
    assert "finished" in body["message"]
    queued = await Run.objects.acreate(id="never-ran", flow=FLOW, status=Run.Status.CANCELLED,
                                       session_id="", origin={"kind": "worker"})
    body = assert_error(await client.post(resume_path(queued.id), headers=auth), 409,
                        "not_resumable")
    assert "no branch ledger" in body["message"]
    assert (await detail(queued.id, auth))["resumable"] is None
    shipped = await Run.objects.acreate(
        id="shipped", flow=FLOW, status=Run.Status.INTERRUPTED, session_id="elsewhere",
        origin={"kind": "remote", "host": "laptop", "pid": 7})
    body = assert_error(await client.post(resume_path(shipped.id), headers=auth), 409,
                        "not_resumable")
    assert "FlowEngine.resume there" in body["message"]

    # An interrupted run: a reader, a token without the run scope, another project's
    # member, no one at all, and GET are refused; nothing is queued.
    (tmp_path / "open").unlink()
    interrupted = await interrupt(await held_run(tmp_path, "survey-refused"), auth)
    reader = await amake_user("di", role="viewer")
    assert_error(await client.post(resume_path(interrupted.id),
                                   headers=bearer(await atoken(reader))), 403, "role")
    _, read_only = await sync_to_async(ApiToken.issue)(user, "reader", ("read",))
    assert_error(await client.post(resume_path(interrupted.id), headers=bearer(read_only)),
                 403, "scope")
    stranger = await amake_user("ed", project="elsewhere")
    assert_error(await client.post(resume_path(interrupted.id), headers=bearer(
        await atoken(stranger, project="elsewhere"))), 404, "not_found")
    assert_error(await AsyncClient().post(resume_path(interrupted.id)), 401, "unauthenticated")
    assert (await client.get(resume_path(interrupted.id), headers=auth)).status_code == 405
    assert not await Run.objects.filter(origin__resumes=interrupted.id).aexists()
    # What the run's page is told: it may be resumed.
    assert (await detail(interrupted.id, auth))["resumable"]["entries"] == HELD_FROM


async def test_a_resume_whose_ledger_went_meanwhile_fails_with_nothing_to_resume(
        tmp_path: Path) -> None:
    """Queued, then the session's ledger is gone before its worker takes it."""
    auth = bearer(await atoken(await amake_user("fay")))
    run = await stop(await held_run(tmp_path, "survey-gone"), auth)
    await LedgerEntry.objects.filter(session_id="survey-gone").adelete()
    await LedgerTurn.objects.filter(session_id="survey-gone").adelete()
    resumed = await Run.objects.acreate(
        id="resumes-nothing", flow=FLOW, message=run.message, session_id=run.session_id,
        status=Run.Status.QUEUED, origin={"kind": "worker", "resumes": run.id})
    assert await execution.run_in_worker(resumed.id, "w") == Run.Status.FAILED
    failed = await Run.objects.aget(id=resumed.id)
    assert failed.reply["error_code"] == "nothing_to_resume"
    assert json.loads(json.dumps(failed.summary()))["origin"]["resumes"] == run.id


async def test_the_run_page_offers_resume_to_operators_and_links_the_two_runs(
        tmp_path: Path) -> None:
    operator = await amake_user("gus")
    auth = bearer(await atoken(operator))
    run = await interrupt(await held_run(tmp_path, "survey-page"), auth)
    browser = AsyncClient()
    await browser.aforce_login(operator)
    page = (await browser.get(f"/runs/{run.id}/")).content.decode()
    box = re.search(r'<div class="pf-resume" id="pf-resume-box"[^>]*>', page)
    assert box and "hidden" not in box.group(0) and 'data-can-run="1"' in box.group(0)
    assert f"reuses {HELD_FROM} branches · saves {HELD_FROM * USAGE.total_tokens} tokens" in page
    viewer = AsyncClient()
    await viewer.aforce_login(await amake_user("hal", role="viewer"))
    box = re.search(r'<div class="pf-resume" id="pf-resume-box"[^>]*>',
                    (await viewer.get(f"/runs/{run.id}/")).content.decode())
    assert box and "hidden" in box.group(0) and 'data-can-run="0"' in box.group(0)

    (tmp_path / "open").touch()
    resumed = await resume(run.id, auth)
    await wait_run_done(resumed["id"], timeout=30)
    page = (await browser.get(f"/runs/{resumed['id']}/")).content.decode()
    assert f'id="pf-resumes" href="/runs/{run.id}/"' in page
    page = (await browser.get(f"/runs/{run.id}/")).content.decode()
    assert f'id="pf-resumed-by" href="/runs/{resumed["id"]}/"' in page
    box = re.search(r'<div class="pf-resume" id="pf-resume-box"[^>]*>', page)
    assert box and "hidden" in box.group(0)
