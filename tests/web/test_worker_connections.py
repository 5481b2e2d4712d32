"""An idle ``manage.py db_worker`` on PostgreSQL keeps its database connection between polls.

Under Django's default ``CONN_MAX_AGE`` of 0 the upstream worker closes its connection after
every poll and opens a new one for the next: a PostgreSQL server process started and ended
for each poll, ten a second by default, for as long as the worker waits for work. The
server's own statistics (``pg_stat_database``: sessions opened, transactions committed)
count both, so the test reads them rather than anything the worker says about itself.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.livedaphne import REPO_ROOT, build_env, run_manage, stop_process
from tests.webhelpers import PostgresServer, wait_for

POLLS = 60
"""Polls the worker makes while the test watches (each commits at least one transaction)."""


@pytest.fixture
def idle_worker(postgres: PostgresServer) -> Iterator[str]:
    """A migrated database of its own and a ``db_worker`` polling it every 20 ms, with no
    run to execute: the database's name."""
    url = postgres.create_database()
    name = urllib.parse.urlsplit(url).path.lstrip("/")
    with contextlib.ExitStack() as stack:
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pf-idle-")))
        env = build_env(data, {"DATABASE_URL": url, "PICOFLOW_DEBUG": "0",
                               "PICOFLOW_LOG_LEVEL": "WARNING"})
        migrated = run_manage("migrate", "--noinput", env=env)
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        log = (data / "worker.log").open("wb")
        worker = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "manage.py"), "db_worker", "--no-startup-delay",
             "--worker-id", "idle", "--interval", "0.02"],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT)
        log.close()
        stack.callback(stop_process, worker)
        yield name
        assert worker.poll() is None, (data / "worker.log").read_text(errors="replace")


def _counters(postgres: PostgresServer, database: str) -> tuple[int, int]:
    """Sessions opened and transactions committed on ``database`` so far, as the server's
    statistics have them (a server process reports its own now and then, and as it ends)."""
    import psycopg

    # Through the maintenance database: the test's own sessions are not counted.
    with psycopg.connect(host=str(postgres.socket_dir), user="postgres", dbname="postgres",
                         autocommit=True) as connection:
        connection.execute("SELECT pg_stat_clear_snapshot()")
        row: Any = connection.execute(
            "SELECT sessions, xact_commit FROM pg_stat_database WHERE datname = %s",
            (database,)).fetchone()
    return int(row[0]), int(row[1])


def test_an_idle_worker_polls_on_one_connection(postgres: PostgresServer,
                                                idle_worker: str) -> None:
    # The worker is polling once its commits are counted.
    wait_for(lambda: _counters(postgres, idle_worker)[1] > 0, "the worker's first polls")
    sessions, commits = _counters(postgres, idle_worker)
    wait_for(lambda: _counters(postgres, idle_worker)[1] >= commits + POLLS,
             f"{POLLS} more polls")
    more_sessions, more_commits = _counters(postgres, idle_worker)
    # One poll, one commit at least: a connection per poll would show as many sessions. A
    # kept connection opens none (a few allowed: one the worker had open before it
    # changed its settings, the reaper's).
    opened, polled = more_sessions - sessions, more_commits - commits
    assert polled >= POLLS
    assert opened <= 3, (opened, polled)
