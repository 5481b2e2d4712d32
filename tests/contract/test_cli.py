"""``python -m runtime``: the trace dump of a JSONL export, and the events' JSON Schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.contract.bad_traces import bad_traces
from tests.golden.goldens import BY_NAME, normalise

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "static/picoflow_web/schema/events.schema.json"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def test_schema_prints_the_committed_json_schema() -> None:
    result = cli("schema")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(SCHEMA_FILE.read_text("utf-8"))


def test_trace_prints_the_committed_dump_of_a_golden() -> None:
    golden = BY_NAME["ab_timing"]  # two runs: one dump each
    result = cli("trace", str(golden.jsonl_path))
    assert result.returncode == 0, result.stderr
    assert normalise(result.stdout) == golden.txt_path.read_text("utf-8") + "\n"


def test_trace_lists_what_the_fold_could_not_place(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    trace = bad_traces()["sequence"]
    path.write_text("".join(json.dumps(e) + "\n" for e in trace["events"]), encoding="utf-8")
    result = cli("trace", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-3:-1] == [
        "anomaly at 6: events 5..5 missing", "anomaly at 9: events 7..8 missing"]


def test_trace_names_a_bad_line_and_usage_is_shown_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text("{not json\n", encoding="utf-8")
    result = cli("trace", str(path))
    assert (result.returncode, result.stdout.startswith(f"error: {path}:1:")) == (1, True)
    assert cli("what").returncode == 2
    assert "python -m runtime trace FILE.jsonl" in cli().stdout
