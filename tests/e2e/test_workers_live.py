"""Runs in real worker processes beside a real Daphne: the web server stays responsive
while a worker executes a large run.

One Daphne and ``manage.py db_worker`` processes on a private SQLite database
(``tests/livedaphne.py``); the workers reach the page through the relay. The lease is short
(:data:`LEASE` seconds) so a killed worker is noticed quickly.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard
from tests.livedaphne import LiveDaphne, run_manage
from tests.webhelpers import HttpSession, assert_gap_free, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

LEASE = 2.0
"""Seconds of a worker's lease (PICOFLOW_WORKER_LEASE)."""
LIVE = ("queued", "running")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str, str]]:
    env = {"PICOFLOW_WORKER_LEASE": str(LEASE), "PICOFLOW_DEMO_LATENCY": "0.4"}
    with dashboard(env, workers=0) as (live, password):
        made = run_manage("create_api_token", "admin", "workers", "--scope", "read",
                          "--scope", "run", env=live.env)
        assert made.returncode == 0, made.stderr
        yield live, password, made.stdout.strip().splitlines()[-1]


class Api:
    """The dashboard's API with a bearer token."""

    def __init__(self, live: LiveDaphne, token: str) -> None:
        self.http = HttpSession(live.base_url)
        self.auth = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        answer = self.http.request(method, path, json_body=body, headers=self.auth,
                                   timeout=30)
        return answer.status, json.loads(answer.body)

    def start(self, flow: str, config: dict[str, Any] | None = None,
              session_id: str | None = None) -> str:
        status, body = self.call("POST", "/api/runs", {"flow": flow, "message": "go",
                                                       "config": config,
                                                       "session_id": session_id})
        assert status == 201, body
        return str(body["run"]["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        status, body = self.call("GET", f"/api/runs/{run_id}")
        assert status == 200, body
        return dict(body["run"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            after = out[-1]["seq"] if out else -1
            status, body = self.call("GET", f"/api/runs/{run_id}/events?after={after}")
            assert status == 200, body
            if not body["events"]:
                return out
            out += body["events"]


@pytest.fixture(scope="module")
def api(server: tuple[LiveDaphne, str, str]) -> Api:
    return Api(server[0], server[2])


async def ended(api: Api, run_id: str, timeout: float = 120.0) -> dict[str, Any]:
    async def done() -> bool:
        return api.run(run_id)["status"] not in LIVE

    await wait_until(done, timeout=timeout, interval=0.1, what=f"run {run_id} to end")
    return api.run(run_id)


def stop_workers(live: LiveDaphne) -> None:
    for worker in live.workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)


async def test_a_large_run_executes_in_a_worker_while_daphne_keeps_answering(
        server: tuple[LiveDaphne, str, str], api: Api) -> None:
    live = server[0]
    # The default lease: with the short one of this module, a 20,000-branch fork keeps the
    # worker too busy to renew it in time on two cores.
    worker = live.start_worker("big", env={"PICOFLOW_WORKER_LEASE": "10"})
    try:
        run_id = api.start("FanOutFlow", {"branches": 20_000})
        answered_while_running = 0
        statuses: list[str] = []
        while True:
            health = live.get("/healthz")
            listed = api.call("GET", "/api/runs")
            assert health[0] == 200 and listed[0] == 200
            run = next(r for r in listed[1]["runs"] if r["id"] == run_id)
            statuses.append(run["status"])
            if run["status"] not in LIVE:
                break
            if run["status"] == "running" and run["event_count"] > 0:
                answered_while_running += 1
        # Daphne answered both probes many times while the worker was storing the run's
        # events, and the run went queued/running -> finished, executed by that worker.
        assert answered_while_running >= 5, statuses
        assert statuses[-1] == "finished", statuses
        final = api.run(run_id)
        assert final["worker"] == "big" and final["origin"]["kind"] == "worker"
        assert final["branch_count"] == 20_000
        events = api.events(run_id)
        assert_gap_free([e["seq"] for e in events])
        assert events[0]["type"] == "turn.started" and events[-1]["type"] == "turn.finished"
    finally:
        stop_workers(live)
        live.workers.remove(worker)
