"""The dashboard in a real browser: Debian's chromium driven by Playwright.

Daphne runs as a subprocess (``tests/livedaphne.py``) with slow-ish scripted models, so
runs are visibly live. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browsing import (
    FRAME,
    api_run,
    dashboard,
    run_ended,
    shot,
    start_run,
    start_run_watched,
    stored_events,
)
from tests.livedaphne import LiveDaphne

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

HOSTILE = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.6"},
                   extra_args=("--websocket-max-message-size", "67108864")) as found:
        yield found


GROWTH = """(() => {
  if (!location.pathname.startsWith("/runs/")) return;
  const seen = window.__pfGrowth = [];
  const look = () => {
    const rows = document.querySelectorAll(".pf-branch").length;
    const live = document.querySelector('.pf-branch[data-status="running"]') !== null;
    const last = seen.at(-1);
    if (!last || last[0] !== rows || last[1] !== live) seen.push([rows, live]);
  };
  new MutationObserver(look).observe(document, {
    childList: true, subtree: true, attributes: true, attributeFilter: ["data-status"]});
})()"""
"""Installed before the run page's own scripts: each new (branch rows, any of them running)
the page shows, in order."""


async def test_login_is_required(server: tuple[LiveDaphne, str], browser: Any) -> None:
    live, _ = server
    context = await browser.new_context(base_url=live.base_url)
    page = await context.new_page()
    await page.goto("/")
    assert "/login/" in page.url
    await context.close()


async def test_nested_fan_out_grows_live_and_the_inspector_shows_what_a_branch_could_not_see(
    server: tuple[LiveDaphne, str], page: Any,
) -> None:
    # Watch the tree grow while the run is live: every change the page makes to its rows is
    # seen from inside it, so a busy machine that answers a poll late misses no stage.
    await page.add_init_script(GROWTH)
    # The page listens before the run's first event: a page that a busy machine opened late
    # would get the whole tree in its first batch and never show it growing.
    await start_run_watched(page, server[0], "ResearchFlow", "research tide pools")
    await run_ended(page)
    seen = [tuple(stage) for stage in await page.evaluate("() => window.__pfGrowth")]
    assert await page.get_attribute("#pf-status", "data-state") in ("open", "closed")
    # B and C first, then B's own D and E appear: the tree grew while branches ran.
    assert any(0 < rows < 4 and running for rows, running in seen), f"no partial live tree: {seen}"
    assert await page.locator(".pf-branch").count() == 4
    await shot(page, "research_live_finished")
    # C (the archive finder, path 1) could not see B's plan (B is path 0) made before
    # B forked its own finders: the inspector lists it as not visible.
    await page.click('.pf-branch[data-path="1"]')
    await page.wait_for_selector('#pf-inspector[data-path="1"]')
    invisible = await page.locator("#pf-inspector .pf-invisible").inner_text()
    assert "plan" in invisible
    visible = await page.locator("#pf-inspector .pf-visible-state").inner_text()
    assert "field studies of tide pools" not in visible
    # D (path 0.0) forked from B's view and saw the plan.
    await page.click('.pf-branch[data-path="0.0"]')
    await page.wait_for_selector('#pf-inspector[data-path="0.0"]')
    assert "field studies of tide pools" in await page.locator(
        "#pf-inspector .pf-visible-state").inner_text()
    await shot(page, "research_inspector")


async def test_a_reload_mid_run_loses_and_repeats_no_event(page: Any) -> None:
    run_id = await start_run(page, "TimingFlow", "pipelined")
    await page.wait_for_function(
        "() => Number(document.querySelector('#pf-last-seq')?.textContent) >= 5")
    assert await page.get_attribute("#pf-run", "data-status") == "running"
    await page.reload()
    await run_ended(page)  # every stored event drawn
    stored = await api_run(page, run_id)
    count = int(await page.locator("#pf-event-count").inner_text())
    last = int(await page.locator("#pf-last-seq").inner_text())
    assert count == stored["event_count"] == last + 1
    statuses = await page.eval_on_selector_all(".pf-branch",
                                               "rows => rows.map(r => r.dataset.status)")
    assert statuses and set(statuses) == {"fulfilled"}
    await shot(page, "timing_after_reload")


async def test_hostile_strings_in_state_render_as_text(page: Any) -> None:
    run_id = await start_run(page, "ResearchFlow", f"research {HOSTILE}")
    await run_ended(page)
    await page.click('.pf-branch[data-path="0"]')
    await page.wait_for_selector('#pf-inspector[data-path="0"]')
    stored = await api_run(page, run_id)
    session = f"/sessions/{stored['session_id']}/"
    for url in (f"/runs/{run_id}/", session, "/"):
        await page.goto(url)
        # What the page's scripts draw from the stored strings is there before they are
        # looked for (no injected markup is no proof while nothing was drawn yet).
        if url == session:
            await page.wait_for_selector('#pf-session[data-loaded="1"][data-turn]')
        elif url == "/":
            await page.wait_for_selector(f'.pf-run-row[data-run-id="{run_id}"]')
        else:
            await run_ended(page)
        await page.wait_for_load_state("networkidle")
        assert await page.evaluate("() => window.__pwned") is None
        assert await page.locator("img[src=x]").count() == 0
        assert "<img src=x onerror" in await page.locator("body").inner_text()
    await shot(page, "hostile_session")


async def test_an_inspector_s_events_are_drawn_when_their_section_is_opened(
    page: Any,
) -> None:
    run_id = await start_run(page, "ResearchFlow", "research the events")
    await run_ended(page)
    events = await stored_events(page, run_id)
    section = page.locator('#pf-inspector details[data-section="events"]')
    rows = section.locator("tbody tr")

    async def drawn(path: str) -> None:
        own = [e for e in events if e.get("path") == path][-300:][:200]
        await rows.nth(len(own) - 1).wait_for()
        assert await rows.evaluate_all(
            "rows => rows.map(r => [r.cells[0].textContent, r.cells[1].textContent])"
        ) == [[f"#{e['seq']}", e["type"]] for e in own]

    await page.click('.pf-branch[data-path="0"]')
    await page.wait_for_selector('#pf-inspector[data-path="0"]')
    # Closed, the section holds no row: a live run's inspector is rebuilt without them.
    assert not await section.evaluate("d => d.open")
    assert await rows.count() == 0
    await section.locator("summary").click()
    await drawn("0")
    # Once opened it stays open, and another selection's inspector draws its rows at once.
    await page.click(".pf-root")
    await page.wait_for_selector('#pf-inspector[data-path=""]')
    assert await section.evaluate("d => d.open")
    await drawn("")


async def test_a_run_exported_from_its_page_imports_back_from_the_runs_list(
        page: Any, tmp_path: Path) -> None:
    run_id = await start_run(page, "ResearchFlow", "research tide pools")
    await run_ended(page)
    async with page.expect_download() as waiting:
        await page.click("#pf-export-run")
    download = await waiting.value
    exported = tmp_path / download.suggested_filename
    await download.save_as(str(exported))
    lines = exported.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "turn.started"
    assert {json.loads(line)["run_id"] for line in lines} == {run_id}

    await page.goto("/")
    await page.set_input_files("#pf-import-file", str(exported))
    await page.click("#pf-import-submit")  # the run exists here: refused, nothing stored
    refused = page.locator("#pf-import-result[data-state=error]")
    await refused.wait_for()
    assert "[run_exists]" in await refused.inner_text()

    await page.check("#pf-import-form [name=copy]")
    await page.click("#pf-import-submit")
    done = page.locator("#pf-import-result[data-state=ok]")
    await done.wait_for()
    assert f"copy of {run_id}" in await done.inner_text()
    await shot(page, "import_copy")
    await done.locator("a").click()
    await run_ended(page)
    assert "imported" in await page.locator("#pf-origin").inner_text()
    copy_id = page.url.rstrip("/").rsplit("/", 1)[1]
    assert copy_id != run_id
    original, copied = await api_run(page, run_id), await api_run(page, copy_id)
    assert copied["event_count"] == original["event_count"] == len(lines)
    assert copied["branch_count"] == original["branch_count"]


async def test_an_atomic_batch_with_a_failure_is_drawn_as_discarded_not_published(
    page: Any,
) -> None:
    await start_run(page, "AtomicFlow", "book the trip")
    await run_ended(page)
    barrier = page.locator('.pf-barrier[data-barrier="b0"]')
    # The join's record applied no field: no green badge, no green count.
    assert await barrier.locator(".pf-badge-published").count() == 0
    assert await barrier.get_attribute("data-publication") == "nothing"
    assert await barrier.locator(".pf-join-badge").inner_text() == "nothing published"
    assert await barrier.locator(".pf-count-published, .pf-count-fulfilled").count() == 0
    assert (await barrier.locator(".pf-count-discarded").inner_text()).endswith("3")
    for path, status, reason in (("0", "fulfilled", "atomic"), ("1", "fulfilled", "atomic"),
                                 ("2", "rejected", "rejected")):
        row = page.locator(f'.pf-branch[data-path="{path}"]')
        assert await row.get_attribute("data-status") == status
        assert await row.get_attribute("data-publication") == "discarded"
        assert await row.get_attribute("data-discard") == reason
        assert await row.locator(".pf-dot-fulfilled").count() == 0
        assert (await row.locator(".pf-chip-discarded").inner_text()).startswith("discarded")
        lane = page.locator(f'.pf-lane[data-path="{path}"]')
        assert await lane.locator(".pf-mark-discard").count() == 1
        assert await lane.locator(".pf-mark-join").count() == 0
    green = await page.evaluate("""() => {
        const probe = document.createElement("span");
        probe.className = "pf-count-published";
        document.body.appendChild(probe);
        const colour = getComputedStyle(probe).color;
        probe.remove();
        return colour;
    }""")
    held = await page.eval_on_selector(
        '.pf-lane[data-path="0"] .pf-seg-running', "el => getComputedStyle(el).backgroundImage")
    assert "gradient" in held and green not in held, "the discarded hold's bar is not green"

    await page.click('.pf-branch[data-path="0"]')
    await page.wait_for_selector('#pf-inspector[data-path="0"]:not([data-barrier])')
    inspector = page.locator("#pf-inspector")
    assert await inspector.locator(".pf-badge-published").count() == 0
    assert await inspector.locator(".pf-publication-badge").first.get_attribute(
        "data-publication") == "discarded"
    why = inspector.locator('.pf-discard-reason[data-discard="atomic"]')
    assert "atomic policy: branch 2 (car) was rejected" in await why.inner_text()
    assert "1 of 3" in await inspector.locator(".pf-facts").first.inner_text()
    await shot(page, "atomic_branch_discarded")
    # The sold-out car is named by its error's type, not the generic "internal".
    assert await page.locator('.pf-branch[data-path="2"] .pf-chip-error').inner_text() == \
        "SoldOutError"
    await page.click('.pf-branch[data-path="2"]')
    await page.wait_for_selector('#pf-inspector[data-path="2"]:not([data-barrier])')
    assert await inspector.locator(".pf-error-code").inner_text() == "SoldOutError"
    assert "3 of 3" in await inspector.locator(".pf-facts").first.inner_text()

    await page.click('.pf-barrier[data-barrier="b0"] .pf-row-key')
    await page.wait_for_selector('#pf-inspector[data-barrier="b0"]')
    assert await inspector.locator(".pf-badge-published").count() == 0
    assert await inspector.locator(".pf-publication-badge").first.inner_text() == \
        "nothing published"
    reasons = await inspector.locator(".pf-discarded-table").inner_text()
    assert "SoldOutError: SOLD OUT" in reasons and "atomic policy" in reasons
    await shot(page, "atomic_barrier_discarded")


async def test_the_runs_list_searches_sorts_and_links_the_query(page: Any) -> None:
    research = await start_run(page, "ResearchFlow", "research kelp forests")
    await run_ended(page)
    hotel = await start_run(page, "HotelFlow", "Hi")
    await run_ended(page)
    await page.goto("/")
    rows = page.locator("#pf-runs-body .pf-run-row")
    await page.fill("#pf-filters [name=q]", "KELP")
    await page.wait_for_function(
        "id => { const rows = [...document.querySelectorAll('#pf-runs-body .pf-run-row')];"
        " return rows.length === 1 && rows[0].dataset.runId === id; }", arg=research)
    assert "q=KELP" in page.url
    await page.fill("#pf-filters [name=q]", "")
    await page.wait_for_function(
        "n => document.querySelectorAll('#pf-runs-body .pf-run-row').length >= n", arg=2)
    await page.click("#pf-runs-head button[data-sort=events]")  # most events first
    head = page.locator("#pf-runs-head th", has=page.locator("[data-sort=events]"))
    assert await head.get_attribute("aria-sort") == "descending"
    await page.wait_for_url(re.compile(r"sort=-events"))
    # The address changes at the click, the rows in the page's next frame: read them after
    # it, all at once.
    await page.evaluate(FRAME)
    ordered = await rows.evaluate_all("rows => rows.map(r => r.dataset.runId)")
    counts = [(await api_run(page, run_id))["event_count"] for run_id in ordered]
    assert counts == sorted(counts, reverse=True)
    assert ordered.index(research) < ordered.index(hotel)  # 51 events before a greeting's
    await page.click("#pf-runs-head button[data-sort=events]")
    assert await head.get_attribute("aria-sort") == "ascending"
    await page.reload()  # the order is in the URL: a reload keeps it
    await page.wait_for_selector(f'.pf-run-row[data-run-id="{research}"]')
    assert await head.get_attribute("aria-sort") == "ascending"
    await shot(page, "runs_sorted")
