"""Runs in real worker processes beside a real Daphne: the web server stays responsive, a
killed worker's run becomes interrupted, and the Stop button stops a nested fan-out.

One Daphne and ``manage.py db_worker`` processes on a private SQLite database
(``tests/livedaphne.py``); the workers reach the page through the relay. The lease is short
(:data:`LEASE` seconds) so a killed worker is noticed quickly.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, logged_in_page, shot
from tests.livedaphne import LiveDaphne, run_manage
from tests.webhelpers import HttpSession, assert_gap_free, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

LEASE = 2.0
"""Seconds of a worker's lease (PICOFLOW_WORKER_LEASE)."""
LIVE = ("queued", "running")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str, str]]:
    env = {"PICOFLOW_WORKER_LEASE": str(LEASE), "PICOFLOW_DEMO_LATENCY": "0.4"}
    with dashboard(env, workers=0) as (live, password):
        made = run_manage("create_api_token", "admin", "workers", "--scope", "read",
                          "--scope", "run", env=live.env)
        assert made.returncode == 0, made.stderr
        yield live, password, made.stdout.strip().splitlines()[-1]


class Api:
    """The dashboard's API with a bearer token."""

    def __init__(self, live: LiveDaphne, token: str) -> None:
        self.http = HttpSession(live.base_url)
        self.auth = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        answer = self.http.request(method, path, json_body=body, headers=self.auth,
                                   timeout=30)
        return answer.status, json.loads(answer.body)

    def start(self, flow: str, config: dict[str, Any] | None = None,
              session_id: str | None = None) -> str:
        status, body = self.call("POST", "/api/runs", {"flow": flow, "message": "go",
                                                       "config": config,
                                                       "session_id": session_id})
        assert status == 201, body
        return str(body["run"]["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        status, body = self.call("GET", f"/api/runs/{run_id}")
        assert status == 200, body
        return dict(body["run"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            after = out[-1]["seq"] if out else -1
            status, body = self.call("GET", f"/api/runs/{run_id}/events?after={after}")
            assert status == 200, body
            if not body["events"]:
                return out
            out += body["events"]


@pytest.fixture(scope="module")
def api(server: tuple[LiveDaphne, str, str]) -> Api:
    return Api(server[0], server[2])


async def ended(api: Api, run_id: str, timeout: float = 120.0) -> dict[str, Any]:
    async def done() -> bool:
        return api.run(run_id)["status"] not in LIVE

    await wait_until(done, timeout=timeout, interval=0.1, what=f"run {run_id} to end")
    return api.run(run_id)


def stop_workers(live: LiveDaphne) -> None:
    for worker in live.workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)


async def test_a_large_run_executes_in_a_worker_while_daphne_keeps_answering(
        server: tuple[LiveDaphne, str, str], api: Api) -> None:
    live = server[0]
    # The default lease: with the short one of this module, a 10,000-branch fork keeps the
    # worker too busy to renew it in time on two cores.
    worker = live.start_worker("big", env={"PICOFLOW_WORKER_LEASE": "10"})
    try:
        run_id = api.start("FanOutFlow", {"branches": 10_000})
        answered_while_running = 0
        statuses: list[str] = []
        while True:
            health = live.get("/healthz")
            listed = api.call("GET", "/api/runs")
            assert health[0] == 200 and listed[0] == 200
            run = next(r for r in listed[1]["runs"] if r["id"] == run_id)
            statuses.append(run["status"])
            if run["status"] not in LIVE:
                break
            if run["status"] == "running" and run["event_count"] > 0:
                answered_while_running += 1
        # Daphne answered both probes many times while the worker was storing the run's
        # events, and the run went queued/running -> finished, executed by that worker.
        assert answered_while_running >= 5, statuses
        assert statuses[-1] == "finished", statuses
        final = api.run(run_id)
        assert final["worker"] == "big" and final["origin"]["kind"] == "worker"
        assert final["branch_count"] == 10_000
        events = api.events(run_id)
        assert_gap_free([e["seq"] for e in events])
        assert events[0]["type"] == "turn.started" and events[-1]["type"] == "turn.finished"
    finally:
        stop_workers(live)
        live.workers.remove(worker)


async def test_a_killed_worker_leaves_an_interrupted_run_and_is_not_run_again(
        server: tuple[LiveDaphne, str, str], api: Api) -> None:
    live = server[0]
    doomed = live.start_worker("doomed")
    run_id = api.start("FanOutFlow", {"branches": 300, "rate": 30, "concurrency": 10})

    async def streaming() -> bool:
        return api.run(run_id)["event_count"] >= 40

    await wait_until(streaming, timeout=60, interval=0.05, what="the run's first events")
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=10)
    before_kill = api.events(run_id)

    final = await ended(api, run_id, timeout=LEASE * 10)
    assert final["status"] == "interrupted"
    events = api.events(run_id)
    # Everything stored before the kill is still there, gap-free, and the interruption is
    # the last event: it names the worker and the revision the session stays at.
    assert events[:len(before_kill)] == before_kill
    assert_gap_free([e["seq"] for e in events])
    last = events[-1]
    assert last["type"] == "run.interrupted" and last["worker"] == "doomed"
    saved = [e["revision"] for e in events if e["type"] in ("session.saved",
                                                            "checkpoint.saved")]
    assert last["revision"] == saved[-1]

    # A second worker takes new runs (a new turn on the same session works) and leaves
    # the interrupted run alone.
    rescuer = live.start_worker("rescuer")
    try:
        again = api.start("FanOutFlow", {"branches": 5}, session_id=final["session_id"])
        assert (await ended(api, again))["status"] == "finished"
        assert api.run(again)["worker"] == "rescuer"
        assert api.events(run_id) == events
        assert [e["type"] for e in events].count("turn.started") == 1
    finally:
        stop_workers(live)
        live.workers.remove(doomed)
        live.workers.remove(rescuer)


@pytest.fixture
async def page(server: tuple[LiveDaphne, str, str], browser: Any) -> AsyncIterator[Any]:
    live, password, _ = server
    async with logged_in_page(live.base_url, password, browser) as page:
        yield page


async def test_stop_on_a_running_nested_fan_out_ends_it_cancelled(
        server: tuple[LiveDaphne, str, str], api: Api, page: Any) -> None:
    live = server[0]
    # The page listens before the run's first event (a gate): the run waits queued until
    # the page's socket is open, then the worker starts. A page a busy machine opened late
    # would find the run over.
    run_id = api.start("ResearchFlow")
    await page.goto(f"/runs/{run_id}/")
    await page.wait_for_selector("#pf-status[data-state=open]")
    worker = live.start_worker("stopper")
    try:
        # Stop once a nested barrier forked: a branch of a branch (path "0.1") runs.
        await page.wait_for_function(
            """() => [...document.querySelectorAll('.pf-branch[data-status=running]')]
                 .some(row => row.dataset.path.includes('.'))""", timeout=60_000)
        await page.click("#pf-stop")
        await page.wait_for_selector("#pf-run[data-status=cancelled]", timeout=60_000)
        await page.wait_for_selector("#pf-stop-box", state="hidden")
        panel = await page.locator("#pf-ended").inner_text()
        assert "Stopped by admin" in panel and "The session stays at revision" in panel

        events = api.events(run_id)
        assert events[-1]["type"] == "turn.cancelled"
        assert events[-1]["requested_by"] == "admin"
        # The tree labels what the stop did to each branch, as the events say.
        propagated = [e for e in events if e["type"] == "cancel.propagated"]
        assert propagated
        labels = await page.eval_on_selector_all(
            ".pf-branch[data-stop]", "rows => rows.map(r => r.dataset.stop)")
        stopped_queued = sum(len(e["queued"]) for e in propagated)
        assert labels.count("not-started") == stopped_queued
        assert set(labels) <= {"not-started", "cancelled", "late"} and labels
        # The page draws the run's last event before the worker records how it ended.
        assert (await ended(api, run_id))["status"] == "cancelled"
    finally:
        stop_workers(live)
        live.workers.remove(worker)


async def test_stop_after_a_s_chain_shows_only_the_saved_state_as_canonical(
        server: tuple[LiveDaphne, str, str], api: Api, page: Any) -> None:
    """The seed's A/B flow stopped once worker A's chain is done and B1 still runs: what A
    published lives in memory only; the session stays at the revision its turn began
    with, and the page says both, each where it belongs."""
    live = server[0]
    status, body = api.call("POST", "/api/runs", {"flow": "TimingFlow", "message": "pipelined"})
    assert status == 201, body
    run_id = str(body["run"]["id"])
    await page.goto(f"/runs/{run_id}/")
    await page.wait_for_selector("#pf-status[data-state=open]")  # listening before it runs
    worker = live.start_worker("timing-stopper")
    try:
        # A2 (A's second stage, path 0.1:0) fulfilled; B1 (ten units) still running.
        await page.wait_for_selector('.pf-branch[data-path="0.1:0"][data-status=fulfilled]',
                                     timeout=60_000)
        await page.click("#pf-stop")
        await page.wait_for_selector("#pf-run[data-status=cancelled]", timeout=60_000)
        events = api.events(run_id)
        assert events[-1]["type"] == "turn.cancelled"
        a2_done = next(e["seq"] for e in events
                       if e["type"] == "branch.fulfilled" and e["path"] == "0.1:0")
        assert a2_done < next(e["seq"] for e in events if e["type"] == "cancel.requested")

        panel = await page.locator("#pf-ended").inner_text()
        assert "Stopped by admin." in panel and "stopped by admin" not in panel  # said once

        await page.goto(f"/runs/{run_id}/#inv=")
        inspector = page.locator('#pf-inspector[data-path=""]')
        canonical = inspector.locator('[data-section="canonical"]')
        await canonical.wait_for()
        assert "A1 done" not in await canonical.inner_text()
        unsaved = await inspector.locator(".pf-unsaved").inner_text()
        assert "Published in memory, not saved: the turn was stopped" in unsaved
        assert "A1 done" in unsaved and "A2 done" in unsaved
        await shot(page, "truth_stopped_live")
    finally:
        stop_workers(live)
        live.workers.remove(worker)


async def test_a_page_opened_while_the_run_is_queued_names_its_worker_once_it_ran(
        server: tuple[LiveDaphne, str, str], api: Api, page: Any) -> None:
    live = server[0]
    run_id = api.start("ResearchFlow")  # no worker yet: it waits in the queue
    await page.goto(f"/runs/{run_id}/")
    assert await page.locator("#pf-origin").inner_text() == "worker (waiting for one)"
    assert await page.get_attribute("#pf-run", "data-status") == "queued"
    worker = live.start_worker("latecomer")
    try:
        await page.wait_for_selector("#pf-run[data-status=finished]", timeout=60_000)
        # The header follows the run: the worker that took it, without a reload.
        await page.wait_for_function(
            "() => document.getElementById('pf-origin').textContent === 'worker latecomer'",
            timeout=30_000)
        assert (await ended(api, run_id))["worker"] == "latecomer"
        await shot(page, "queued_run_names_its_worker")
    finally:
        stop_workers(live)
        live.workers.remove(worker)
