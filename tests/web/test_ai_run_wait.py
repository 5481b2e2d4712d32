"""``POST /ai/run`` waits for its run's end by hearing it, and not for ever.

The turn waits at a gate the test opens (``tests/flows_pkg/gated.py``), executed in the
test process (``tests/inline_tasks.py``), so the run is running for as long as a test
needs. How long a request waits is ``PICOFLOW_RUN_WAIT``; a run that has not ended by then
is answered with 202 and where to follow it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import AsyncClient
from django.utils import timezone

from picoflow_web.config import app_settings, env
from picoflow_web.execute import run_ends, services
from picoflow_web.execute.engine import get_engine
from picoflow_web.http import bodies, openapi
from picoflow_web.models import Run
from tests.webhelpers import amake_user, atoken, bearer, wait_run_done, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch, demo_latency: Any) -> Iterator[None]:
    monkeypatch.setenv("PICOFLOW_FLOWS", "tests.flows_pkg.gated:flows")
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


async def ask(gate: Path) -> Any:
    """``POST /ai/run`` of a gated turn, by a token of scope run."""
    token = await atoken(await amake_user())
    return await AsyncClient().post(
        "/ai/run", data=json.dumps({"flowName": "GateFlow", "message": "go",
                                    "config": {"folder": str(gate)}}),
        content_type="application/json", headers=bearer(token))


async def reached(gate: Path) -> None:
    async def there() -> bool:
        return (gate / "reached").exists()

    await wait_until(there, what="the turn to reach its gate")


async def test_the_reply_comes_when_the_run_ends_heard_not_read(
        gated: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No look at the database while waiting: only the run's end, broadcast, wakes it.
    monkeypatch.setattr(run_ends, "RECHECK", 3600.0)
    request = asyncio.ensure_future(ask(tmp_path))
    # (No ORM call of the test's own meanwhile: the request holds asgiref's shared thread.)
    await reached(tmp_path)
    assert not request.done()

    (tmp_path / "open").touch()
    response = await request
    assert response.status_code == 200, response.content
    reply = response.json()
    assert (reply["success"], reply["message"]) == (True, "opened")
    ended = await wait_run_done(reply["run"])
    assert ended.status == Run.Status.FINISHED


async def test_an_end_nobody_announced_is_found_by_the_safety_recheck(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_ends, "RECHECK", 0.05)
    run = await Run.objects.acreate(id="quiet", flow="HotelFlow", status=Run.Status.RUNNING,
                                    origin={"kind": "worker"})
    waiting = asyncio.ensure_future(services.run_wait(run.id))
    await run_ends.subscribed()
    reply = {"success": True, "completed": True, "message": "done quietly",
             "session_id": "s-quiet", "content_type": "text/plain", "error_code": None}
    # Ended without a word to the channel layer (as an end a lost message never told).
    await Run.objects.filter(id=run.id).aupdate(status=Run.Status.FINISHED, reply=reply,
                                                finished_at=timezone.now())
    ended, answer = await waiting
    assert (ended.status, answer.message) == (Run.Status.FINISHED, "done quietly")


async def test_a_run_still_going_after_run_wait_is_answered_202_with_where_to_follow_it(
        gated: None, tmp_path: Path, settings: Any) -> None:
    settings.PICOFLOW_RUN_WAIT = 0.2
    response = await ask(tmp_path)
    assert response.status_code == 202, response.content
    body = response.json()
    run = await Run.objects.aget()
    assert body["run"] == run.id
    assert body["status"] in ("queued", "running")
    assert body["follow"] == f"/api/runs/{run.id}"
    assert "/api/runs/" in body["message"]
    assert response["PicoFlow-Run-Id"] == run.id
    assert response["Location"] == f"/api/runs/{run.id}"
    bodies.AiPending.model_validate(body)
    described = openapi.document()["paths"]["/ai/run"]["post"]["responses"]["202"]
    assert described["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/AiPending"}

    # The run goes on without the request, and ends as it would have.
    assert (await Run.objects.aget(id=run.id)).status not in Run.ENDED
    await reached(tmp_path)
    (tmp_path / "open").touch()
    ended = await wait_run_done(run.id)
    assert ended.status == Run.Status.FINISHED
    assert ended.reply["message"] == "opened"


def test_run_wait_is_read_like_the_other_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    reader, default = app_settings.DEFAULTS["RUN_WAIT"]
    assert default == 300.0
    monkeypatch.setenv("PICOFLOW_RUN_WAIT", "2.5")
    assert reader("PICOFLOW_RUN_WAIT", default) == 2.5
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv("PICOFLOW_RUN_WAIT", bad)
        with pytest.raises(env.ConfigError, match="PICOFLOW_RUN_WAIT"):
            reader("PICOFLOW_RUN_WAIT", default)
