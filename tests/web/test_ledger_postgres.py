"""The Django store keeps branch ledgers on PostgreSQL too: the ledger methods, and a failed
ledgered turn resumed through ``FlowEngine.resume`` with every branch reused. A real
cluster (the session's, a database of its own); the checks run in ``manage.py shell``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.livedaphne import build_env, run_manage
from tests.webhelpers import PostgresServer

SCRIPT = r"""
import json
from asgiref.sync import async_to_sync
from picoflow_web.data.documents import SessionDocumentStore
from tests.runtime.ledger_flows import CountingModel, Fan, engine_for
from tests.runtime.store_contract import ledger_entry, ledger_turn

store = SessionDocumentStore()

async def ledger():
    await store.ledger_begin(ledger_turn("s1", "run-1", message="a\x00b"))
    await store.ledger_put("s1", "run-1", [ledger_entry("b0", "a", 0), ledger_entry("b0", "b", 1)])
    await store.ledger_put("s1", "run-1", [ledger_entry("b0", "a", 0, output="again\x00")])
    record, entries = await store.ledger_load("s1")
    dropped = await store.ledger_drop("s1", "run-1")
    return {"message": record.message, "entries": [[e.key, e.output] for e in entries],
            "dropped": dropped, "after": await store.ledger_load("s1")}

async def resume():
    config = {"n": 20, "mode": "reducer", "explode": True}
    first = await engine_for(CountingModel(), store).run("LedgerFlow", "go", "pg", config)
    Fan.explode = False
    model = CountingModel()
    again = await engine_for(model, store).resume("pg")
    doc = await store.load("pg")
    notes = next(r.state["notes"] for r in doc.flow.steps if r.name == "Researcher")
    return {"first": first.error_code, "again": again.success, "calls": sum(model.calls.values()),
            "notes": len(notes), "left": await store.ledger_load("pg")}

print(json.dumps({"ledger": async_to_sync(ledger)(), "resume": async_to_sync(resume)()}))
"""


def test_the_ledger_and_a_resume_work_on_postgresql(
        tmp_path: Path, postgres: PostgresServer) -> None:
    env = build_env(tmp_path, {"DATABASE_URL": postgres.create_database(),
                               "PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "localhost",
                               "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    migrated = run_manage("migrate", "--noinput", env=env)
    assert migrated.returncode == 0, migrated.stderr
    result = run_manage("shell", "-c", SCRIPT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["ledger"] == {"message": "a\x00b", "entries": [["a", "again\x00"], ["b", "out-b"]],
                             "dropped": True, "after": None}
    assert out["resume"] == {"first": "internal", "again": True, "calls": 0, "notes": 20,
                             "left": None}
