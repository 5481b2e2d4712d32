"""A 10,000-branch fan-out in a real browser (Debian's chromium): the barrier's overview
counts what the run's events say, the slowest branch is one click away, the inspector's
per-branch tables are paged, and the time axis zooms to a 10 ms window of single branches.
Screenshots: ``test-artifacts/fanout-*.png``."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, run_ended, shot
from tests.livedaphne import LiveDaphne

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

FORM = "#pf-start-form"
BRANCHES = 10_000
FAIL_EVERY = 97
DASH = "\u2013"  # the pager counts "1-100" with an en dash

ALL_EVENTS = """async id => {
  const out = [];
  let after = -1;
  for (;;) {
    const page = await (await fetch(`/api/runs/${id}/events?after=${after}&limit=5000`)).json();
    if (!page.events.length) return JSON.stringify(out);
    out.push(...page.events);
    after = page.last_seq;
  }
}"""
"""Every stored event of a run, fetched by the page, as one JSON text: tens of thousands of
events handed over as objects cost the test's process seconds of decoding."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0"},
                   extra_args=("--websocket-max-message-size", "67108864")) as found:
        yield found


def from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the recorded events say of the one barrier, read without the page's fold."""
    fork = next(e for e in events if e["type"] == "barrier.forked")
    # A fork this wide is recorded in pages: its head, then barrier.requested events.
    requests = [r for e in events if e["type"] in ("barrier.forked", "barrier.requested")
                and e["barrier"] == fork["barrier"] for r in e["requests"]]
    assert len(requests) == fork.get("count", len(fork["requests"]))
    step = {r["path"]: r["step"] for r in requests}
    status = dict.fromkeys(step, "queued")
    started: dict[str, float] = {}
    finished: dict[str, float] = {}
    for e in events:
        path = e.get("path", "")
        if path not in step:
            continue
        if e["type"] == "branch.started":
            status[path] = "running"
            started[path] = e["offset"]
        elif e["type"] in ("branch.fulfilled", "branch.rejected"):
            status[path] = e["type"].split(".")[1]
            finished[path] = e["offset"]
    join = next(e for e in events if e["type"] == "join.published")
    durations = {p: finished[p] - started[p] for p in finished if p in started}
    longest = max(durations.values())
    return {
        "barrier": fork["barrier"], "steps": Counter(step.values()),
        "status": Counter(status.values()), "durations": durations,
        "slowest": {p for p, d in durations.items() if d == longest}, "started": started,
        "finished": finished,
        "discarded": len(join["discarded"]),
        "rejected": sorted((p for p, s in status.items() if s == "rejected"), key=int),
    }


WINDOW = "a => [Number(a.dataset.start), Number(a.dataset.end)]"
"""The time axis's window as drawn (seconds), read at once."""

LANES = """() => {
  const axis = document.getElementById('pf-axis').dataset;
  const lanes = {};
  for (const lane of document.querySelectorAll('.pf-lane[data-path]')) {
    if (!lane.dataset.path) continue;
    const running = lane.querySelector('.pf-seg-running');
    lanes[lane.dataset.path] = running ? parseFloat(running.style.left) : null;
  }
  return [lanes, Number(axis.start), Number(axis.end)];
}"""
"""Each branch lane drawn (path: left edge of its running segment, percent) and the window
they were drawn in, read in one go."""


async def count(page: Any, selector: str) -> int:
    return int((await page.locator(selector).inner_text()).replace(",", ""))


async def test_a_ten_thousand_branch_barrier_has_an_overview_and_paged_tables(
    server: tuple[LiveDaphne, str], page: Any,
) -> None:
    await page.wait_for_selector(f'{FORM}[data-ready="1"]')
    await page.select_option(f"{FORM} select[name=flow]", "FanOutFlow")
    await page.fill('[name="config.branches"]', str(BRANCHES))
    await page.fill('[name="config.concurrency"]', "1000")
    await page.fill('[name="config.fail_every"]', str(FAIL_EVERY))
    await page.click(f"{FORM} button[type=submit]")
    await page.wait_for_url(re.compile(r"/runs/[0-9a-f]+/"))
    run_id = str(re.search(r"/runs/([0-9a-f]+)/", page.url).group(1))  # type: ignore[union-attr]
    await run_ended(page, timeout=240_000)

    truth = from_events(json.loads(await page.evaluate(ALL_EVENTS, run_id)))
    failed = BRANCHES // FAIL_EVERY
    assert truth["status"] == {"fulfilled": BRANCHES - failed, "rejected": failed}
    assert truth["steps"] == {"Tick": BRANCHES}
    barrier = truth["barrier"]

    await page.click(f'.pf-barrier[data-barrier="{barrier}"] .pf-row-key')
    overview = f'.pf-overview[data-barrier="{barrier}"]'
    await page.wait_for_selector(overview)
    group = f'{overview} .pf-overview-status .pf-overview-group[data-step="Tick"]'
    published = f'{overview} .pf-overview-publication .pf-overview-group[data-step="Tick"]'
    assert await count(page, f'{group} [data-count="total"]') == BRANCHES
    for status in ("queued", "running", "fulfilled", "rejected"):
        shown = await count(page, f'{group} [data-count="{status}"]')
        assert shown == truth["status"][status], status
    discarded = await count(page, f'{published} [data-count="discarded"]')
    assert discarded == truth["discarded"] == failed
    bins = await page.locator(f"{overview} .pf-bin").evaluate_all(
        "els => els.map(e => Number(e.dataset.count))")
    assert len(bins) > 1 and sum(bins) == len(truth["durations"]) == BRANCHES
    assert await page.locator(f"{overview} .pf-overview-list h3").nth(1).inner_text() == (
        f"Failed ({failed})")
    listed = await page.locator(f"{overview} .pf-failed li").evaluate_all(
        "els => els.map(e => e.dataset.path)")
    assert listed == truth["rejected"][:len(listed)] and len(listed) == 20

    # The join-wait table: one page of 100, slowest first, with paging.
    waits = ".pf-waits .pf-waits-table tbody tr"
    assert await page.locator(waits).count() == 100
    assert await page.locator(".pf-waits .pf-pager-label").inner_text() == f"1{DASH}100 of 10,000"
    top = await page.locator(f"{waits} [data-select-path]").first.get_attribute("data-select-path")
    assert top in truth["slowest"]
    ranked = await page.locator(f"{waits} [data-select-path]").evaluate_all(
        "els => els.map(e => e.dataset.selectPath)")
    assert [truth["durations"][p] for p in ranked] == sorted(
        (truth["durations"][p] for p in ranked), reverse=True)
    await page.click('.pf-waits [data-page="next"]')
    assert await page.locator(".pf-waits .pf-pager-label").inner_text() == f"101{DASH}200 of 10,000"
    assert await page.locator(waits).count() == 100
    second = await page.locator(f"{waits} [data-select-path]").evaluate_all(
        "els => els.map(e => e.dataset.selectPath)")
    assert min(truth["durations"][p] for p in ranked) >= max(truth["durations"][p] for p in second)
    assert not set(second) & set(ranked)
    # The branches table is paged too (collapsed by default at this size).
    await page.click('[data-section="branches"] > summary')
    assert await page.locator(".pf-branch-table tbody tr").count() == 100
    await page.locator(overview).scroll_into_view_if_needed()
    await shot(page, "fanout-overview")

    # One click on the slowest: it is selected, in the inspector and in the tree.
    await page.evaluate("document.querySelector('.pf-slowest').scrollIntoView()")
    assert await page.evaluate("document.getElementById('pf-inspector').scrollTop") > 0
    slowest = page.locator(f"{overview} .pf-slowest li").first
    path = await slowest.get_attribute("data-path")
    assert path in truth["slowest"]
    await slowest.locator("[data-select-path]").click()
    await page.wait_for_selector(f'#pf-inspector[data-path="{path}"]:not([data-barrier])')
    await page.wait_for_selector(f'.pf-branch.pf-selected[data-path="{path}"]')
    # It opens at its head, not at the scroll position of the barrier's long inspector.
    assert await page.evaluate("document.getElementById('pf-inspector').scrollTop") == 0
    assert await page.locator("#pf-inspector .pf-inspector-title").is_visible()
    await shot(page, "fanout-slowest-selected")

    # Zoom the time axis around it to a 10 ms window: branches that started microseconds
    # apart get lanes of their own; the whole run has one fork and one join mark.
    axis = page.locator("#pf-axis")
    assert await axis.locator('.pf-axis-mark[data-kind="fork"]').count() == 1
    assert await axis.locator('.pf-axis-mark[data-kind="join"]').count() == 1
    span = None
    start, end = await axis.evaluate(WINDOW)
    for _ in range(30):
        await page.keyboard.press("+")
        # Each press halves the window; the axis says "zoomed" from the first press on, so
        # only a narrower window than the last one drawn is this press's.
        await page.wait_for_function(
            """([start, end]) => {
              const axis = document.getElementById('pf-axis').dataset;
              return axis.zoomed && Number(axis.end) - Number(axis.start) < end - start;
            }""", arg=[start, end])
        start, end = await axis.evaluate(WINDOW)
        span = end - start
        if span <= 0.010:
            break
    assert span is not None and 0 < span <= 0.010
    assert start <= truth["started"][path] <= end
    await page.wait_for_function(
        """p => {
          const seg = document.querySelector(`.pf-lane[data-path="${p}"] .pf-seg-queued`);
          return seg && seg.getBoundingClientRect().width > 20;
        }""", arg=path)
    # Every lane drawn places its running segment where its branch.started says, so
    # branches that started microseconds apart get lanes of their own; a branch that did
    # not run inside the window has none. (How many ran beside the slowest one depends on
    # where the run's loop paused, so the events, not a count, are the truth here.)
    drawn, start, end = await page.evaluate(LANES)
    assert path in drawn and drawn[path] is not None
    for lane_path, left in drawn.items():
        began, ended = truth["started"][lane_path], truth["finished"][lane_path]
        if ended < start or began > end:
            assert left is None, lane_path
        else:
            expected = min(1.0, max(0.0, (began - start) / (end - start))) * 100
            assert left is not None and abs(left - expected) < 0.002, (lane_path, left, expected)
    assert len(drawn) > 1
    await shot(page, "fanout-zoomed")
    await page.keyboard.press("0")
    await page.wait_for_function("() => !document.getElementById('pf-axis').dataset.zoomed")

    # "rejected" in the overview shows exactly the failed branches in the tree.
    await page.click(f'#pf-inspector [data-select-barrier="{barrier}"]')
    await page.wait_for_selector(overview)
    await page.click(f'{group} [data-count="rejected"] [data-show-status="rejected"]')
    await page.wait_for_function(
        "() => document.getElementById('pf-status-filter').value === 'rejected'")
    # The filter is drawn once the first failed branch is the barrier's first row: the
    # select changes at the click, the tree a frame or two later, and the rows around the
    # slowest branch, drawn before, may hold that branch already.
    await page.wait_for_function(
        """([barrier, path]) => {
          const row = sel => document.querySelector(sel)?.getAttribute('aria-rowindex');
          const at = row(`.pf-barrier[data-barrier="${barrier}"]`);
          return at != null && Number(row(`.pf-branch[data-path="${path}"]`)) === Number(at) + 1;
        }""", arg=[barrier, truth["rejected"][0]])
    statuses = await page.locator(".pf-branch").evaluate_all(
        "els => [...new Set(els.map(e => e.dataset.status))]")
    assert statuses == ["rejected"]
    assert await page.locator(".pf-more").count() == 0
