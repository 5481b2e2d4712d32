"""The run page's first screen and its words, in a real browser (Debian's chromium): on a
run whose join was invalidated, the first 950 px show the header, the tree and the lanes
(the conflict card is one line until opened, in place); a barrier has one name everywhere
(its label carries the number its id does); tree labels read whole, the tree column is
widened and kept for the signed-in user; the header says "reducer failed" for a reducer
failure and a branch that raised says so; and the session page says what a turn's status
is, explains its conversation count and keeps its diff marks across a reload.
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import ARTIFACTS, FRAME, dashboard, run_ended, shot, start_run
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

WIDTH, HEIGHT = 1280, 950
CARD = '.pf-conflicts .pf-conflict[data-barrier="b0"]'


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def ended_run(page: Any, flow: str, message: str) -> str:
    await page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    run_id = await start_run(page, flow, message)
    await run_ended(page, timeout=30_000)
    await page.wait_for_selector(".pf-row.pf-branch")
    return run_id


async def viewport_shot(page: Any, name: str) -> None:
    """What a reader sees without scrolling, in ``test-artifacts/<name>.png``."""
    ARTIFACTS.mkdir(exist_ok=True)
    await page.evaluate("window.scrollTo(0, 0)")
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


async def box(page: Any, selector: str) -> dict[str, float]:
    found = await page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not drawn"
    return found  # type: ignore[no-any-return]


async def test_a_conflict_run_shows_the_header_tree_and_lanes_on_the_first_screen(
    page: Any,
) -> None:
    await ended_run(page, "ConflictFlow", "Plan the team offsite")
    await page.wait_for_selector(CARD)
    await page.evaluate(FRAME)
    card = page.locator(CARD)
    line = await box(page, f"{CARD} .pf-conflict-title")
    # One line: the field, its writers and the barrier's link, the rest folded away.
    assert (await box(page, CARD))["height"] <= line["height"] + 20
    assert line["height"] < 40
    assert await card.get_attribute("data-expanded") == "0"
    assert not await card.locator(".pf-conflict-details").is_visible()
    assert "VenueScout.venue" in await card.locator(".pf-conflict-heading").inner_text()
    writers = await card.locator(".pf-conflict-writers [data-select-path]").evaluate_all(
        "bs => bs.map(b => [b.dataset.selectPath, b.textContent])")
    assert writers == [["0", "north"], ["1", "south"]]
    assert await card.locator('.pf-conflict-title [data-select-barrier="b0"]').count() == 1
    # The header, the tree's rows and their lanes all start inside the first 950 px.
    for selector in (".pf-run-head", '.pf-row.pf-barrier[data-barrier="b0"]',
                     '.pf-row.pf-branch[data-path="1"]', '.pf-lane[data-path="1"]', "#pf-axis"):
        drawn = await box(page, selector)
        bottom = drawn["y"] + drawn["height"]
        assert bottom <= HEIGHT, f"{selector} ends at {bottom}"
    await viewport_shot(page, "first-screen-conflict")

    # Opened in place: the card grows where it is, and the tree follows below it.
    tree_before = (await box(page, '.pf-row.pf-branch[data-path="1"]'))["y"]
    card_before = (await box(page, CARD))["y"]
    await card.locator("[data-conflict-toggle]").click()
    await page.wait_for_selector(f'{CARD}[data-expanded="1"] .pf-conflict-details')
    assert await card.locator(".pf-conflict-details").is_visible()
    assert await card.locator(".pf-provenance .pf-conflict-row").count() == 2
    assert await card.locator("[data-conflict-toggle]").get_attribute("aria-expanded") == "true"
    assert (await box(page, CARD))["y"] == pytest.approx(card_before)
    assert (await box(page, '.pf-row.pf-branch[data-path="1"]'))["y"] > tree_before + 200
    # Opening it selected nothing: the toggle only folds and unfolds.
    assert await page.locator("#pf-inspector[data-barrier]").count() == 0
    await shot(page, "first-screen-conflict-opened")
    await card.locator("[data-conflict-toggle]").click()
    await page.wait_for_selector(f'{CARD}[data-expanded="0"]')
    assert not await card.locator(".pf-conflict-details").is_visible()


async def test_one_barrier_has_one_name_in_its_panel_and_on_its_card(page: Any) -> None:
    await ended_run(page, "ConflictFlow", "Plan the team offsite")
    await page.locator('.pf-row.pf-barrier[data-barrier="b0"]').click()
    await page.wait_for_selector('#pf-inspector[data-barrier="b0"]')
    title = await page.locator("#pf-inspector .pf-inspector-title").inner_text()
    assert title == "OffsitePlanner \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} barrier 0"
    head = await page.locator("#pf-inspector .pf-inspector-head").inner_text()
    assert "id b0" in head
    # Every "barrier N" the panel and the card say names the number the id carries.
    text = await page.locator("#pf-inspector").inner_text()
    text += await page.locator(CARD).inner_text()
    text += await page.get_attribute('.pf-row.pf-barrier[data-barrier="b0"]', "title") or ""
    numbers = set(re.findall(r"\bbarrier (\d+)", text))
    assert numbers == {"0"}, text
    assert not re.search(r"\bbarrier b\d", text), text
    await shot(page, "barrier-one-name")


async def test_tree_labels_read_whole_and_the_column_widens_for_this_user(page: Any) -> None:
    await ended_run(page, "BusFlow", "Book the bus")
    await page.evaluate(FRAME)
    keys = await page.eval_on_selector_all(
        ".pf-row .pf-row-key:not(.pf-activity-label)",
        """ks => ks.map(k => ({text: k.textContent, cut: k.scrollWidth > k.clientWidth + 1,
                             title: k.closest('.pf-row').title}))""")
    barrier = "BusDesk \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} barrier 0"
    assert {k["text"] for k in keys} >= {"design", "sales", barrier}
    assert [k["text"] for k in keys if k["cut"]] == []
    # Whatever the column cuts, the row's title says in full.
    assert all(k["text"] in k["title"] for k in keys), keys

    # The splitter widens the column; the width is kept for this user across a reload.
    before = (await box(page, ".pf-col-tree"))["width"]
    splitter = await box(page, "[data-resize=tree]")
    x, y = splitter["x"] + splitter["width"] / 2, splitter["y"] + 12
    await page.mouse.move(x, y)
    await page.mouse.down()
    await page.mouse.move(x + 60, y, steps=6)
    await page.mouse.up()
    wider = (await box(page, ".pf-col-tree"))["width"]
    assert wider >= before + 50
    stored = await page.evaluate("() => localStorage.getItem('pf:workspace-sizes:admin')")
    assert stored and f'"tree":{round(wider)}' in stored
    await page.reload()
    await page.wait_for_selector(".pf-row.pf-branch")
    assert abs((await box(page, ".pf-col-tree"))["width"] - wider) < 1
    # The inspector says a branch's whole label.
    await page.locator('.pf-row.pf-branch[data-path="0"]').click()
    await page.wait_for_selector('#pf-inspector[data-path="0"]')
    assert await page.locator("#pf-inspector .pf-inspector-title").inner_text() == "design"
    await viewport_shot(page, "tree-labels-widened")


async def test_a_reducer_failure_is_no_conflict_and_a_branch_that_raised_says_so(
    page: Any,
) -> None:
    bus = await ended_run(page, "BusFlow", "Book the bus")
    flag = page.locator("#pf-run-conflict-flag")
    await page.wait_for_function(
        "() => document.querySelector('#pf-run-conflict-flag').textContent === 'reducer failed'")
    assert await flag.is_visible()
    assert "Reducer failed on SeatBooker.seats" in await page.locator(
        f"{CARD} .pf-conflict-heading").inner_text()
    # The runs list knows only that a join was invalidated, and says no more than that.
    await page.goto("/")
    problem = page.locator(f'.pf-run-row[data-run-id="{bus}"] .pf-run-problem')
    assert await problem.inner_text() == "join invalidated"

    await ended_run(page, "AtomicFlow", "Book the trip")
    car = page.locator('.pf-row.pf-branch[data-path="2"]')
    await car.click()
    await page.wait_for_selector('#pf-inspector[data-path="2"]')
    badge = await page.locator("#pf-inspector .pf-publication-badge").inner_text()
    assert badge == "discarded: it raised SoldOutError"
    assert "by the join" not in await page.locator("#pf-inspector").inner_text()
    await shot(page, "branch-that-raised")


async def test_the_session_page_names_its_turn_explains_its_counts_and_keeps_its_marks(
    page: Any,
) -> None:
    await ended_run(page, "BusFlow", "Book the bus")
    session = await page.get_attribute("#pf-run-session", "href")
    assert session
    await page.goto(session)
    await page.wait_for_selector('#pf-session[data-loaded="1"]')
    # The flow goes on after its turn: the session is in progress, the turn finished.
    assert await page.locator("#pf-session-state").inner_text() == "in progress"
    assert await page.locator("#pf-session-status").inner_text() == "turn 1 finished"
    assert await page.locator(".pf-run-row .pf-badge-conflict").inner_text() == "reducer failed"

    # A at the turn's start, B at its end: the conversation count is explained.
    await page.locator("body").press("Home")
    await page.wait_for_selector('#pf-session[data-seq="0"]')
    await page.locator("body").press("a")
    await page.locator("body").press("End")
    await page.wait_for_function("() => document.querySelector('#pf-session').dataset.seq !== '0'")
    await page.locator("body").press("b")
    row = page.locator('#pf-diff-marks .pf-diff-row[data-place="session.conversation"]')
    await row.wait_for()
    note = await row.locator(".pf-diff-note").inner_text()
    assert "messages the latest model call" in note and "memory" in note
    marks = (await page.locator("#pf-mark-a-label").inner_text(),
             await page.locator("#pf-mark-b-label").inner_text())
    assert marks[0] == "turn 1 #0" and marks[1].startswith("turn 1 #")
    await page.wait_for_function(
        "() => /[#&]a=1\\.0(&|$)/.test(location.hash) && /[#&]b=1\\.\\d+/.test(location.hash)")

    await page.reload()
    await page.wait_for_selector('#pf-session[data-loaded="1"]')
    await page.wait_for_function(
        "m => document.querySelector('#pf-mark-b-label').textContent === m", arg=marks[1])
    assert await page.locator("#pf-mark-a-label").inner_text() == marks[0]
    assert await page.locator(
        '#pf-diff-marks .pf-diff-row[data-place="session.conversation"]').count() == 1
    await shot(page, "session-marks-reloaded")
