"""Streamed text in a real browser: a branch's model writes half its answer and is held at
a gate (``tests/flows_pkg/streamed.py``) in a real worker beside a live Daphne; the run
page shows what it wrote in the branch's lane and in the inspector while the call is still
open, then the whole reply once the test opens the gate; replayed to the middle of the
call, the page shows the text as it was written up to there."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, run_ended, shot, stored_events
from tests.flows_pkg.streamed import FIRST, SECOND
from tests.livedaphne import REPO_ROOT, LiveDaphne

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

FORM = "#pf-start-form"
LANE_TEXT = '.pf-lane[data-path="0"] .pf-lane-stream'
INSPECTOR_TEXT = '#pf-inspector[data-path="0"] .pf-streaming[data-state=writing] .pf-stream-text'
SHOWS = "([selector, text]) => (document.querySelector(selector)?.textContent ?? '').includes(text)"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    env = {"PICOFLOW_FLOWS": "tests.flows_pkg.streamed:flows", "PYTHONPATH": str(REPO_ROOT),
           "PICOFLOW_DEMO_LATENCY": "0"}
    with dashboard(env) as found:  # Daphne and one worker, which runs the turns
        yield found


async def test_streamed_text_shows_in_the_lane_and_the_inspector_before_the_call_ends(
    page: Any, tmp_path: Path,
) -> None:
    await page.wait_for_selector(f'{FORM}[data-ready="1"]')
    await page.select_option(f"{FORM} select[name=flow]", "StreamedNoteFlow")
    await page.fill(f"{FORM} [name=message]", "Write the tide note")
    await page.fill('[name="config.folder"]', str(tmp_path))
    await page.click(f"{FORM} button[type=submit]")
    await page.wait_for_url(re.compile(r"/runs/[0-9a-f]+/"))
    run_id = str(re.search(r"/runs/([0-9a-f]+)/", page.url).group(1))  # type: ignore[union-attr]

    # The model wrote the first half and waits at the gate: nothing can end its call.
    await page.wait_for_function(SHOWS, arg=[LANE_TEXT, FIRST.strip()], timeout=30_000)
    await page.click('.pf-branch[data-path="0"]')
    await page.wait_for_function(SHOWS, arg=[INSPECTOR_TEXT, FIRST.strip()], timeout=30_000)
    assert (tmp_path / "written").exists() and not (tmp_path / "open").exists()
    assert SECOND not in await page.locator(LANE_TEXT).inner_text()
    assert await page.get_attribute("#pf-run", "data-status") == "running"
    events = await stored_events(page, run_id)
    model = [(e["type"], e.get("text")) for e in events
             if e["type"].startswith("model.") and e["path"] == "0"]
    assert model == [("model.started", None), ("model.delta", FIRST)]  # no model.finished
    assert await page.locator('#pf-inspector .pf-model-call .pf-response:not(.pf-streaming)'
                              ).count() == 0
    await page.locator(INSPECTOR_TEXT).scroll_into_view_if_needed()
    await shot(page, "streaming_mid_answer")

    (tmp_path / "open").touch()
    await run_ended(page)
    await page.wait_for_function(
        SHOWS, arg=['#pf-inspector[data-path="0"] .pf-model-call .pf-response', FIRST + SECOND])
    assert await page.locator(f"{LANE_TEXT}, #pf-inspector .pf-streaming").count() == 0
    events = await stored_events(page, run_id)
    finished = [e for e in events if e["type"] == "model.finished" and e["path"] == "0"]
    assert [e["content"] for e in finished] == [FIRST + SECOND]
    await page.locator("#pf-inspector .pf-model-call .pf-response").scroll_into_view_if_needed()
    await shot(page, "streaming_finished")

    # The run replayed to its delta shows the text as written up to there, and no reply.
    delta = next(e for e in events if e["type"] == "model.delta")
    await page.goto("about:blank")
    await page.goto(f"/runs/{run_id}/#inv=0&seq={delta['seq']}")
    await page.wait_for_function("s => document.querySelector('#pf-last-seq').textContent === s",
                                 arg=str(delta["seq"]))
    await page.wait_for_function(SHOWS, arg=[LANE_TEXT, FIRST.strip()])
    await page.wait_for_function(SHOWS, arg=[INSPECTOR_TEXT, FIRST.strip()])
    assert SECOND not in await page.locator(INSPECTOR_TEXT).inner_text()
    await page.locator("body").press("End")
    await page.wait_for_function(
        "() => !document.querySelector('#pf-run').classList.contains('pf-replaying')")
    assert await page.locator(f"{LANE_TEXT}, #pf-inspector .pf-streaming").count() == 0
