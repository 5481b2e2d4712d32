"""Runs from another process, watched live in a real browser.

Daphne runs as a subprocess; the "user's own process" is another one —
``tests/e2e/remote_turn.py``, a plain script that imports only the runtime and a flow of
the tests' own — with ``PICOFLOW_DASHBOARD_URL`` and ``PICOFLOW_DASHBOARD_TOKEN`` set.
Playwright drives Debian's chromium on the run page while the turn runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browsing import (
    admin_token,
    api_run,
    dashboard,
    logged_in_page,
    run_ended,
    shot,
    stored_events,
)
from tests.livedaphne import LiveDaphne, run_manage

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "e2e" / "remote_turn.py"
REMOTE_TIMEOUT = 6
"""The server's PICOFLOW_REMOTE_TIMEOUT here: above the sink's heartbeat interval, short
enough for the kill test to see the interruption soon."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str, str]]:
    with dashboard({"PICOFLOW_REMOTE_TIMEOUT": str(REMOTE_TIMEOUT)},
                   extra_args=("--websocket-max-message-size", "67108864")) as (live, password):
        yield live, password, admin_token(live, "remote", "ingest")


@pytest.fixture
async def page(server: tuple[LiveDaphne, str, str], browser: Any) -> AsyncIterator[Any]:
    live, password, _ = server
    async with logged_in_page(live.base_url, password, browser) as page:
        yield page


def process_env(live: LiveDaphne, token: str) -> dict[str, str]:
    """The environment of a user's own process: no Django or pytest settings of ours, the
    two dashboard variables set."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "PYTEST_"))}
    env.update({"PICOFLOW_DASHBOARD_URL": live.base_url, "PICOFLOW_DASHBOARD_TOKEN": token,
                "PYTHONPATH": str(ROOT)})
    return env


def remote_turn(live: LiveDaphne, token: str, events_file: Path, *, pause: float,
                teams: int = 3) -> tuple[str, subprocess.Popen[str]]:
    """Start the user's process; its run id and the process."""
    run_id = uuid.uuid4().hex
    env = process_env(live, token)
    with (events_file.parent / "process.log").open("w") as log:  # the child keeps its copy
        process = subprocess.Popen(
            [sys.executable, str(SCRIPT), run_id, str(events_file), str(pause), str(teams)],
            env=env, cwd=events_file.parent, stdout=log, stderr=subprocess.STDOUT, text=True)
    return run_id, process


async def open_run_page(page: Any, run_id: str) -> None:
    """Wait for the run's first events to arrive, then open its page."""
    for _ in range(600):  # the process needs a moment to start and ship its first batch
        if await page.evaluate("async id => (await fetch(`/api/runs/${id}`)).ok", run_id):
            break
        await page.wait_for_timeout(50)
    await page.goto(f"/runs/{run_id}/")
    if not await page.locator("#pf-run").count():  # say what the page shows instead
        raise AssertionError(f"{page.url}: {await page.locator('body').inner_text()}")


def emitted(events_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in events_file.read_text().splitlines() if line]


async def test_a_turn_in_another_process_is_watched_live_and_stored_as_emitted(
    server: tuple[LiveDaphne, str, str], page: Any, tmp_path: Path,
) -> None:
    live, _, token = server
    events_file = tmp_path / "events.jsonl"
    run_id, process = remote_turn(live, token, events_file, pause=2.0)
    try:
        await open_run_page(page, run_id)
        rows_seen: list[tuple[int, str | None]] = []
        while True:
            rows = await page.locator(".pf-branch").count()
            status = await page.get_attribute("#pf-run", "data-status")
            rows_seen.append((rows, status))
            if status == "finished":
                break
            await page.wait_for_timeout(50)
        assert process.wait(timeout=60) == 0, (tmp_path / "process.log").read_text()
    finally:
        process.kill()
    # The tree grew while the run was live: first the three teams, then research's two
    # analysts, all five at the end.
    assert any(0 < rows < 5 and status == "running" for rows, status in rows_seen), rows_seen
    await run_ended(page)  # "finished" alone can come before the last events are drawn
    assert await page.locator(".pf-branch").count() == 5
    assert "remote" in (await page.locator("#pf-origin").inner_text())
    await shot(page, "remote_live_finished")

    # team1 (path 1) saw the coordinator's plan, made before the fork, but not what its
    # siblings contributed while it ran.
    await page.click('.pf-branch[data-path="1"]')
    await page.wait_for_selector('#pf-inspector[data-path="1"]')
    visible = await page.locator("#pf-inspector .pf-visible-state").inner_text()
    assert "What slows us down?" in visible
    assert "research:" not in visible

    stored = await stored_events(page, run_id)
    sent = emitted(events_file)
    assert [e["seq"] for e in stored] == list(range(len(sent)))
    assert stored == sent
    count = await page.locator("#pf-event-count").inner_text()
    assert int(count) == len(sent)


async def test_a_killed_remote_process_leaves_an_interrupted_run_with_what_it_sent(
    server: tuple[LiveDaphne, str, str], page: Any, tmp_path: Path,
) -> None:
    live, _, token = server
    events_file = tmp_path / "events.jsonl"
    run_id, process = remote_turn(live, token, events_file, pause=30.0)
    try:
        await open_run_page(page, run_id)
        # Killed mid-run: every team has started and is waiting out its pause.
        await page.wait_for_function(
            "() => document.querySelectorAll('.pf-branch[data-status=running]').length >= 3",
            timeout=30_000)
        before = len(await stored_events(page, run_id))
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        process.kill()
    await page.wait_for_selector("#pf-run[data-status=interrupted]",
                                 timeout=(REMOTE_TIMEOUT + 20) * 1000)
    await shot(page, "remote_interrupted")
    stored = await stored_events(page, run_id)
    sent = emitted(events_file)
    *kept, last = stored
    assert last["type"] == "run.interrupted"
    assert last["seq"] == len(kept) >= before  # nothing stored before the kill was lost
    assert kept == sent[:len(kept)]
    assert "interrupted" in (await page.locator("body").inner_text()).lower()


async def test_stop_on_the_page_stops_the_turn_in_its_own_process(
    server: tuple[LiveDaphne, str, str], page: Any, tmp_path: Path,
) -> None:
    live, _, token = server
    events_file = tmp_path / "events.jsonl"
    # A slow fan-out: six teams, each waiting out a pause far longer than the test.
    run_id, process = remote_turn(live, token, events_file, pause=120.0, teams=6)
    try:
        await open_run_page(page, run_id)
        await page.wait_for_function(
            "() => document.querySelectorAll('.pf-branch[data-status=running]').length >= 6",
            timeout=30_000)
        assert await page.locator("#pf-stop").is_enabled()
        await page.click("#pf-stop")
        # Recorded here; the process hears it on its long-poll and stops its turn itself.
        await page.wait_for_selector("#pf-stop-note:has-text('waiting for the process')",
                                     timeout=10_000)
        note = await page.locator("#pf-stop-note").inner_text()
        assert note.startswith("Stop requested by admin") and await page.locator(
            "#pf-stop").is_disabled()
        await shot(page, "remote_stop_requested")
        await page.wait_for_selector("#pf-run[data-status=cancelled]", timeout=60_000)
        assert process.wait(timeout=60) == 1  # a stopped turn is no success
    finally:
        process.kill()
    await run_ended(page, "cancelled")
    await page.wait_for_selector("#pf-stop-box", state="hidden")
    panel = await page.locator("#pf-ended").inner_text()
    assert "Stopped by admin: stopped from the dashboard" in panel
    assert "dashboard by admin" not in panel  # who stopped it is said once
    await shot(page, "remote_stop_cancelled")
    output = (tmp_path / "process.log").read_text()
    assert "Stopped: stopped from the dashboard by admin" in output
    assert "error_code: turn_cancelled" in output

    # The events say who stopped it: the turn's end names admin, the barrier's cancel the
    # reason; the dashboard stored what the process emitted.
    stored = await stored_events(page, run_id)
    assert stored == emitted(events_file)
    last = stored[-1]
    assert (last["type"], last["requested_by"]) == ("turn.cancelled", "admin")
    assert last["reason"] == "stopped from the dashboard by admin"
    requested = [e for e in stored if e["type"] == "cancel.requested"]
    assert requested and all("by admin" in e["reason"] for e in requested)
    summary = await api_run(page, run_id)
    assert (summary["status"], summary["cancel_requested"]["by"]) == ("cancelled", "admin")
    # Stopping it again is refused with a clear error: it has ended.
    again = await page.evaluate(
        """async id => {
             const cookie = document.cookie.match(/(?:^|;\\s*)csrftoken=([^;]+)/)?.[1];
             const csrf = decodeURIComponent(cookie
               ?? document.querySelector("input[name=csrfmiddlewaretoken]")?.value ?? "");
             const r = await fetch(`/api/runs/${id}/cancel`, {method: "POST",
               headers: {"X-CSRFToken": csrf}, credentials: "same-origin"});
             return [r.status, (await r.json()).code]; }""", run_id)
    assert again == [409, "run_ended"]


def docs_example(title: str) -> str:
    """The Python example of the section ``## <title>`` of the "Watch your own process"
    tutorial."""
    text = (ROOT / "docs" / "tutorials" / "watch-your-process.md").read_text(encoding="utf-8")
    section = text[text.index(f"## {title}\n"):]
    return section[section.index("```python\n") + 10:section.index("```", section.index(
        "```python\n") + 10)]


def test_the_docs_example_ships_its_run_to_the_dashboard(
    server: tuple[LiveDaphne, str, str], tmp_path: Path,
) -> None:
    live, _, token = server
    script = tmp_path / "counting.py"
    script.write_text(docs_example("Ship events from your process"), encoding="utf-8")
    env = process_env(live, token)
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "total 10"), done.stderr
    reader = run_manage("create_api_token", "admin", "reader", env=live.env)
    raw = reader.stdout.strip().splitlines()[-1]
    status, _, body = live.get("/api/runs?flow=Counting", headers={
        "Authorization": f"Bearer {raw}"})
    (run,) = json.loads(body)["runs"]
    assert status == 200
    assert (run["status"], run["origin"]["kind"], run["branch_count"]) == (
        "finished", "remote", 4)
    assert run["reply"]["message"] == "total 10"
