"""Session documents on PostgreSQL hold any text the runtime's state may hold: a NUL
character included (``jsonb`` refuses its ``\\u0000`` escape, so the column is text, as the
event log's is), read back exactly; a document stored as ``jsonb`` before the migration
reads back the same. A real cluster (the session's, a database of its own); the checks run
in ``manage.py shell`` against it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.livedaphne import build_env, run_manage
from tests.webhelpers import PostgresServer

BEFORE = r"""
import json
from django.db import connection
from picoflow_web.models import default_project_id
from tests.runtime.store_contract import make_doc
doc = make_doc(session_id="old").model_dump(mode="json")
with connection.cursor() as cursor:
    cursor.execute("INSERT INTO picoflow_web_storedsession (id, flow, revision, run_status, "
                   "doc, project_id, created, updated) VALUES ('old', 'ContractFlow', 0, "
                   "'running', %s::jsonb, %s, now(), now())",
                   [json.dumps(doc), default_project_id()])
print(json.dumps(doc))
"""

SCRIPT = r"""
import json
from asgiref.sync import async_to_sync
from picoflow_web.data.documents import SessionDocumentStore
from tests.runtime.store_contract import make_doc
store = SessionDocumentStore()
doc = make_doc(session_id="s-nul")
doc.flow.context["note"] = "a\x00b \u00e9"
async def roundtrip():
    await store.create(doc)
    loaded = await store.load("s-nul")
    loaded.flow.context["more"] = "c\x00"
    revision = await store.save(loaded, loaded.revision)
    again = await store.load("s-nul")
    return revision, again.flow.context
revision, context = async_to_sync(roundtrip)()
old = async_to_sync(store.load)("old").model_dump(mode="json")
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("SELECT data_type FROM information_schema.columns WHERE table_name = "
                   "'picoflow_web_storedsession' AND column_name = 'doc'")
    column = cursor.fetchone()[0]
print(json.dumps({"revision": revision, "note": context["note"], "more": context["more"],
                  "column": column, "old": old}))
"""


def test_a_document_with_a_nul_character_is_saved_and_read_back(
        tmp_path: Path, postgres: PostgresServer) -> None:
    env = build_env(tmp_path, {"DATABASE_URL": postgres.create_database(),
                               "PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "localhost",
                               "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    migrated = run_manage("migrate", "--noinput", "picoflow_web", "0006", env=env)
    assert migrated.returncode == 0, migrated.stderr
    before = run_manage("shell", "-c", BEFORE, env=env)
    assert before.returncode == 0, before.stderr[-3000:]
    migrated = run_manage("migrate", "--noinput", env=env)
    assert migrated.returncode == 0, migrated.stderr
    result = run_manage("shell", "-c", SCRIPT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    old = out.pop("old")
    assert out == {"revision": 1, "note": "a\x00b \u00e9", "more": "c\x00", "column": "text"}
    assert old == json.loads(before.stdout.strip().splitlines()[-1])  # jsonb, now text
