"""kill -9 a worker in the middle of a 200-branch model-calling fan-out, then resume it.

The worker (``python -m tests.runtime.ledger_flows``) runs :class:`LedgerFlow` on a SQLite
store; its branches 0-99 answer at once, 100-199 wait on their model for ever. The test
polls the store until the ledger holds the first hundred, kills the process (SIGKILL:
nothing of it runs after), and resumes the turn in this process with a fresh counting
model: none of the hundred ledgered branches calls its model again, the other hundred do
once each, and the session ends as an uninterrupted run of the same inputs does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import MemorySessionStore, SessionDocument, SQLiteSessionStore
from runtime import events as ev
from runtime.events import MemorySink
from tests.runtime.helpers import until
from tests.runtime.ledger_flows import CountingModel, engine_for
from tests.runtime.test_ledger import states

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
N, FINISHING = 200, 100
CONFIG = {"n": N, "mode": "reducer"}
MESSAGE = "Research everything"  # the worker's


def ledger_entries(db: Path) -> int:
    """How many ledger entries the SQLite file holds now (a reader of its own: WAL lets
    it read while the worker writes)."""
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        try:
            (count,) = conn.execute("SELECT count(*) FROM ledger_entry").fetchone()
        except sqlite3.OperationalError:  # the worker has not made its tables yet
            return 0
    return int(count)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # one backend: the worker is the expensive part


async def test_a_killed_worker_resumes_without_running_its_finished_branches_again(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.db"
    log = tmp_path / "worker.log"
    with log.open("wb") as errors:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.ledger_flows", str(db), "killed", str(N),
             str(FINISHING)], cwd=ROOT, env={**os.environ, "PICOFLOW_DASHBOARD_URL": ""},
            stdout=subprocess.DEVNULL, stderr=errors)
    try:
        held = 0

        def ledger_full() -> bool:
            nonlocal held
            held = ledger_entries(db)
            return held >= FINISHING or worker.poll() is not None

        await until(ledger_full, "the worker's ledger to hold its finished branches", 120)
        assert worker.poll() is None, log.read_text()
        worker.send_signal(signal.SIGKILL)
        assert worker.wait() == -signal.SIGKILL
        assert held == FINISHING
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()

    store = SQLiteSessionStore(db)
    model, sink = CountingModel(), MemorySink()
    try:
        reply = await engine_for(model, store, sinks=[sink]).resume("killed", run_id="resumed")
        assert reply.success, reply.message
        found = await store.ledger_load("killed")
        assert found is None  # the resumed turn's final save dropped it
        doc = await store.load("killed")
    finally:
        await store.close()

    assert dict(model.calls) == {f"item-{i}": 1 for i in range(FINISHING, N)}
    reused = [e for e in sink.events if isinstance(e, ev.BranchReused)]
    assert sorted(e.index for e in reused) == list(range(FINISHING))
    assert {e.original_run_id for e in reused} == {"killed-run"}
    assert doc is not None
    reference = await uninterrupted()
    assert states(doc) == states(reference)
    assert doc.tokens == reference.tokens


async def uninterrupted() -> SessionDocument:
    store = MemorySessionStore()
    reply = await engine_for(CountingModel(), store).run("LedgerFlow", MESSAGE, "killed",
                                                         CONFIG)
    assert reply.success, reply.message
    doc = await store.load("killed")
    assert doc is not None
    return doc


