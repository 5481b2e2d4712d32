"""Responsiveness benchmark: does the web server stay quick while a worker executes a big run?

Daphne serves the dashboard and ``--workers`` ``manage.py db_worker`` processes execute its
runs (``tests.livedaphne.live_daphne``: a fresh data folder, SQLite, the in-memory channel
layer, workers relaying to Daphne over HTTP; ``PICOFLOW_DEBUG=0``). A separate client
thread in this process probes the server every 100 ms:

1. **Baseline**: ``GET /healthz`` and ``GET /api/runs`` for ``--baseline-seconds`` with no
   run executing; each probe's latency is recorded.
2. **Load**: a ``FanOutFlow`` run of ``--branches`` branches (``POST /api/runs``) executes in
   a worker; the same probes, plus ``GET /api/runs/<id>`` (which is also how the loop sees
   the run end), until the run is no longer queued or running.

   Printed: p50/p99/max of each probe kind in both phases, the ratio load / baseline, the
   run's duration and event count, and whether the target holds (p99 and max <= 100 ms
   while the run executes).
3. **Enqueue to first stored event**: ``--small-runs`` FanOutFlow runs of 10 branches, one
   after another; for each, the first event's ``time`` (wall clock, stamped by the runtime
   in the worker) minus the time the ``POST`` was sent, and the time from the ``POST``
   returning to the event being readable (``GET /api/runs/<id>/events?after=-1&limit=1``
   polled every 10 ms). p50/max against the 0.5 s target.
4. **Concurrency** (skipped with ``--skip-concurrency``): workers are added up to
   ``--concurrency-workers`` (4), then as many FanOutFlow runs of ``{"branches": 200,
   "rate": 100}`` (about 2 s each) are started at once; from their stored events
   (``turn.started`` and the turn's ending event, wall clock) the greatest number of them
   executing at the same moment. Target: all of them (>= 4).

Nothing is asserted: the figures are printed.

    PICOFLOW_DEBUG=0 .venv/bin/python bench/responsive.py [--branches 100000]
        [--baseline-seconds 3] [--workers 1] [--small-runs 10] [--skip-concurrency]
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.livedaphne import LiveDaphne, live_daphne, run_manage

PROBE_INTERVAL = 0.1
TARGET_MS = 100.0
FIRST_EVENT_TARGET_S = 0.5
ACTIVE = ("queued", "running")
ENDINGS = ("turn.finished", "turn.failed", "turn.cancelled", "run.interrupted")


class Client:
    """Plain HTTP/1.1 requests with a bearer token, one connection per request."""

    def __init__(self, server: LiveDaphne, token: str) -> None:
        self.host, self.port = server.host, server.port
        self.headers = {"Authorization": f"Bearer {token}"}

    def request(self, method: str, path: str, body: Any = None,
                timeout: float = 60.0) -> tuple[int, Any, float]:
        """(status, JSON body or None, seconds the request took)."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        started = time.perf_counter()
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        elapsed = time.perf_counter() - started
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return response.status, parsed, elapsed

    def get(self, path: str) -> Any:
        status, body, _ = self.request("GET", path)
        if status != 200:
            raise SystemExit(f"GET {path} answered {status}: {body}")
        return body

    def start(self, flow: str, config: dict[str, Any], message: str = "go") -> str:
        status, body, _ = self.request("POST", "/api/runs",
                                       {"flow": flow, "message": message, "config": config})
        if status != 201:
            raise SystemExit(f"POST /api/runs answered {status}: {body}")
        return str(body["run"]["id"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        after, events = -1, []
        while True:
            page = self.get(f"/api/runs/{run_id}/events?after={after}")
            if not page["events"]:
                return events
            events.extend(page["events"])
            after = page["last_seq"]

    def wait_ended(self, run_id: str, poll: float = 0.1) -> dict[str, Any]:
        while True:
            run = self.get(f"/api/runs/{run_id}")["run"]
            if run["status"] not in ACTIVE:
                return run  # type: ignore[no-any-return]
            time.sleep(poll)


def probe(client: Client, run_id: str | None, seconds: float | None) -> dict[str, Any]:
    """Probe every PROBE_INTERVAL for ``seconds``, or, with ``run_id``, until that run
    ended; latencies in ms by probe kind (and the run's last summary)."""
    paths = {"healthz": "/healthz", "api/runs": "/api/runs"}
    if run_id:
        paths["api/runs/<id>"] = f"/api/runs/{run_id}"
    samples: dict[str, list[float]] = {kind: [] for kind in paths}
    at: dict[str, list[float]] = {kind: [] for kind in paths}  # seconds into the phase
    run: dict[str, Any] | None = None
    started = time.perf_counter()
    tick = 0
    while True:
        for kind, path in paths.items():
            status, body, elapsed = client.request("GET", path)
            if status != 200:
                raise SystemExit(f"probe {path} answered {status}")
            samples[kind].append(elapsed * 1000)
            at[kind].append(time.perf_counter() - started)
            if kind == "api/runs/<id>":
                run = body["run"]
        if run_id and run is not None and run["status"] not in ACTIVE:
            break
        if seconds is not None and time.perf_counter() - started >= seconds:
            break
        tick += 1
        pause = started + tick * PROBE_INTERVAL - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    return {"samples": samples, "at": at, "run": run,
            "seconds": time.perf_counter() - started}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def figures(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), quantile(values, 0.99), max(values)


def responsiveness(client: Client, args: argparse.Namespace) -> None:
    gc.collect()
    baseline = probe(client, None, args.baseline_seconds)
    gc.collect()
    posted = time.time()
    run_id = client.start("FanOutFlow", {"branches": args.branches})
    load = probe(client, run_id, None)
    run = load["run"]
    events = client.get(f"/api/runs/{run_id}/events?after=-1&limit=1")["events"]
    last = client.get(f"/api/runs/{run_id}/events?after={run['event_count'] - 2}")["events"]
    duration = (last[-1]["time"] - events[0]["time"]) if events and last else float("nan")

    print()
    print(f"responsiveness: FanOutFlow {args.branches:,} branches in {args.workers} worker(s); "
          f"probes every {PROBE_INTERVAL * 1000:.0f} ms (ms)")
    print(f"  run {run['status']}: {run['event_count']:,} events, turn {duration:.2f} s "
          f"(first to last event), {time.time() - posted:.2f} s from POST to the end seen; "
          f"load phase {load['seconds']:.1f} s")
    header = (f"  {'probe':<14} {'phase':<9} {'n':>5} {'p50':>8} {'p99':>8} {'max':>8}")
    print(header)
    holds = True
    for kind in load["samples"]:
        rows = [("baseline", baseline["samples"].get(kind)), ("load", load["samples"][kind])]
        for phase, values in rows:
            if not values:
                continue
            p50, p99, top = figures(values)
            print(f"  {kind:<14} {phase:<9} {len(values):>5} {p50:>8.1f} {p99:>8.1f} {top:>8.1f}")
        base = baseline["samples"].get(kind)
        lp50, lp99, ltop = figures(load["samples"][kind])
        if base:
            bp50, bp99, btop = figures(base)
            print(f"  {kind:<14} {'ratio':<9} {'':>5} {lp50 / bp50:>7.2f}x {lp99 / bp99:>7.2f}x "
                  f"{ltop / btop:>7.2f}x")
        slowest = load["samples"][kind].index(ltop)
        print(f"  {kind:<14} {'max at':<9} {load['at'][kind][slowest]:>7.1f} s into the run")
        holds &= lp99 <= TARGET_MS and ltop <= TARGET_MS
    print(f"  target p99 and max <= {TARGET_MS:.0f} ms during the run: "
          f"{'holds' if holds else 'MISSED'}")


def first_events(client: Client, args: argparse.Namespace) -> None:
    gc.collect()
    stamped, readable = [], []
    for _ in range(args.small_runs):
        sent = time.time()
        run_id = client.start("FanOutFlow", {"branches": 10})
        returned = time.time()
        while True:
            page = client.get(f"/api/runs/{run_id}/events?after=-1&limit=1")
            if page["events"]:
                seen = time.time()
                stamped.append(page["events"][0]["time"] - sent)
                readable.append(seen - returned)
                break
            time.sleep(0.01)
        client.wait_ended(run_id, poll=0.02)
    print()
    print(f"enqueue -> first stored event, {args.small_runs} FanOutFlow runs of 10 branches "
          f"one after another (s; target {FIRST_EVENT_TARGET_S})")
    for label, values in (("POST sent -> first event's time", stamped),
                          ("POST returned -> event readable", readable)):
        print(f"  {label:<34} p50 {statistics.median(values):.3f}  max {max(values):.3f}  "
              f"{'holds' if max(values) <= FIRST_EVENT_TARGET_S else 'MISSED'}")


def concurrency(server: LiveDaphne, client: Client, args: argparse.Namespace) -> None:
    while len(server.workers) < args.concurrency_workers:
        server.start_worker()
    # Wait until every worker polls the queue (its start-up line is in its log).
    deadline = time.monotonic() + 60
    while (server.worker_logs().count("Starting worker") < len(server.workers)
           and time.monotonic() < deadline):
        time.sleep(0.1)
    gc.collect()
    count = args.concurrency_workers
    ids = [client.start("FanOutFlow", {"branches": 200, "rate": 100}) for _ in range(count)]
    spans = []
    for run_id in ids:
        run = client.wait_ended(run_id)
        events = client.events(run_id)
        begin = next(e["time"] for e in events if e["type"] == "turn.started")
        end = next(e["time"] for e in reversed(events) if e["type"] in ENDINGS)
        spans.append((begin, end, run["worker"], run["status"]))
    points = sorted([(b, 1) for b, _, _, _ in spans] + [(e, -1) for _, e, _, _ in spans],
                    key=lambda p: (p[0], p[1]))
    overlap = most = 0
    for _, step in points:
        overlap += step
        most = max(most, overlap)
    origin = min(b for b, _, _, _ in spans)
    print()
    print(f"concurrency: {count} FanOutFlow runs {{branches: 200, rate: 100}} started at once, "
          f"{len(server.workers)} workers")
    for (begin, end, worker, status), run_id in zip(spans, ids, strict=True):
        print(f"  {run_id[:8]} {status:<9} worker {worker:<14} "
              f"{begin - origin:6.2f} s -> {end - origin:6.2f} s")
    print(f"  max executing at once: {most} (target >= {count}: "
          f"{'holds' if most >= count else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=100_000)
    parser.add_argument("--baseline-seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=1,
                        help="workers for the responsiveness and first-event parts")
    parser.add_argument("--small-runs", type=int, default=10)
    parser.add_argument("--concurrency-workers", type=int, default=4)
    parser.add_argument("--skip-concurrency", action="store_true")
    parser.add_argument("--skip-responsiveness", action="store_true")
    args = parser.parse_args()
    # A terminated bench still stops its server and workers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = {"PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "127.0.0.1,localhost",
           "PICOFLOW_SECURE_SSL_REDIRECT": "0", "PICOFLOW_LOG_LEVEL": "WARNING",
           "PICOFLOW_DEMO_LATENCY": "0"}
    with live_daphne(env, workers=args.workers, extra_args=("-v", "0")) as server:
        run_manage("ensure_admin", env=server.env)
        made = run_manage("create_api_token", "admin", "bench", "--scope", "read",
                          "--scope", "run", env=server.env)
        if made.returncode != 0:
            raise SystemExit(f"create_api_token failed:\n{made.stdout}{made.stderr}")
        client = Client(server, made.stdout.strip().splitlines()[-1])
        if not args.skip_responsiveness:
            responsiveness(client, args)
        first_events(client, args)
        if not args.skip_concurrency:
            concurrency(server, client, args)


if __name__ == "__main__":
    main()
