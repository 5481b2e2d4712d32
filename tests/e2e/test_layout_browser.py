"""The run page's workspace at a laptop's 1024x768 in a real browser (Debian's chromium):
the lanes keep room, the inspector stays on the page, and the splitters resize the
panels by mouse and by keyboard, within their limits, and keep the sizes across a reload
and onto the session page; and paths and barrier ids read as step names and branch keys.
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, run_ended, shot, start_run
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

WIDTH, HEIGHT = 1024, 768
LANES_MIN = 400
"""``LIMITS.lanesMin`` in ``static/picoflow_web/js/panel_sizes.js``."""
TREE_MIN = 160
"""``LIMITS.treeMin``."""


def label(*names: str) -> str:
    """A path's label as ``labels.js`` joins it."""
    return " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} ".join(names)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def finished_run_at_1024(page: Any) -> str:
    await page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    run_id = await start_run(page, "ResearchFlow", "research tide pools")
    await run_ended(page, timeout=30_000)
    await page.locator('.pf-row.pf-branch[data-path="0"]').first.click()
    await page.wait_for_selector('#pf-inspector[data-path="0"]:not([data-barrier])')
    return run_id


async def widths(page: Any) -> dict[str, float]:
    """The drawn widths of the panels, and how wide the page can scroll."""
    return await page.evaluate("""() => {
        const w = (sel) => document.querySelector(sel).getBoundingClientRect().width;
        const inspector = document.querySelector('#pf-inspector').getBoundingClientRect();
        return {
            lanes: w('#pf-axis'), tree: w('.pf-col-tree'), inspector: inspector.width,
            inspectorRight: inspector.right, inspectorLeft: inspector.left,
            scrollWidth: document.documentElement.scrollWidth,
            clientWidth: document.documentElement.clientWidth,
        };
    }""")  # type: ignore[no-any-return]


async def drag(page: Any, selector: str, dx: float) -> None:
    box = await page.locator(selector).bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    await page.mouse.move(x, y)
    await page.mouse.down()
    await page.mouse.move(x + dx / 2, y, steps=4)
    await page.mouse.move(x + dx, y, steps=4)
    await page.mouse.up()


def assert_usable(w: dict[str, float]) -> None:
    assert w["lanes"] >= 0.4 * WIDTH, f"the lanes are squeezed to {w['lanes']:.0f} px"
    assert w["scrollWidth"] <= w["clientWidth"], "the page scrolls sideways"
    assert w["inspectorLeft"] >= 0 and w["inspectorRight"] <= w["clientWidth"], \
        "the inspector is not on the page"
    assert w["inspector"] >= 240, f"the inspector is squeezed to {w['inspector']:.0f} px"


async def test_at_1024_the_lanes_keep_room_and_the_inspector_stays_on_the_page(page: Any) -> None:
    await finished_run_at_1024(page)
    w = await widths(page)
    await shot(page, "layout-1024")
    assert_usable(w)
    # The inspector is beside the lanes, not pushed under them.
    assert w["inspectorLeft"] > w["lanes"]
    assert await page.locator("#pf-inspector .pf-visibility").is_visible()


async def test_dragging_the_splitters_resizes_the_panels_and_survives_a_reload(page: Any) -> None:
    run_id = await finished_run_at_1024(page)
    before = await widths(page)

    await drag(page, "[data-resize=tree]", -60)
    narrower = await widths(page)
    assert narrower["tree"] <= before["tree"] - 50
    assert narrower["lanes"] >= before["lanes"] + 50
    assert abs(narrower["inspector"] - before["inspector"]) < 1

    await drag(page, "[data-resize=inspector]", -80)
    wider = await widths(page)
    assert wider["inspector"] >= before["inspector"] + 70
    assert wider["lanes"] <= narrower["lanes"] - 70
    assert abs(wider["tree"] - narrower["tree"]) < 1
    # The rows follow the column header: the tree cells are as wide as it.
    cells = await page.eval_on_selector_all(
        ".pf-row .pf-cell-tree", "cells => cells.map(c => c.getBoundingClientRect().width)")
    assert cells and all(abs(c - wider["tree"]) < 1 for c in cells)
    await shot(page, "layout-1024-dragged")

    await page.reload()
    await page.wait_for_selector("#pf-run[data-status=finished]")
    await page.wait_for_selector(".pf-row.pf-branch")
    reloaded = await widths(page)
    assert abs(reloaded["inspector"] - wider["inspector"]) < 1
    assert abs(reloaded["tree"] - wider["tree"]) < 1
    assert_usable(reloaded)

    # The session page shares the workspace, and the sizes the reader chose.
    session = await page.get_attribute("#pf-run-session", "href")
    assert session and run_id
    await page.goto(session)
    await page.wait_for_selector("[data-resize=inspector]")
    on_session = await widths(page)
    assert abs(on_session["inspector"] - wider["inspector"]) < 1
    assert abs(on_session["tree"] - wider["tree"]) < 1


async def test_the_splitters_move_by_keyboard_and_stop_at_their_limits(page: Any) -> None:
    await finished_run_at_1024(page)
    tree = page.locator("[data-resize=tree]")
    await tree.focus()
    start = (await widths(page))["tree"]
    for _ in range(3):
        await page.keyboard.press("ArrowLeft")
    moved = await widths(page)
    assert abs(moved["tree"] - (start - 48)) < 1
    assert await tree.get_attribute("aria-valuenow") == str(round(moved["tree"]))
    await page.keyboard.press("Home")
    assert abs((await widths(page))["tree"] - TREE_MIN) < 1
    # The tree's own keys did not take the arrows: the selection stayed where it was.
    assert await page.get_attribute("#pf-inspector", "data-path") == "0"

    # However far it is pushed, the inspector leaves the lanes their minimum.
    inspector = page.locator("[data-resize=inspector]")
    await inspector.focus()
    await page.keyboard.press("End")
    at_max = await widths(page)
    assert at_max["lanes"] >= LANES_MIN - 1
    await drag(page, "[data-resize=inspector]", -600)
    dragged = await widths(page)
    assert dragged["lanes"] >= LANES_MIN - 1
    assert abs(dragged["inspector"] - at_max["inspector"]) < 1
    assert dragged["scrollWidth"] <= dragged["clientWidth"]
    # And the other way, it stops at its own minimum instead of collapsing.
    await drag(page, "[data-resize=inspector]", 2000)
    assert (await widths(page))["inspector"] >= 259
    await shot(page, "layout-1024-limits")


async def test_paths_and_barrier_ids_read_as_branch_keys(page: Any) -> None:
    await finished_run_at_1024(page)
    # The tree: the nested barrier under its caller's key.
    nested = page.locator('.pf-row.pf-barrier[data-barrier="0/b0"] .pf-row-key')
    assert await nested.inner_text() == label("Planner", "barrier 0")
    assert "0/b0" in await page.get_attribute('.pf-row.pf-barrier[data-barrier="0/b0"]', "title")

    # A nested branch's inspector: its callers' keys and its own, the path beside them.
    await page.locator('.pf-row.pf-branch[data-path="0.1"]').first.click()
    await page.wait_for_selector('#pf-inspector[data-path="0.1"]')
    head = page.locator("#pf-inspector .pf-inspector-head")
    assert await head.locator(".pf-inspector-title").inner_text() == label("Planner", "news")
    assert "path 0.1" in await head.inner_text()
    barrier = page.locator('#pf-inspector .pf-facts [data-select-barrier="0/b0"]')
    assert await barrier.inner_text() == label("Planner", "barrier 0")
    assert await barrier.get_attribute("title") == "barrier 0/b0"
    caller = page.locator('#pf-inspector .pf-facts [data-select-path="0"]')
    assert await caller.inner_text() == "Planner"
    assert await caller.get_attribute("title") == "path 0"

    # The barrier's inspector, opened from that link, and its reductions' inputs.
    await barrier.click()
    await page.wait_for_selector('#pf-inspector[data-barrier="0/b0"]')
    assert await page.locator("#pf-inspector .pf-inspector-title").inner_text() == \
        label("Planner", "barrier 0")
    inputs = await page.eval_on_selector_all(
        "#pf-inspector .pf-reduction-table [data-select-path]", "bs => bs.map(b => b.textContent)")
    assert label("Planner", "papers") in inputs and label("Planner", "news") in inputs
    await shot(page, "labels-barrier-inspector")
