"""The event log on PostgreSQL: a batch goes in by ``COPY``, its text comes back as it went
in, and a seq that is taken is Django's ``IntegrityError`` with nothing of the batch kept —
what the bridge and ingest rely on (``picoflow_web.eventlog``). A real cluster, started
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
print(json.dumps({"back": [[s, json.loads(t)] for s, t in back], "sent": [[s, json.loads(t)]
                  for s, _, _, t in rows], "refused": refused,
                  "after": len(read_texts("r1", -1, 100))}))
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
