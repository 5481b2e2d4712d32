"""The page tells the truth (issue 37, items 1, 2, 5 and 9) in a real browser (Debian's
chromium), on committed golden traces imported as copies.

1. A stopped turn (TimingFlow "pipelined", stopped once A's chain was done): the run
   page's and the session replay's canonical state is what the session store holds
   (revision 1: no step state); A's and the workers' results are listed apart, as
   published in memory and never saved.
2. A cancelled fan-out in which branches obey the token: the cascade lists them as running
   when the cancel came, none as "already finished".
5. An imported session copy lists the steps its cursor went through, as the original does.
9. A branch's "Could NOT see" lists what a sibling's inner join published into the
   sibling's scope (the seed's C, which does not see D's and E's results in B's scope).

Screenshots: ``test-artifacts/truth_*.png``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, shot
from tests.golden.goldens import BY_NAME
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

IMPORT = """async body => {
  const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
  const r = await fetch('/api/import?copy=1', {method: 'POST', body,
    headers: {'Content-Type': 'application/x-ndjson', 'X-CSRFToken': token}});
  return [r.status, await r.json()];
}"""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def imported(page: Any, golden: str) -> list[dict[str, Any]]:
    """Import golden ``golden`` as a copy; its runs as the import answers them."""
    await page.goto("/")
    body = BY_NAME[golden].jsonl_path.read_text("utf-8")
    status, answer = await page.evaluate(IMPORT, body)
    assert status == 201, answer
    runs: list[dict[str, Any]] = answer["runs"]
    return runs


async def run_page(page: Any, run_id: str, last_seq: int, hash_: str = "") -> None:
    """Open a run's page and wait until it folded its stored events."""
    await page.goto(f"/runs/{run_id}/{hash_}")
    await page.wait_for_function(
        "s => document.querySelector('#pf-last-seq')?.textContent === String(s)", arg=last_seq)


async def test_a_stopped_turn_shows_the_saved_state_and_what_memory_had_apart(page: Any) -> None:
    (run,) = await imported(page, "stopped_turn")
    events = [json.loads(line) for line in
              BY_NAME["stopped_turn"].jsonl_path.read_text("utf-8").splitlines()]
    await run_page(page, run["id"], events[-1]["seq"], "#inv=")
    inspector = page.locator('#pf-inspector[data-path=""]')
    canonical = inspector.locator('[data-section="canonical"]')
    await canonical.wait_for()
    # Revision 1 holds no step state: nothing of A's chain is canonical.
    assert "Empty: no step state yet." in await canonical.inner_text()
    assert "A1 done" not in await canonical.inner_text()
    unsaved = inspector.locator(".pf-unsaved")
    text = await unsaved.inner_text()
    assert "Published in memory, not saved: the turn was stopped" in text
    assert "revision 1" in text and "A1 done" in text and "A2 done" in text
    assert await unsaved.locator(".pf-unsaved-row").count() == 2
    await shot(page, "truth_stopped_turn_run")

    # A1's publication reached memory only, and says so.
    await page.goto(f"/runs/{run['id']}/#inv=0.0")
    await page.wait_for_selector('#pf-inspector[data-path="0.0"]')
    assert "not saved: the turn was stopped" in await page.locator("#pf-inspector").inner_text()

    # The session replay at the end of the turn: the same state, the same list apart.
    await page.goto(f"/sessions/{run['session_id']}/")
    await page.wait_for_selector('#pf-session[data-loaded="1"][data-turn="1"]')
    state = page.locator("#pf-state")
    await state.locator(".pf-unsaved").wait_for()
    assert await state.locator(".pf-state-step").count() == 0
    rows = await state.locator(".pf-unsaved-row").evaluate_all(
        "rows => rows.map(r => r.dataset.step + '.' + r.dataset.field)")
    assert rows == ["Stage.outputs", "Worker.completed"]
    assert "not saved: the turn was stopped" in await state.inner_text()
    await shot(page, "truth_stopped_turn_session")


async def test_branches_that_obeyed_the_token_were_running_when_the_cancel_came(
        page: Any) -> None:
    (run,) = await imported(page, "obeyed_cancel")
    events = [json.loads(line) for line in
              BY_NAME["obeyed_cancel"].jsonl_path.read_text("utf-8").splitlines()]
    await run_page(page, run["id"], events[-1]["seq"], "#barrier=b0")
    cascade = page.locator('#pf-inspector[data-barrier="b0"] .pf-cascade')
    await cascade.wait_for()
    sentence = await cascade.locator(".pf-cascade-sentence").inner_text()
    assert "3 running, 1 queued" in sentence, sentence
    assert "already finished" not in sentence
    at = await cascade.locator(".pf-cascade-row").evaluate_all(
        "rows => Object.fromEntries(rows.map(r => [r.dataset.path, r.dataset.at]))")
    assert at == {"0": "running", "1": "running", "2": "running", "3": "queued"}
    await cascade.scroll_into_view_if_needed()
    await shot(page, "truth_obeyed_cancel_cascade")


async def test_an_imported_session_copy_lists_the_steps_its_cursor_went_through(
        page: Any) -> None:
    runs = await imported(page, "ab_timing")
    session = runs[0]["session_id"]
    await page.goto(f"/sessions/{session}/")
    await page.wait_for_selector('#pf-session[data-loaded="1"]')
    trail = page.locator(".pf-trail-item")
    # Two turns: the Stopwatch, then per turn its workers, their stages, the stage pairs.
    assert await trail.count() == 11
    assert "The cursor has not moved yet" not in await page.locator("body").inner_text()
    first = await trail.first.inner_text()
    assert "Stopwatch" in first
    await shot(page, "truth_imported_session_trail")


async def test_could_not_see_lists_a_siblings_inner_join_results(page: Any) -> None:
    runs = await imported(page, "ab_timing")
    events = [json.loads(line) for line in
              BY_NAME["ab_timing"].jsonl_path.read_text("utf-8").splitlines()
              if json.loads(line)["run_id"] == "ab_timing-1"]
    # Worker B (path 1) at its end: worker A's stages published into A's scope only.
    await run_page(page, runs[0]["id"], events[-1]["seq"], "#inv=1")
    invisible = page.locator('#pf-inspector[data-path="1"] .pf-invisible')
    await invisible.wait_for()
    joined = invisible.locator(".pf-invisible-row.pf-invisible-join")
    assert await joined.count() >= 1
    text = await joined.first.inner_text()
    assert "its inner join's result" in text and "A1 done" in text
    await invisible.scroll_into_view_if_needed()
    await shot(page, "truth_could_not_see_inner_join")
