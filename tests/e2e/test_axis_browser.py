"""The run page's time axis in a real browser (Debian's chromium), on the cancellation demo
(CancelFlow: a deadline cancels a bounded barrier) and the nested research demo: the
cancel-request and grace-end marks, the cancellation cascade and the critical-path highlight
each match the run's stored events, read back through ``GET /api/runs/<id>/events``.
Screenshots: ``test-artifacts/axis-*.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, run_ended, shot, start_run, stored_events
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

ANGLE = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}"
WATCH = f"PriceWatch {ANGLE} barrier 0 (b0)"
"""CancelFlow's barrier as sentences name it: its label, then its id."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def finished_run(page: Any, flow: str, message: str) -> list[dict[str, Any]]:
    run_id = await start_run(page, flow, message)
    await run_ended(page, timeout=30_000)
    return await stored_events(page, run_id)


def one(events: list[dict[str, Any]], type_: str, barrier: str) -> dict[str, Any]:
    found = [e for e in events if e["type"] == type_ and e.get("barrier") == barrier]
    assert len(found) == 1, f"{len(found)} {type_} events for {barrier}"
    return found[0]


def last_to_end(events: list[dict[str, Any]], barrier: str) -> str:
    """The branch of ``barrier`` whose end event has the greatest offset (then seq)."""
    ends = [e for e in events if e["type"] in ("branch.fulfilled", "branch.rejected")
            and e["barrier"] == barrier]
    return str(max(ends, key=lambda e: (e["offset"], e["seq"]))["path"])


def keys_of(events: list[dict[str, Any]]) -> dict[str, str]:
    return {r["path"]: r["key"] for e in events if e["type"] == "barrier.forked"
            for r in e["requests"]}


async def axis_marks(page: Any, kind: str) -> list[dict[str, Any]]:
    return await page.eval_on_selector_all(  # type: ignore[no-any-return]
        f'#pf-axis .pf-axis-mark[data-kind="{kind}"]',
        "marks => marks.map(m => ({barrier: m.dataset.barrier, title: m.title,"
        " left: parseFloat(m.style.left)}))")


async def axis_left(page: Any, offset: float) -> float:
    """Where ``offset`` sits on the axis as drawn, in percent."""
    start, end = await page.eval_on_selector(
        "#pf-axis", "a => [parseFloat(a.dataset.start), parseFloat(a.dataset.end)]")
    return (offset - start) / (end - start) * 100


async def show(page: Any, selector: str) -> None:
    """Scroll the inspector to ``selector`` and the page to its top, for a screenshot."""
    await page.evaluate("sel => { document.querySelector(sel).scrollIntoView({block: 'start'});"
                        " window.scrollTo(0, 0); }", selector)


async def highlighted(page: Any) -> tuple[list[str], list[str]]:
    paths = "r => r.map(e => e.dataset.path)"
    rows = await page.eval_on_selector_all(".pf-branch.pf-critical", paths)
    lanes = await page.eval_on_selector_all(".pf-lane.pf-critical", paths)
    return sorted(rows), sorted(lanes)


async def test_the_cancellation_demo_marks_its_cancel_and_grace_end_and_shows_the_cascade(
    page: Any,
) -> None:
    events = await finished_run(page, "CancelFlow", "Watch prices until the deadline")
    keys = keys_of(events)
    fork = one(events, "barrier.forked", "b0")
    requested = one(events, "cancel.requested", "b0")
    propagated = one(events, "cancel.propagated", "b0")
    grace = one(events, "cancel.grace_expired", "b0")
    assert fork["branch_timeout"] is None, "the demo sets no branch timeout"

    # The marks: one cancel request and one grace end, where their events are, in words.
    await page.wait_for_selector('#pf-axis .pf-axis-mark[data-kind="grace"]')
    cancels = await axis_marks(page, "cancel")
    assert [m["barrier"] for m in cancels] == ["b0"]
    assert cancels[0]["title"].startswith(
        f"cancel requested for {WATCH}: {requested['reason']} · "
        f"{len(propagated['running'])} running, "
        f"{len(propagated['queued'])} queued")
    assert requested["reason"] == "deadline reached"
    assert abs(cancels[0]["left"] - await axis_left(page, requested["offset"])) < 0.01
    graces = await axis_marks(page, "grace")
    assert [m["barrier"] for m in graces] == ["b0"]
    closed = ", ".join(f"{p} ({keys[p]})" for p in grace["closed"])
    assert closed == "1 (legacy)"
    ms = round((grace["offset"] - requested["offset"]) * 1000)
    assert graces[0]["title"].startswith(
        f"grace ended for {WATCH} {ms}ms after the cancel request: "
        f"{closed} lost publication rights")
    assert abs(graces[0]["left"] - await axis_left(page, grace["offset"])) < 0.01
    assert cancels[0]["left"] < graces[0]["left"]
    # No branch_timeout, no timeout or deadline marks: the page says only what events say.
    assert await axis_marks(page, "timeout") == [] and await axis_marks(page, "deadline") == []

    # The cascade of the barrier, as cancel.propagated and cancel.grace_expired list it.
    await page.click('.pf-barrier[data-barrier="b0"]')
    await page.wait_for_selector('#pf-inspector[data-barrier="b0"] .pf-cascade')
    cascade = page.locator("#pf-inspector .pf-cascade")
    sentence = await cascade.locator(".pf-cascade-sentence").inner_text()
    assert sentence == (f"Cancel requested: {requested['reason']}. At that moment: "
                        f"{len(propagated['running'])} running, "
                        f"{len(propagated['queued'])} queued, "
                        f"{len(grace['closed'])} still running when the grace period ended.")
    assert "asked by" not in sentence, "a flow's own deadline token names nobody"
    rows = await cascade.locator(".pf-cascade-row").evaluate_all(
        "rows => rows.map(r => [r.dataset.path, r.dataset.at, r.dataset.late === '1'])")
    expected = [[p, "running" if p in propagated["running"] else "queued", p in grace["closed"]]
                for p in (r["path"] for r in fork["requests"])]
    assert rows == expected
    assert [r[0] for r in rows if r[1] == "running"] == propagated["running"] == ["0", "1"]
    assert [r[0] for r in rows if r[1] == "queued"] == propagated["queued"] == ["2", "3"]
    # What each had spent: the crawler's model tokens, the legacy call's running time.
    tokens = sum(e["total_tokens"] for e in events
                 if e["type"] == "model.finished" and e["path"] == "0")
    north = await cascade.locator('.pf-cascade-row[data-path="0"]').inner_text()
    assert f"{tokens} tokens" in north
    legacy = await cascade.locator('.pf-cascade-row[data-path="1"]').inner_text()
    assert "running" in legacy and "late: lost its rights" in legacy
    assert "never ran" in await cascade.locator('.pf-cascade-row[data-path="2"]').inner_text()
    await show(page, "#pf-inspector .pf-cascade")
    await shot(page, "axis-cancel-cascade")

    # The critical path: the join waited on the branch whose end came last.
    slowest = last_to_end(events, "b0")
    assert slowest == "1", "the legacy call, cut at the grace end, ended last"
    critical = page.locator("#pf-inspector .pf-critical-section")
    assert await critical.locator(".pf-critical-sentence").inner_text() == \
        f"The join of {WATCH} waited on {slowest} ({keys[slowest]})."
    assert await highlighted(page) == ([], [])
    toggle = critical.locator(".pf-critical-toggle")
    await toggle.click()
    await page.wait_for_selector(".pf-lane.pf-critical")
    assert await highlighted(page) == ([slowest], [slowest])
    assert await toggle.get_attribute("aria-pressed") == "true"
    await show(page, "#pf-inspector .pf-critical-section")
    await shot(page, "axis-cancel-critical")
    await toggle.click()
    await page.wait_for_function("() => !document.querySelector('.pf-critical')")
    assert await toggle.get_attribute("aria-pressed") == "false"


async def test_the_critical_path_of_a_nested_join_runs_down_to_its_slowest_inner_branch(
    page: Any,
) -> None:
    events = await finished_run(page, "ResearchFlow", "Research tide pools")
    keys = keys_of(events)
    outer = last_to_end(events, "b0")
    inner_barrier = next(e["barrier"] for e in events
                         if e["type"] == "barrier.forked" and e["path"] == outer)
    inner = last_to_end(events, inner_barrier)
    await page.click('.pf-barrier[data-barrier="b0"]')
    await page.wait_for_selector('#pf-inspector[data-barrier="b0"] .pf-critical-section')
    sentence = await page.locator("#pf-inspector .pf-critical-sentence").inner_text()
    assert sentence == (f"The join of ResearchDesk {ANGLE} barrier 0 (b0) "
                        f"waited on {outer} ({keys[outer]}), "
                        f"which waited on {inner} ({keys[inner]}).")
    steps = await page.eval_on_selector_all("#pf-inspector .pf-critical-step",
                                            "s => s.map(e => e.dataset.path)")
    assert steps == [outer, inner]
    # The key toggles the selected barrier's path, like the button.
    await page.locator("#pf-viewport").focus()
    await page.keyboard.press("c")
    await page.wait_for_selector(".pf-lane.pf-critical")
    assert await highlighted(page) == (sorted([outer, inner]), sorted([outer, inner]))
    assert await page.get_attribute("#pf-axis", "data-critical") == "b0"
    await show(page, "#pf-inspector .pf-critical-section")
    await shot(page, "axis-nested-critical")
    await page.keyboard.press("c")
    await page.wait_for_function("() => !document.querySelector('.pf-critical')")
