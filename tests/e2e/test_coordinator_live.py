"""A coordinator against the real app: Daphne, ``manage.py db_worker`` processes, and
children sent through ``PICOFLOW_SELF_URL`` with a ``run``-scoped token of the project.

``Census`` (tests/flows_pkg/coordinated.py) sends 20 districts in batches of 5: district 7's
child fails, district 11's runs past the coordinator's timeout, district 13's is sent with
a wrong token. The coordinator's reply, its stored events and the children's runs must say
so, and no child may run twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import logged_in_page, shot
from tests.livedaphne import REPO_ROOT, LiveDaphne, live_daphne, run_manage
from tests.webhelpers import HttpSession, wait_for

pytestmark = [pytest.mark.browser]

WORKERS = 4
"""The coordinator holds one worker while it waits; its children need the others."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    env = {"PICOFLOW_FLOWS": "tests.flows_pkg.coordinated:flows", "PYTHONPATH": str(REPO_ROOT)}
    with live_daphne(env, workers=0, admin=True) as live:
        made = run_manage("create_api_token", "admin", "coordinator", "--scope", "read",
                          "--scope", "run", env=live.env)
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip().splitlines()[-1]
        for _ in range(WORKERS):
            live.start_worker(env={"PICOFLOW_SELF_URL": live.base_url,
                                   "PICOFLOW_SELF_TOKEN": token})
        yield live, token


def call(live: LiveDaphne, token: str, method: str, path: str, body: Any = None,
         timeout: float = 120) -> tuple[int, Any]:
    answer = HttpSession(live.base_url).request(
        method, path, json_body=body, headers={"Authorization": f"Bearer {token}"},
        timeout=timeout)
    return answer.status, json.loads(answer.body)


def events_of(live: LiveDaphne, token: str, run_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        status, page = call(live, token, "GET",
                            f"/api/runs/{run_id}/events?after={out[-1]['seq'] if out else -1}")
        assert status == 200, page
        if not page["events"]:
            return out
        out += page["events"]


def wait_ended(live: LiveDaphne, token: str, run_id: str, within: float = 60) -> dict[str, Any]:
    run: dict[str, Any] = {}

    def ended() -> bool:
        status, body = call(live, token, "GET", f"/api/runs/{run_id}")
        run.update(body["run"] if status == 200 else {})
        return run.get("status") not in (None, "queued", "running")

    wait_for(ended, f"run {run_id} to end", timeout=within)
    return run


def test_a_coordinator_of_twenty_children_reports_each_and_runs_none_twice(
        server: tuple[LiveDaphne, str]) -> None:
    live, token = server
    ask = {"flowName": "Census", "message": "count", "config": {"_concurrent": True}}
    status, reply = call(live, token, "POST", "/ai/run", ask, timeout=300)
    assert status == 200, reply
    assert reply["success"] is True
    outcomes = dict(pair.split(":") for pair in reply["message"].split())
    expected = {str(i): "fulfilled" for i in range(20)}
    expected.update({"7": "failed", "11": "timed_out", "13": "refused"})
    assert outcomes == expected

    coordinator = reply["run"]
    events = events_of(live, token, coordinator)
    kinds = [e["type"] for e in events]
    assert kinds.count("concurrent.batch_started") == 4
    assert [e["items"] for e in events if e["type"] == "concurrent.batch_started"] == \
        [list(range(b * 5, b * 5 + 5)) for b in range(4)]
    finished = {e["item"]: e for e in events if e["type"] == "concurrent.child_finished"}
    assert {i: e["status"] for i, e in finished.items()} == \
        {int(k): v for k, v in expected.items()}
    assert finished[13]["http_status"] == 401
    assert "the count of d7 did not add up" in finished[7]["error"]["message"]
    # Batches strictly in order.
    order = [(e["type"], e.get("batch")) for e in events
             if e["type"].startswith("concurrent.batch")]
    assert order == [(f"concurrent.batch_{w}", b) for b in range(4)
                     for w in ("started", "finished")]

    # Every child that got past the door is a run of its own, under the id the coordinator
    # chose, in a session of its own, linked back to its coordinator, and ran once.
    for item, event in finished.items():
        child = event["child_run_id"]
        status, body = call(live, token, "GET", f"/api/runs/{child}")
        if item == 13:
            assert status == 404, body  # refused at the door: never created
            continue
        assert status == 200, body
        run = body["run"]
        assert run["session_id"] == event["child_session_id"]
        assert run["origin"]["coordinator"] == {"run_id": coordinator, "group": "c0",
                                                "batch": item // 5, "item": item}
        ended = wait_ended(live, token, child)  # the timed-out one still finishes
        assert ended["status"] == ("failed" if item == 7 else "finished"), ended
        started = [e for e in events_of(live, token, child) if e["type"] == "turn.started"]
        assert len(started) == 1, f"child {item} ran {len(started)} times"
    attempts = [e for e in events if e["type"] == "concurrent.child_started"]
    assert len(attempts) == 20, "a child that may have run is never sent again"


@pytest.mark.anyio
async def test_the_coordinators_page_fills_its_batches_live_and_opens_a_child(
        server: tuple[LiveDaphne, str], browser: Any) -> None:
    """Started with a pause per child, so the page sees a batch running before it ends."""
    live, token = server
    password = (live.data_dir / "admin_password").read_text().strip()
    async with logged_in_page(live.base_url, password, browser) as page:
        status, body = call(live, token, "POST", "/api/runs", {
            "flow": "Census", "message": "count",
            "config": {"_concurrent": True, "pause": 2.0, "districts": 15, "sleep": -1,
                       "timeout": 30}})
        assert status == 201, body
        coordinator = body["run"]["id"]
        await page.goto(f"/runs/{coordinator}/")
        panel = page.locator("#pf-children")
        # Live: a batch running (its children too) while a later one is not there yet.
        running = panel.locator(".pf-children-batch[data-state=running]")
        await running.first.wait_for(timeout=60_000)
        await panel.locator(".pf-child-running").first.wait_for(timeout=60_000)
        seen_batches = await panel.locator(".pf-children-batch").count()
        assert seen_batches < 3, "the page showed every batch before they ran"
        await shot(page, "coordinator-live")
        # The end: three batches done, the failures marked (7 failed, 13 refused).
        await panel.locator(".pf-children-batch[data-state=done]").nth(2).wait_for(
            timeout=120_000)
        failed = await panel.locator(".pf-child[data-failed]").evaluate_all(
            "els => els.map(e => [e.dataset.item, e.dataset.status])")
        assert failed == [["7", "failed"], ["13", "refused"]]
        refused = panel.locator(".pf-child[data-item='13']")
        assert await refused.evaluate("e => e.tagName") == "SPAN"  # no run to open
        assert "HTTP 401" in (await refused.get_attribute("title") or "")
        headline = await panel.locator(".pf-children-headline").text_content()
        assert headline == ("Tally \u00d7 15 in batches of 5 (batch 3 of 3): 13 of 15 fulfilled, "
                            "2 failed")
        await shot(page, "coordinator-done")
        # A click opens the child's run, which links back to its coordinator.
        await panel.locator(".pf-child[data-item='4']").click()
        await page.wait_for_url(f"**/runs/{coordinator}-c0-4/")
        back = page.locator("#pf-coordinator")
        assert await back.get_attribute("href") == f"/runs/{coordinator}/"
        assert await page.locator("#pf-coordinator-item").text_content() == "item 4, batch 1"
        await page.locator("#pf-run-status", has_text="finished").wait_for(timeout=30_000)


def test_the_research_desk_demo_coordinates_from_the_start_form_config(
        server: tuple[LiveDaphne, str]) -> None:
    """The demo coordinator, started as the page starts a run (its own config fields)."""
    live, token = server
    status, body = call(live, token, "POST", "/api/runs", {
        "flow": "ResearchDesk", "message": "Research the topic",
        "config": {"topic": "kelp", "questions": 4, "batch_size": 2}})
    assert status == 201, body
    run = wait_ended(live, token, body["run"]["id"], within=120)
    assert run["status"] == "finished", run
    assert run["reply"]["message"].splitlines() == [
        "4 of 4 questions answered.", "1. Notes on kelp: history?", "2. Notes on kelp: ecology?",
        "3. Notes on kelp: economics?", "4. Notes on kelp: open questions?"]
    status, flows = call(live, token, "GET", "/api/flows")
    desk = next(f for f in flows["flows"] if f["id"] == "ResearchDesk")
    assert set(desk["config_schema"]["properties"]) == {"topic", "questions", "batch_size",
                                                        "timeout"}
