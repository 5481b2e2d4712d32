"""Live page benchmark: a wide run's page while it streams, in headless Debian chromium.

For a FanOutFlow run of ``--branches`` (default 100,000) started from the page and
executed by a worker, with its run page opened at once:

* **first row**: from the POST that starts the run to the first branch row drawn (a
  MutationObserver in the page; clocks of the page, Unix milliseconds);
* **lag**: once a second while the run streams, how many events the page is behind the
  events stored (``#pf-last-seq`` against the run's ``event_count``): the median and the
  largest;
* **long tasks** on the page's main thread while it streams (a ``longtask``
  PerformanceObserver): how many took over 50 ms, and the longest; and the animation
  frames over 50 ms (``long-animation-frame``), each as its scripts, its rendering (style
  to paint) and the rest;
* **JS heap** once the run ended, after a collection;
* with ``--trace``, a chromium trace of the page's main thread while it streams
  (``main_thread.py``): its tasks by the wall clock and by the thread's own CPU time (a
  machine whose cores the server, its worker and the browser share can suspend the page
  mid-task, which a ``longtask`` observer counts as the page's), and the collector's pauses
  (tracing slows the machine: the other figures are read from a run without it);
* when the turn's first events were emitted (after the POST), and the largest stored event.

Measured in the same run, the baseline: the same run opened again once stored, first row
drawn from navigation start (``bench/replay.py`` measures that page at length); the ratio
live / stored is printed. Production settings (``PICOFLOW_DEBUG=0``, collected static
files), as ``bench/replay.py``.

    .venv/bin/python bench/live.py [--branches 100000] [--trace]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from browser import production_page, wait_finished  # noqa: E402
from main_thread import described, summary, traced  # noqa: E402
from playwright.sync_api import Page  # noqa: E402
from replay import heap_mb  # noqa: E402

# Installed before the run page's own scripts: when the first branch row appears, and
# every long task of the main thread.
WATCH = """() => {
  window.__pfLive = {firstRow: null, longTasks: []};
  new PerformanceObserver(list => {
    for (const entry of list.getEntries()) {
      window.__pfLive.longTasks.push([entry.startTime, entry.duration]);
    }
  }).observe({type: 'longtask', buffered: true});
  // What a long frame was made of: its scripts, and the rendering after them (style,
  // layout, paint); the rest is work outside script, the collector's among it.
  window.__pfLive.longFrames = [];
  if (PerformanceObserver.supportedEntryTypes.includes('long-animation-frame')) {
    new PerformanceObserver(list => {
      for (const f of list.getEntries()) {
        if (f.duration <= 50) continue;
        const scripts = f.scripts.reduce((sum, s) => sum + s.duration, 0);
        const rendering = f.styleAndLayoutStart
          ? f.startTime + f.duration - f.styleAndLayoutStart : 0;
        window.__pfLive.longFrames.push([f.startTime, f.duration, scripts, rendering]);
      }
    }).observe({type: 'long-animation-frame', buffered: true});
  }
  const seen = () => {
    if (window.__pfLive.firstRow === null && document.querySelector('.pf-branch')) {
      window.__pfLive.firstRow = performance.timeOrigin + performance.now();
    }
  };
  new MutationObserver(seen).observe(document, {childList: true, subtree: true});
}"""

STARTED_AT = """async ([flow, config]) => {
  const csrf = document.cookie.split('; ').find(c => c.startsWith('csrftoken='))?.split('=')[1];
  const at = performance.timeOrigin + performance.now();
  const response = await fetch('/api/runs', {method: 'POST', headers: {
    'Content-Type': 'application/json', 'X-CSRFToken': csrf}, body: JSON.stringify({
    flow, message: 'go', config})});
  return [(await response.json()).run.id, at];
}"""

SHOWN_SEQ = "() => Number(document.querySelector('#pf-last-seq')?.textContent || -1)"
STORED = "async id => (await (await fetch(`/api/runs/${id}`)).json()).run"


def live(page: Page, branches: int) -> dict[str, Any]:
    page.goto("/")
    run_id, posted = page.evaluate(STARTED_AT, ["FanOutFlow", {"branches": branches}])
    page.add_init_script(f"({WATCH})()")
    page.goto(f"/runs/{run_id}/")
    lags: list[int] = []
    while True:
        run = page.evaluate(STORED, run_id)
        behind = run["event_count"] - 1 - page.evaluate(SHOWN_SEQ)
        lags.append(max(behind, 0))
        if run["status"] not in ("queued", "running") and behind <= 0:
            break
        if run["status"] not in ("queued", "running") and len(lags) > 600:
            break
        time.sleep(1)
    watched = page.evaluate("() => window.__pfLive")
    long_tasks = [(at, t) for at, t in watched["longTasks"] if t > 50]
    frames = watched["longFrames"]
    return {"run_id": run_id, "posted": posted, "events": run["event_count"],
            "status": run["status"],
            "first_row": (watched["firstRow"] - posted) / 1000
            if watched["firstRow"] is not None else None,
            "lag_median": statistics.median(lags), "lag_max": max(lags),
            "long_tasks": len(long_tasks), "long_max": max((t for _, t in long_tasks), default=0.0),
            "long_at": ", ".join(f"{t:.0f} ms at {at / 1000:.2f} s" for at, t in long_tasks),
            "frames": "; ".join(
                f"{d:.0f} ms at {at / 1000:.2f} s (scripts {js:.0f}, style to paint {r:.0f}, "
                f"other {max(d - js - r, 0):.0f})" for at, d, js, r in frames),
            "frame_count": len(frames),
            "heap": heap_mb(page)}


MILESTONES = """async id => {
  const run = (await (await fetch(`/api/runs/${id}`)).json()).run;
  const first = (await (await fetch(`/api/runs/${id}/events?after=-1`)).json()).events;
  const at = type => first.find(e => e.type === type)?.time;
  const last = (await (await fetch(`/api/runs/${id}/events?after=${run.event_count - 2}`)).json())
    .events.at(-1);
  return {created: run.created_at, started: at('turn.started'), forked: at('barrier.forked'),
          branch: at('branch.started'), ended: last?.time};
}"""


LARGEST = """async id => {
  let after = -1, largest = 0, type = '';
  for (;;) {
    const page = await (await fetch(`/api/runs/${id}/events?after=${after}`)).json();
    if (!page.events.length) return [largest, type];
    for (const e of page.events) {
      const size = new TextEncoder().encode(JSON.stringify(e)).length;
      if (size > largest) [largest, type] = [size, e.type];
    }
    after = page.last_seq;
  }
}"""


def milestones(page: Page, run_id: str, posted: float) -> str:
    """When the run's first events were emitted, in seconds after the POST."""
    def since(stamp: float | None) -> str:
        return "-" if stamp is None else f"{stamp - posted / 1000:.2f} s"

    seen = page.evaluate(MILESTONES, run_id)
    largest, kind = page.evaluate(LARGEST, run_id)
    return (f"  emitted after the POST: turn.started {since(seen['started'])}, barrier.forked "
            f"{since(seen['forked'])}, first branch.started {since(seen['branch'])}, "
            f"turn ended {since(seen['ended'])}\n"
            f"  largest stored event: {largest:,} bytes ({kind})")


def stored(page: Page, run_id: str) -> float:
    """First branch row of the stored run, from navigation start, in seconds."""
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector(".pf-branch", timeout=600_000)
    return float(page.evaluate("() => window.__pfLive.firstRow - performance.timeOrigin"
                               )) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, nargs="+", default=[100_000])
    parser.add_argument("--trace", action="store_true",
                        help="also trace the page's main thread while the run streams")
    args = parser.parse_args()
    with production_page() as page:
        for branches in args.branches:
            thread = ""
            if args.trace:
                with traced(page) as trace:
                    seen = live(page, branches)
                thread = described(summary(trace.events)) + "\n"
            else:
                seen = live(page, branches)
            wait_finished(page, seen["run_id"], timeout=1800)
            baseline = stored(page, seen["run_id"])
            first = seen["first_row"]
            shown = f"{first:.2f} s" if first is not None else "never"
            ratio = f"{first / baseline:.1f}x" if first is not None and baseline else "-"
            timeline = milestones(page, seen["run_id"], seen["posted"])
            print(f"live {branches:,}-branch run ({seen['events']:,} events, "
                  f"{seen['status']}):\n"
                  f"  POST -> first branch row drawn: {shown}   stored run, navigation -> "
                  f"first row: {baseline:.2f} s   live / stored: {ratio}\n"
                  f"  events behind the stored ones, sampled each second: median "
                  f"{seen['lag_median']:,.0f}, max {seen['lag_max']:,}\n"
                  f"  long tasks over 50 ms while it streamed: {seen['long_tasks']} "
                  f"(longest {seen['long_max']:.0f} ms){': ' if seen['long_at'] else ''}"
                  f"{seen['long_at']}\n"
                  f"  animation frames over 50 ms: {seen['frame_count']}"
                  f"{': ' if seen['frames'] else ''}{seen['frames']}\n"
                  f"  JS heap at the end: {seen['heap']:.0f} MB\n{thread}{timeline}")


if __name__ == "__main__":
    main()
