"""Replay benchmark: a stored run's page in headless Debian chromium (Playwright).

For stored FanOutFlow runs of ``--branches`` (default 10,000 and 100,000), executed by a
worker first, then opened on the run page:

* **first render**: navigation start to the first branch row drawn, timed in the page;
* **all applied**: navigation start to every stored event folded (``#pf-event-count``,
  timed in the page; what Playwright's polling saw is printed beside both), against
  the floor measured in the same page: the page's own reader (``streamStoredEvents``: the
  compact JSONL stream of ``/api/runs/<id>/events``, parsed) with nothing folded or drawn
  (the ratio is printed);
* **scrubber step**: one step back (``,``) from a position mid-run, median of ``--steps``
  steps: the main thread's work for it (the key handler and the render in the next frame;
  one frame is 16 ms), and the latency until the second frame after the key (the step
  painted, frame ticks included);
* **JS heap** after a collection, with the page at the end and while pinned mid-run
  (Chrome DevTools Protocol ``Runtime.getHeapUsage``).

Production settings (``PICOFLOW_DEBUG=0``, collected static files).

    .venv/bin/python bench/replay.py [--branches 10000 100000] [--steps 9] [--opens 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from browser import START, production_page, wait_finished  # noqa: E402
from playwright.sync_api import Page  # noqa: E402

# The page's own reader (api.js, as the page imports it), handing each batch to nothing.
FETCH_ALL = """async id => {
  const href = document.querySelector('link[rel=modulepreload][href*="/js/api."]').href;
  const { streamStoredEvents } = await import(href);
  const started = performance.now();
  const count = await streamStoredEvents(id, -1, () => {});
  return [performance.now() - started, count];
}"""

# One step back: [work, latency] in ms. Work is what the step costs the main thread: the
# key handler, plus the frame's callbacks from the frame's start to ours, which the page's
# render precedes (it was scheduled by the key, before ours). Latency is from the key to
# the second frame after it (the step painted), which includes waiting for frame ticks.
STEP = """async () => {
  const frame = () => new Promise((done) => requestAnimationFrame((t) => done(t)));
  await frame();
  const started = performance.now();
  document.body.dispatchEvent(new KeyboardEvent("keydown", {key: ",", bubbles: true}));
  const handled = performance.now();
  const frameStart = await frame();
  const rendered = performance.now();
  await frame();
  const work = (handled - started) + (rendered - Math.max(frameStart, handled));
  return [work, performance.now() - started];
}"""


# In the page, from navigation start (performance.now()): when the first branch row was
# put in the DOM (it is painted in the same frame) and when the event count changed. What
# Playwright sees comes later by its own polling, which waits for a task slot the loading
# page gives every 50 ms; both are printed.
MARKS = """(() => {
  const marks = window.__pfMarks = {branch: null, counts: []};
  new MutationObserver(() => {
    const now = performance.now();
    if (marks.branch === null && document.querySelector('.pf-branch')) marks.branch = now;
    const count = document.querySelector('#pf-event-count');
    const n = count ? Number(count.textContent) : NaN;
    const last = marks.counts.at(-1);
    if (count && (!last || last[1] !== n)) marks.counts.push([now, n]);
  }).observe(document, {subtree: true, childList: true, characterData: true});
})();"""


def heap_mb(page: Page) -> float:
    cdp = page.context.new_cdp_session(page)
    cdp.send("HeapProfiler.collectGarbage")
    used = cdp.send("Runtime.getHeapUsage")["usedSize"]
    cdp.detach()
    return float(used) / 1e6


def open_run(page: Page, run_id: str, total: int) -> tuple[float, float, float, float]:
    """Open the run page once: (first render, all applied) timed in the page, then as
    Playwright saw them, in seconds."""
    started = time.perf_counter()
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector(".pf-branch", timeout=600_000)
    first_render = time.perf_counter() - started
    page.wait_for_function(
        "total => Number(document.querySelector('#pf-event-count').textContent) === total",
        arg=total, timeout=600_000, polling=50)
    applied = time.perf_counter() - started
    marks = page.evaluate("() => window.__pfMarks")
    in_page_applied = next(t for t, n in marks["counts"] if n == total)
    return marks["branch"] / 1000, in_page_applied / 1000, first_render, applied


def measure(page: Page, branches: int, steps: int, opens: int) -> dict[str, Any]:
    page.goto("/")
    run_id = page.evaluate(START, ["FanOutFlow", {"branches": branches}])
    total = wait_finished(page, run_id, timeout=1800)["event_count"]
    # The first open loads the page's modules cold; the median is of every open.
    rounds = [open_run(page, run_id, total) for _ in range(opens)]
    first = rounds[0]
    first_render, in_page_applied, seen_render, applied = (
        statistics.median(r[i] for r in rounds) for i in range(4))
    floor_ms, fetched = page.evaluate(FETCH_ALL, run_id)
    heap_live = heap_mb(page)
    # Pin the scrubber mid-run (URL position), then step back one event at a time.
    page.evaluate("n => { const s = document.querySelector('#pf-seq'); s.value = String(n);"
                  " s.dispatchEvent(new Event('input', {bubbles: true})); }", total // 2)
    page.wait_for_timeout(500)
    samples = [page.evaluate(STEP) for _ in range(steps)]
    work = [w for w, _ in samples]
    latency = [lat for _, lat in samples]
    heap_pinned = heap_mb(page)
    return {"total": total, "fetched": fetched, "first_render": first_render,
            "first_render_seen": seen_render, "applied": in_page_applied,
            "applied_seen": applied, "cold": first, "opens": opens, "floor": floor_ms / 1000,
            "step": statistics.median(work),
            "step_max": max(work), "step_latency": statistics.median(latency),
            "heap_live": heap_live, "heap_pinned": heap_pinned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--steps", type=int, default=9)
    parser.add_argument("--opens", type=int, default=3,
                        help="times the run page is opened (medians; the first is cold)")
    args = parser.parse_args()
    with production_page() as page:
        page.add_init_script(MARKS)
        for branches in args.branches:
            m = measure(page, branches, args.steps, args.opens)
            cold = m["cold"]
            print(f"{branches:,} branches, {m['total']:,} stored events "
                  f"({m['fetched']:,} fetched for the floor), median of {m['opens']} opens:")
            print(f"  first render            {m['first_render']:7.2f} s   (first open, cold: "
                  f"{cold[0]:.2f} s; Playwright saw it at {m['first_render_seen']:.2f} s)")
            print(f"  all events applied      {m['applied']:7.2f} s   (first open: "
                  f"{cold[1]:.2f} s; Playwright saw it at {m['applied_seen']:.2f} s)")
            print(f"  floor (fetch + parse only) {m['floor']:.2f} s, ratio "
                  f"{m['applied'] / m['floor']:.1f}x")
            print(f"  scrubber step (median)  {m['step']:7.1f} ms of work (max "
                  f"{m['step_max']:.1f} ms; one frame is 16 ms), painted "
                  f"{m['step_latency']:.1f} ms after the key (two frame ticks)")
            print(f"  JS heap                 {m['heap_live']:7.1f} MB at the end, "
                  f"{m['heap_pinned']:.1f} MB pinned mid-run")


if __name__ == "__main__":
    main()
