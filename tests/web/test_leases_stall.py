"""A worker's lease against a stalled database and against a worker that took its run over.

A real Daphne (its watchdog expires leases) and a real ``manage.py db_worker`` (its lease
keeper renews them, its reaper expires them too) on one SQLite file, with a short lease
(:data:`LEASE`). The turn waits at a gate the test opens (``tests/flows_pkg/gated.py``), so
the run is running for as long as the test needs, whatever the machine's speed. The last
test runs an expiry round in this process against the test database.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from picoflow_web.models import EventRecord, Run
from picoflow_web.record import interruption, stalls
from picoflow_web.record.append import Stored
from tests.livedaphne import REPO_ROOT, LiveDaphne, live_daphne, run_manage
from tests.webhelpers import HttpSession, assert_gap_free, wait_for

LEASE = 2.0
"""Seconds of a worker's lease (PICOFLOW_WORKER_LEASE)."""
PATIENCE = 60.0
"""Seconds a test waits for something that happens at once on an idle machine."""


class Live:
    """The server, its worker and an API token."""

    def __init__(self, server: LiveDaphne, token: str) -> None:
        self.server = server
        self.http = HttpSession(server.base_url)
        self.auth = {"Authorization": f"Bearer {token}"}
        self.database = server.data_dir / "picoflow.sqlite3"

    def call(self, method: str, path: str, body: Any = None) -> Any:
        answer = self.http.request(method, path, json_body=body, headers=self.auth,
                                   timeout=PATIENCE)
        assert answer.status in (200, 201), (answer.status, answer.body)
        return json.loads(answer.body)

    def start(self, gate: Path) -> str:
        body = self.call("POST", "/api/runs", {"flow": "GateFlow", "message": "go",
                                               "config": {"folder": str(gate)}})
        return str(body["run"]["id"])

    def wait_at_gate(self, run_id: str, gate: Path) -> None:
        """Until the turn waits at its gate with every event before it stored (the last
        one, ``session.loaded``): no write of the worker's is under way but its keeper's."""
        wait_for(lambda: (gate / "reached").exists(), "the turn to reach its gate")
        wait_for(lambda: [e["type"] for e in self.events(run_id)][-1:] == ["session.loaded"],
                 "the events before the gate to be stored")
        assert self.run(run_id)["status"] == "running"

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/api/runs/{run_id}")["run"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/api/runs/{run_id}/events?after=-1")["events"])

    def db(self) -> contextlib.closing[sqlite3.Connection]:
        """A connection of the test's own to the server's database (autocommit)."""
        return contextlib.closing(sqlite3.connect(self.database, timeout=30,
                                                  isolation_level=None))

    def lease_end(self, run_id: str) -> datetime:
        """The run's lease deadline as stored (a read: the write lock does not stop it)."""
        with self.db() as db:
            raw = db.execute("SELECT lease_expires_at FROM picoflow_web_run WHERE id = ?",
                             (run_id,)).fetchone()[0]
        return datetime.fromisoformat(raw).replace(tzinfo=UTC)

    def tasks_open(self) -> int:
        """The worker's tasks not done yet (queued or being executed)."""
        with self.db() as db:
            return int(db.execute("SELECT count(*) FROM django_tasks_database_dbtaskresult "
                                  "WHERE status IN ('READY', 'RUNNING')").fetchone()[0])


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    env = {"PICOFLOW_WORKER_LEASE": str(LEASE), "PICOFLOW_FLOWS": "tests.flows_pkg.gated:flows",
           "PYTHONPATH": str(REPO_ROOT), "PICOFLOW_DEMOS": "0"}
    with live_daphne(env, workers=1) as server:
        made = run_manage("shell", "-c", "from django.contrib.auth import get_user_model; "
                          "get_user_model().objects.create_superuser('root', password='pw')",
                          env=server.env)
        assert made.returncode == 0, made.stderr
        issued = run_manage("create_api_token", "root", "stall", "--scope", "read",
                            "--scope", "run", env=server.env)
        assert issued.returncode == 0, issued.stderr
        yield Live(server, issued.stdout.strip().splitlines()[-1])


@pytest.fixture
def gate() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pf-gate-") as folder:
        yield Path(folder)


def test_a_database_stall_longer_than_the_lease_does_not_interrupt_a_live_worker(
        live: Live, gate: Path) -> None:
    run_id = live.start(gate)
    live.wait_at_gate(run_id, gate)

    # Another connection takes the write lock and keeps it for longer than the lease: the
    # keeper cannot renew, and the watchdog and the reaper see the lease run out. A worker
    # that starts meanwhile looks for lapsed leases too (its reaper, at start-up), once the
    # deadline the blocked renewal would have written has passed as well.
    locker = sqlite3.connect(live.database, timeout=30, isolation_level=None)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        deadline = live.lease_end(run_id)
        wait_for(lambda: datetime.now(UTC) > deadline + timedelta(seconds=LEASE),
                 "the lease to lapse by a whole lease")
        late = live.server.start_worker("late")
        log = live.server.data_dir / "worker-late.log"
        wait_for(lambda: late.poll() is None and "Starting worker" in log.read_text(),
                 "the late worker to start")
        time.sleep(LEASE)  # its reaper's first round waits for the lock meanwhile
    finally:
        locker.execute("ROLLBACK")
        locker.close()

    (gate / "open").touch()
    wait_for(lambda: live.run(run_id)["status"] not in ("queued", "running"),
             "the run to end")
    run = live.run(run_id)
    assert (run["status"], run["interruption"]) == ("finished", None), run
    assert run["reply"]["message"] == "opened"
    events = live.events(run_id)
    assert_gap_free([e["seq"] for e in events])
    types = [e["type"] for e in events]
    assert "run.interrupted" not in types
    assert types[-1] == "turn.finished"
    assert not (gate / "stopped").exists()


def test_a_worker_whose_run_was_taken_over_stops_its_turn_and_records_nothing_more(
        live: Live, gate: Path) -> None:
    run_id = live.start(gate)
    live.wait_at_gate(run_id, gate)
    before = live.events(run_id)

    # Another worker holds the run now, with a lease of its own (as a worker that claimed
    # it after the first one's lease had expired would).
    taken_until = datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)
    with live.db() as db:
        db.execute("UPDATE picoflow_web_run SET worker = 'thief', lease_expires_at = ? "
                   "WHERE id = ?", (taken_until.isoformat(sep=" "), run_id))

    wait_for(lambda: (gate / "stopped").exists(), "the first worker to stop its turn")
    wait_for(lambda: live.tasks_open() == 0, "the first worker to leave the run")
    run = live.run(run_id)
    assert (run["status"], run["worker"], run["reply"], run["finished_at"]) == (
        "running", "thief", None, None), run
    assert live.events(run_id) == before
    assert run["event_count"] == len(before)


@pytest.mark.django_db(transaction=True)
def test_a_round_kept_waiting_by_a_stall_declares_no_run_lost(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.PICOFLOW_WORKER_LEASE = 0.4
    settings.PICOFLOW_REMOTE_TIMEOUT = 0.4
    monkeypatch.setattr(stalls, "_writable_again", None)
    long_ago = timezone.now() - timedelta(days=1)
    Run.objects.create(id="leased", flow="GateFlow", status=Run.Status.RUNNING,
                       origin={"kind": "worker"}, worker="w", lease_expires_at=long_ago)
    Run.objects.create(id="remote", flow="GateFlow", status=Run.Status.RUNNING,
                       origin={"kind": "remote", "host": "laptop", "pid": 7},
                       last_seen_at=long_ago)
    event = {"v": 1, "run_id": "remote", "session_id": "", "path": "", "seq": 0,
             "time": long_ago.timestamp(), "offset": 0.0, "type": "turn.started",
             "flow": "GateFlow", "message": "go"}
    EventRecord.objects.create(run_id="remote", seq=0, type=event["type"], path="",
                               payload=event)

    rounds: list[Stored] = []
    started = threading.Event()

    def one_round() -> None:
        try:
            started.set()
            rounds.extend([interruption.expire_leases(), interruption.interrupt_silent_runs()])
        finally:
            connection.close()

    # Both executors would have proven themselves by a write the lock held up; the round
    # waits for that lock as long as they do (patience: a quarter of 0.4 s).
    locker = sqlite3.connect(connection.settings_dict["NAME"], timeout=30,
                             isolation_level=None)
    thread = threading.Thread(target=one_round)
    try:
        locker.execute("BEGIN EXCLUSIVE")
        thread.start()
        started.wait()
        time.sleep(1.0)
    finally:
        locker.execute("ROLLBACK")
        locker.close()
        thread.join()
    assert [(r.events, r.summaries) for r in rounds] == [({}, []), ({}, [])]
    assert set(Run.objects.values_list("status", flat=True)) == {Run.Status.RUNNING}

    # Counted once the stall ended: executors that stay silent are declared lost later.
    def declared_lost() -> bool:
        interruption.expire_leases()
        interruption.interrupt_silent_runs()
        return not Run.objects.filter(status=Run.Status.RUNNING).exists()

    wait_for(declared_lost, "the lost runs to be declared lost", timeout=PATIENCE)
    assert set(Run.objects.values_list("status", flat=True)) == {Run.Status.INTERRUPTED}
