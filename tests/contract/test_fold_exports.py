"""The committed Python-fold exports (``tests/golden/<name>.fold.json``) are current.

``tests/js/fold.test.mjs`` checks the browser's fold against these files; that check means
something only while they are what the Python fold makes of the committed ``.jsonl`` now.
Regenerate with ``.venv/bin/python tests/golden/export_fold.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.golden.export_fold import dumps, export, export_path, golden_names

REGENERATE = ".venv/bin/python tests/golden/export_fold.py"
NAMES = golden_names()


def test_there_are_goldens_to_export() -> None:
    assert NAMES, "no tests/golden/*.jsonl found"


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_export_equals_a_fresh_one(name: str) -> None:
    path = export_path(name)
    assert path.exists(), f"{path.name} is missing: run `{REGENERATE} {name}`"
    fresh = export(name)
    assert json.loads(path.read_text("utf-8")) == fresh, (
        f"{path.name} is stale: run `{REGENERATE} {name}`")
    assert path.read_text("utf-8") == dumps(fresh), f"{path.name} is not in canonical form"


@pytest.mark.parametrize("name", NAMES)
def test_the_export_covers_every_run_branch_and_barrier(name: str) -> None:
    data = json.loads(export_path(name).read_text("utf-8"))
    jsonl = (export_path(name).parent / f"{name}.jsonl").read_text("utf-8").splitlines()
    events = [json.loads(line) for line in jsonl if line.strip()]
    assert [run["run_id"] for run in data["runs"]] == list(dict.fromkeys(
        e["run_id"] for e in events))
    for run in data["runs"]:
        forks = [e for e in events if e["run_id"] == run["run_id"]
                 and e["type"] == "barrier.forked"]
        pages = [e for e in events if e["run_id"] == run["run_id"]
                 and e["type"] in ("barrier.forked", "barrier.requested")]
        assert sorted(run["barriers"]) == sorted(e["barrier"] for e in forks)
        assert sorted(run["branches"]) == sorted(r["path"] for e in pages for r in e["requests"])
        for branch in run["branches"].values():
            assert (branch["view_at_fulfilled"] is None) == (branch["status"] != "fulfilled")
