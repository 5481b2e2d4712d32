"""Browser benchmarks of the dashboard, in headless Debian chromium (Playwright).

1. Emit-to-DOM latency at ~1,000 events/s: a FanOutFlow run streams a steady ~1,000
   events per second while its run page is open; for every event, the time from the
   runtime emitting it (its ``time``) to the page showing it (``#pf-last-seq`` reaching
   its seq, seen by a MutationObserver) — p50 and p95.
2. A 10,000-branch run: time to first render (first branch row drawn) and to interactive
   (every stored event applied and a click on a branch opening the inspector), from
   navigation start.

    .venv/bin/python bench/browser.py [--branches 10000] [--rate-events 1000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playwright.sync_api import Page, sync_playwright

from tests.livedaphne import build_env, live_daphne, run_manage

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EVENTS_PER_BRANCH = 5  # branch.started, step.entered, 2 x state.contributed, ... (measured)

START = """async ([flow, config]) => {
  const csrf = document.cookie.split('; ').find(c => c.startsWith('csrftoken='))?.split('=')[1];
  const response = await fetch('/api/runs', {method: 'POST', headers: {
    'Content-Type': 'application/json', 'X-CSRFToken': csrf}, body: JSON.stringify({
    flow, message: 'go', config})});
  return (await response.json()).run.id;
}"""

OBSERVE = """() => {
  window.__seen = [];
  const target = document.querySelector('#pf-last-seq');
  const record = () => window.__seen.push([Number(target.textContent),
                                           performance.timeOrigin + performance.now()]);
  new MutationObserver(record).observe(target, {childList: true, characterData: true,
                                                subtree: true});
  record();
}"""

ALL_EVENTS = """async id => {
  let after = -1, events = [];
  for (;;) {
    const page = await (await fetch(`/api/runs/${id}/events?after=${after}`)).json();
    if (!page.events.length) return events.map(e => [e.seq, e.time]);
    events = events.concat(page.events);
    after = page.last_seq;
  }
}"""


def login(page: Page, password: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", password)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url("**/")


def wait_finished(page: Page, run_id: str, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = page.evaluate("async id => (await (await fetch(`/api/runs/${id}`)).json()).run",
                            run_id)
        if run["status"] not in ("queued", "running"):
            return run  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise TimeoutError(f"run {run_id} did not finish")


def latency(page: Page, events_per_second: int, seconds: float) -> tuple[float, float, int]:
    branch_rate = events_per_second / EVENTS_PER_BRANCH
    branches = int(branch_rate * seconds)
    page.goto("/")
    run_id = page.evaluate(START, ["FanOutFlow", {"branches": branches, "rate": branch_rate,
                                                  "concurrency": 8}])
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#pf-status[data-state=open]")
    page.evaluate(OBSERVE)
    observed_from = time.time() * 1000
    page.wait_for_selector("#pf-run[data-status=finished]", timeout=seconds * 4000 + 60_000)
    seen: list[list[float]] = page.evaluate("() => window.__seen")
    events: list[list[float]] = page.evaluate(ALL_EVENTS, run_id)
    samples = []
    cursor = 0
    for seq, emitted in sorted(events):
        emitted_ms = emitted * 1000
        if emitted_ms < observed_from:
            continue
        while cursor < len(seen) and seen[cursor][0] < seq:
            cursor += 1
        if cursor == len(seen):
            break
        samples.append(seen[cursor][1] - emitted_ms)
    samples.sort()
    p95 = samples[int(len(samples) * 0.95) - 1]
    return statistics.median(samples), p95, len(samples)


def big_run(page: Page, branches: int) -> tuple[float, float, int]:
    page.goto("/")
    run_id = page.evaluate(START, ["FanOutFlow", {"branches": branches}])
    run = wait_finished(page, run_id)
    total = run["event_count"]
    started = time.perf_counter()
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector(".pf-branch")
    first_render = time.perf_counter() - started
    page.wait_for_function(
        "total => Number(document.querySelector('#pf-event-count').textContent) === total",
        arg=total, timeout=120_000)
    page.locator(".pf-branch").first.click()
    page.wait_for_selector("#pf-inspector[data-path]")
    interactive = time.perf_counter() - started
    return first_render, interactive, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=10_000)
    parser.add_argument("--rate-events", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    with production_page() as page:
        p50, p95, count = latency(page, args.rate_events, args.seconds)
        print(f"emit-to-DOM latency at ~{args.rate_events} events/s over {count} events: "
              f"p50 {p50:.0f} ms, p95 {p95:.0f} ms")
        render, interactive, total = big_run(page, args.branches)
        print(f"{args.branches:,} branches ({total:,} events): first render "
              f"{render:.2f} s, interactive {interactive:.2f} s")


@contextmanager
def _removed(folder: Path) -> Iterator[None]:
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def production_page() -> Iterator[Page]:
    """A logged-in chromium page of a live dashboard on production settings, as deployed:
    no debug (Django keeps no queries), hashed and compressed static files served by
    WhiteNoise from collectstatic's folder, a worker executing the runs."""
    env = {"PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "127.0.0.1,localhost",
           "PICOFLOW_SECURE_SSL_REDIRECT": "0", "PICOFLOW_LOG_LEVEL": "WARNING",
           "PICOFLOW_DEMO_LATENCY": "0"}
    # Collected into the server's own data folder, where its settings look for them.
    data = Path(tempfile.mkdtemp(prefix="picoflow-bench-"))
    collected = run_manage("collectstatic", "--noinput", env=build_env(data, env))
    if collected.returncode != 0:
        raise SystemExit(f"collectstatic failed:\n{collected.stdout}{collected.stderr}")
    with _removed(data), live_daphne(
            env, data_dir=data, extra_args=("--websocket-max-message-size", "67108864")) as live:
        run_manage("ensure_admin", env=live.env)
        password = (live.data_dir / "admin_password").read_text().strip()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(base_url=live.base_url,
                                    viewport={"width": 1400, "height": 900})
            login(page, password)
            yield page
            browser.close()


if __name__ == "__main__":
    main()
