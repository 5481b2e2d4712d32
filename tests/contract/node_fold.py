"""The browser's fold (``static/picoflow_web/js/fold.js``) run from Python, through node.

:func:`node_exports` folds many runs in one node process (``tests/js/fold_export_cli.mjs``)
and returns the export of each, in the shape of ``tests/golden/export_fold.py``, so a test
can compare the two folds on traces that are not committed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runtime import events as ev
from tests.golden.export_fold import default_stops, export_run

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "tests/js/fold_export_cli.mjs"


def node_exports(runs: Sequence[tuple[Sequence[ev.Event], Sequence[int]]]) -> list[Any]:
    """fold.js's export of each ``(events, stops)`` run, from one node process."""
    node = shutil.which("node")
    assert node is not None, "node is not installed: the browser's fold cannot be checked"
    payload = [{"events": [event.model_dump(mode="json") for event in events],
                "stops": list(stops)} for events, stops in runs]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.json"
        path.write_text(json.dumps(payload), encoding="utf-8")
        result = subprocess.run([node, str(CLI), str(path)], capture_output=True, text=True,
                                cwd=ROOT, timeout=120)
    assert result.returncode == 0, f"node failed:\n{result.stderr}"
    exports: list[Any] = json.loads(result.stdout)
    assert len(exports) == len(runs)
    return exports


def python_export(events: Sequence[ev.Event]) -> tuple[dict[str, Any], list[int]]:
    """The Python fold's export of ``events`` and the stops it snapshots at."""
    stops = default_stops(list(events))
    return export_run(list(events), stops), stops


def first_difference(python: Any, node: Any, where: str = "") -> str | None:
    """Where two exports first differ (``None`` when equal), for a readable failure."""
    if isinstance(python, dict) and isinstance(node, dict):
        for key in sorted(set(python) | set(node)):
            if key not in python or key not in node:
                return f"{where}.{key}: only in {'node' if key in node else 'python'}"
            found = first_difference(python[key], node[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(python, list) and isinstance(node, list):
        if len(python) != len(node):
            return f"{where}: {len(python)} items in python, {len(node)} in node"
        for i, (a, b) in enumerate(zip(python, node, strict=True)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if python == node else f"{where}: python {python!r}, node {node!r}"
