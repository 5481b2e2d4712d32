"""The event log on PostgreSQL: a batch goes in by ``COPY``, its text comes back as it went
in, and a seq that is taken is Django's ``IntegrityError`` with nothing of the batch kept —
what the bridge and ingest rely on (``picoflow_web.eventlog``); a compact event stream sends
``jsonb``'s own rendering whole. A real cluster, started
here; the checks run in ``manage.py shell`` against it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.livedaphne import build_env, run_manage
from tests.webhelpers import postgres_cluster, require_services

SCRIPT = r"""
import json
from django.db import IntegrityError, transaction
from picoflow_web.eventlog import insert_rows, read_texts
from picoflow_web.models import Run
Run.objects.create(id="r1", flow="F")
rows = [(seq, "step.entered", "", json.dumps({"seq": seq, "text": "é \"q\" \\ tab\t"},
                                            ensure_ascii=False, separators=(",", ":")))
        for seq in range(50)]
insert_rows("r1", rows)
back = read_texts("r1", -1, 100)
refused = ""
try:
    with transaction.atomic():
        insert_rows("r1", [(seq, "step.entered", "", "{}") for seq in range(60, 70)] +
                    [(10, "step.entered", "", "{}")])
except IntegrityError as exc:
    refused = type(exc).__module__ + "." + type(exc).__name__
# A compact stream: jsonb renders its own text, which never begins with the runtime's
# envelope text, so every line goes whole (and still parses to what was stored).
from asgiref.sync import async_to_sync
from picoflow_web import exporting
Run.objects.create(id="r2", flow="F", session_id="s2")
full = [(seq, "step.entered", "", json.dumps({"v": 1, "run_id": "r2", "session_id": "s2",
                                             "seq": seq}, separators=(",", ":")))
        for seq in range(3)]
insert_rows("r2", full)
async def stream():
    _, prefix = exporting.envelope_of("r2", "s2")
    return b"".join([c async for c in exporting.alines_after("r2", -1, prefix)])
streamed = async_to_sync(stream)().decode().splitlines()
print(json.dumps({"back": [[s, json.loads(t)] for s, t in back], "sent": [[s, json.loads(t)]
                  for s, _, _, t in rows], "refused": refused,
                  "after": len(read_texts("r1", -1, 100)),
                  "streamed": [json.loads(line) for line in streamed],
                  "stored": [json.loads(t) for _, _, _, t in full]}))
"""


def test_a_batch_is_copied_in_and_a_taken_seq_refuses_all_of_it(tmp_path: Path) -> None:
    require_services()
    with postgres_cluster() as url:
        env = build_env(tmp_path, {"DATABASE_URL": url, "PICOFLOW_DEBUG": "0",
                                   "PICOFLOW_ALLOWED_HOSTS": "localhost"})
        migrated = run_manage("migrate", "--noinput", env=env)
        assert migrated.returncode == 0, migrated.stderr
        result = run_manage("shell", "-c", SCRIPT, env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["back"] == out["sent"]
    assert out["refused"] == "django.db.utils.IntegrityError"
    assert out["after"] == 50
    assert out["streamed"] == out["stored"]
