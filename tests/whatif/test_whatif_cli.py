"""``python -m runtime whatif``: each run of an export, in sentences or as JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.whatif.cli import main

GOLDEN = Path(__file__).parents[1] / "golden" / "ab_timing.jsonl"


def test_each_run_gets_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(GOLDEN)]) == 0
    out = capsys.readouterr().out
    assert out.count("run ab_timing-") == 2
    assert "Under graph-wide supersteps, A2 would start at" in out
    assert "it waits" in out and "for B1 at superstep 2." in out


def test_json_is_the_api_report_of_the_run_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(GOLDEN), "--run", "ab_timing-2", "--json", "--max-concurrency", "1"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    report = json.loads(line)
    assert report["run"] == "ab_timing-2" and set(report["schedules"]) == {
        "recorded", "supersteps", "local_barriers"}
    one_at_a_time = report["schedules"]["supersteps"]
    assert one_at_a_time["supersteps"] == 2
    assert one_at_a_time["total"] > report["schedules"]["local_barriers"]["total"]


def test_an_unknown_run_or_file_is_an_error(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    assert main([str(GOLDEN), "--run", "nope"]) == 1
    assert "no run 'nope'" in capsys.readouterr().out
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main([str(bad)]) == 1
    assert capsys.readouterr().out.startswith("error:")


def test_it_is_a_subcommand_of_python_m_runtime() -> None:
    done = subprocess.run([sys.executable, "-m", "runtime", "whatif", str(GOLDEN), "--run",
                           "ab_timing-1"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("run ab_timing-1 (TimingFlow)")
