"""The event log on PostgreSQL: a batch goes in by ``COPY``, its text comes back exactly as
it went in (a text column, not ``jsonb``), and a seq that is taken is Django's
``IntegrityError`` with nothing of the batch kept — what the bridge and ingest rely on
(``picoflow_web.data.eventlog``); a compact event stream takes the envelope off, as on SQLite;
events stored as ``jsonb`` before the migration read back the same. A real cluster (the
session's, a database of its own); the checks run in ``manage.py shell`` against it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.livedaphne import build_env, run_manage
from tests.webhelpers import PostgresServer

SCRIPT = r"""
import json
from django.db import IntegrityError, transaction
from picoflow_web.data.eventlog import insert_rows, read_texts
from picoflow_web.models import Run
Run.objects.create(id="r1", flow="F")
rows = [(seq, "step.entered", "", json.dumps({"seq": seq, "text": "é \"q\" \\ tab\t"},
                                            ensure_ascii=False, separators=(",", ":")))
        for seq in range(50)]
insert_rows("r1", rows)
back = read_texts("r1", -1, 100)
# COPY's text format escapes: raw whitespace between a payload's tokens, backslashes, and
# tabs, newlines and backslashes in the other columns.
Run.objects.create(id="r 5\\x", flow="F")
odd = [(seq, "step.entered", "a\tb\\c\nd" if seq % 2 else "0:1.2",
        '{"a":\t1,\n"b":\r"\\\\ \\n",' + f'"seq":{seq}' + "}") for seq in range(12)]
insert_rows("r 5\\x", odd)
odd_back = [[seq, text] for seq, text in read_texts("r 5\\x", -1, 100)]
# Backslashes alone (in the run's id, a path and the payloads): escaped in one pass.
Run.objects.create(id="r\\4", flow="F")
slashed = [(seq, "step.entered", "0\\1", '{"a":"\\\\ \\"q\\"",' + f'"seq":{seq}' + "}")
           for seq in range(12)]
insert_rows("r\\4", slashed)
slashed_back = [[seq, text] for seq, text in read_texts("r\\4", -1, 100)]
from picoflow_web.models import EventRecord as Row
slashed_paths = list(Row.objects.filter(run_id="r\\4").values_list("path", flat=True))
odd_paths = list(Row.objects.filter(run_id="r 5\\x").order_by("seq").values_list("path",
                                                                             flat=True))
refused = ""
try:
    with transaction.atomic():
        insert_rows("r1", [(seq, "step.entered", "", "{}") for seq in range(60, 70)] +
                    [(10, "step.entered", "", "{}")])
except IntegrityError as exc:
    refused = type(exc).__module__ + "." + type(exc).__name__
# A compact stream: the stored text begins with the envelope, which is taken off.
from asgiref.sync import async_to_sync
from picoflow_web.data import exporting
Run.objects.create(id="r2", flow="F", session_id="s2")
full = [(seq, "step.entered", "", json.dumps({"v": 1, "run_id": "r2", "session_id": "s2",
                                             "seq": seq}, separators=(",", ":")))
        for seq in range(3)]
insert_rows("r2", full)
async def stream():
    _, prefix = exporting.envelope_of("r2", "s2")
    return b"".join([c async for c in exporting.alines_after("r2", -1, prefix)])
streamed = async_to_sync(stream)().decode().splitlines()
from django.db import connection
from picoflow_web.models import EventRecord
with connection.cursor() as cursor:
    cursor.execute("SELECT data_type FROM information_schema.columns WHERE table_name = "
                   "'picoflow_web_eventrecord' AND column_name = 'payload'")
    column = cursor.fetchone()[0]
Run.objects.create(id="r3", flow="F")
EventRecord.objects.create(run_id="r3", seq=0, type="x", path="", payload={"a": ["é", 1]})
print(json.dumps({"back": back, "sent": [[s, t] for s, _, _, t in rows], "refused": refused,
                  "odd_back": odd_back, "odd_sent": [[s, t] for s, _, _, t in odd],
                  "odd_paths": odd_paths, "odd_paths_sent": [p for _, _, p, _ in odd],
                  "slashed_back": slashed_back,
                  "slashed_sent": [[s, t] for s, _, _, t in slashed],
                  "slashed_paths": slashed_paths,
                  "after": len(read_texts("r1", -1, 100)), "streamed": streamed,
                  "stored": [t for _, _, _, t in full], "column": column,
                  "orm": EventRecord.objects.get(run_id="r3").payload,
                  "orm_text": read_texts("r3", -1, 1)[0][1],
                  "old": json.loads(read_texts("old", -1, 1)[0][1])}))
"""

BEFORE = r"""
from django.db import connection
from django.db.migrations.loader import MigrationLoader
# The run as the schema at 0005 has it (today's model has columns added since).
state = MigrationLoader(connection).project_state(
    ("picoflow_web", "0005_run_rejected_count_duration"))
state.apps.get_model("picoflow_web", "Run").objects.create(id="old", flow="F")
with connection.cursor() as cursor:
    cursor.execute("INSERT INTO picoflow_web_eventrecord (run_id, seq, type, path, payload) "
                   "VALUES ('old', 0, 'x', '', %s::jsonb)", ['{"b": [1, "é"], "a": null}'])
"""


def test_a_batch_is_copied_in_and_a_taken_seq_refuses_all_of_it(
        tmp_path: Path, postgres: PostgresServer) -> None:
    env = build_env(tmp_path, {"DATABASE_URL": postgres.create_database(),
                               "PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "localhost"})
    migrated = run_manage("migrate", "--noinput", "picoflow_web", "0005", env=env)
    assert migrated.returncode == 0, migrated.stderr
    before = run_manage("shell", "-c", BEFORE, env=env)
    assert before.returncode == 0, before.stderr
    migrated = run_manage("migrate", "--noinput", env=env)
    assert migrated.returncode == 0, migrated.stderr
    result = run_manage("shell", "-c", SCRIPT, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["back"] == out["sent"]  # the very text, not a rendering of it
    assert out["odd_back"] == out["odd_sent"] and out["odd_paths"] == out["odd_paths_sent"]
    assert "\t" in out["odd_sent"][0][1] and "\t" in out["odd_paths"][1]
    assert out["slashed_back"] == out["slashed_sent"] and out["slashed_paths"] == ["0\\1"] * 12
    assert "\\\\ \\\"q" in out["slashed_sent"][0][1]
    assert out["refused"] == "django.db.utils.IntegrityError"
    assert out["after"] == 50
    assert out["column"] == "text"
    prefix = '{"v":1,"run_id":"r2","session_id":"s2",'
    assert out["streamed"] == ["{" + text.removeprefix(prefix) for text in out["stored"]]
    assert all(text.startswith(prefix) for text in out["stored"])
    assert out["orm"] == {"a": ["é", 1]} and json.loads(out["orm_text"]) == out["orm"]
    assert out["old"] == {"a": None, "b": [1, "é"]}  # stored as jsonb, migrated to text
