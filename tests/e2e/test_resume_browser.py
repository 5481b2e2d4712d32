"""Resuming an interrupted run in a real browser: a ledgered fan-out's worker process is
killed (SIGKILL) while half its branches wait; the interrupted run's page offers Resume;
pressing it opens the resumed run, which another worker finishes, reusing the branches
the ledger held (drawn as reused, each linking to where it ran) and counting them in the
header against those it executed, with the tokens saved, as the API's events say.

The flow is ``tests/flows_pkg/ledgered.py`` served through ``PICOFLOW_FLOWS``: its model
writes each call to a file and holds the sites from ``hold_from`` on until the test's gate
file appears.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, logged_in_page, run_ended, shot
from tests.e2e.test_workers_live import Api
from tests.flows_pkg.ledgered import USAGE, calls
from tests.livedaphne import REPO_ROOT, LiveDaphne, run_manage
from tests.webhelpers import wait_until

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

BRANCHES, HELD_FROM = 6, 3


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str, str]]:
    env = {"PICOFLOW_FLOWS": "tests.flows_pkg.ledgered:SiteSurveyFlow",
           "PYTHONPATH": str(REPO_ROOT), "PICOFLOW_WORKER_LEASE": "2"}
    with dashboard(env, workers=0) as (live, password):
        made = run_manage("create_api_token", "admin", "resume", "--scope", "read",
                          "--scope", "run", env=live.env)
        assert made.returncode == 0, made.stderr
        yield live, password, made.stdout.strip().splitlines()[-1]


@pytest.fixture
async def page(server: tuple[LiveDaphne, str, str], browser: Any) -> AsyncIterator[Any]:
    live, password, _ = server
    async with logged_in_page(live.base_url, password, browser) as page:
        yield page


def ledger_entries(live: LiveDaphne) -> int:
    """Ledger entries stored in the server's database (durable: the worker may die now)."""
    with sqlite3.connect(f"file:{live.data_dir / 'picoflow.sqlite3'}?mode=ro", uri=True,
                         timeout=30) as db:
        return int(db.execute("SELECT count(*) FROM picoflow_web_ledgerentry").fetchone()[0])


async def test_resume_an_interrupted_run_from_its_page(
        server: tuple[LiveDaphne, str, str], page: Any, tmp_path: Path) -> None:
    live, _, token = server
    api = Api(live, token)
    doomed = live.start_worker("doomed")
    rescuer = None
    try:
        status, body = api.call("POST", "/api/runs", {
            "flow": "SiteSurveyFlow", "message": "survey the sites", "config": {
                "folder": str(tmp_path), "branches": BRANCHES, "hold_from": HELD_FROM}})
        assert status == 201, body
        run_id = body["run"]["id"]

        async def ledgered_and_held() -> bool:
            return ledger_entries(live) >= HELD_FROM and len(calls(tmp_path)) == BRANCHES

        await wait_until(ledgered_and_held, timeout=60, interval=0.05,
                         what="the ledgered sites and the held ones' calls")
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)

        async def interrupted() -> bool:
            return api.run(run_id)["status"] == "interrupted"

        await wait_until(interrupted, timeout=60, interval=0.1, what="the run interrupted")
        assert api.run(run_id)["resumable"] == {"entries": HELD_FROM,
                                                "tokens": HELD_FROM * USAGE.total_tokens}
        rescuer = live.start_worker("rescuer")
        (tmp_path / "open").touch()

        await page.goto(f"/runs/{run_id}/")
        await page.wait_for_selector("#pf-resume", state="visible")
        assert await page.inner_text("#pf-resume-note") == (
            f"reuses {HELD_FROM} branches · saves {HELD_FROM * USAGE.total_tokens} tokens")
        await shot(page, "resume-interrupted")
        await page.click("#pf-resume")
        await page.wait_for_url(lambda url: f"/runs/{run_id}/" not in url, timeout=30_000)
        await run_ended(page, "finished", timeout=60_000)
        resumed_id = await page.get_attribute("#pf-run", "data-run-id")
        assert resumed_id and resumed_id != run_id
        resumed = api.run(resumed_id)
        assert resumed["origin"]["resumes"] == run_id and resumed["worker"] == "rescuer"

        # The header links back, and counts as the events say.
        assert await page.get_attribute("#pf-resumes", "href") == f"/runs/{run_id}/"
        events = api.events(resumed_id)
        reused = [e for e in events if e["type"] == "branch.reused"]
        started = [e for e in events if e["type"] == "branch.started"]
        saved = sum(e["total_tokens"] for e in reused)
        assert reused and started and saved
        line = page.locator("#pf-run-reuse")
        await page.wait_for_function(
            "n => document.querySelector('#pf-run-reuse')?.dataset.reused === String(n)",
            arg=len(reused))
        assert (await line.get_attribute("data-executed"),
                await line.get_attribute("data-saved")) == (str(len(started)), str(saved))
        assert await line.inner_text() == (f"{len(reused)} reused · {len(started)} executed"
                                           f" · {saved} tokens saved")
        # Each reused branch is drawn as reused, linking to where it ran.
        for event in reused:
            row = page.locator(f'.pf-branch[data-path="{event["path"]}"]')
            assert await row.get_attribute("data-reused") == run_id
            assert await row.locator("a.pf-chip-reused").get_attribute("href") == (
                f"/runs/{run_id}/#seq={event['original_seq']}")
        assert await page.locator(".pf-branch[data-reused]").count() == len(reused)
        await shot(page, "resume-resumed")

        # The ledgered sites' models were called once, in the killed run only.
        counted = Counter(calls(tmp_path))
        assert all(counted[f"site {i}"] == 1 for i in range(HELD_FROM))
        assert all(counted[f"site {i}"] == 2 for i in range(HELD_FROM, BRANCHES))

        # The interrupted run now links to its resumption, and offers no Resume.
        await page.goto(f"/runs/{run_id}/")
        await page.wait_for_selector("#pf-resumed-by", state="visible")
        assert await page.get_attribute("#pf-resumed-by", "href") == f"/runs/{resumed_id}/"
        assert await page.locator("#pf-resume-box").is_hidden()
    finally:
        for worker in (doomed, rescuer):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
