"""The runtime alone: the wheel installed without extras brings pydantic and anyio, no
Django and no httpx2 (a ``DashboardSink`` there says which extra it needs); with the ``http``
extra the docs' shipping example runs and its ``DashboardSink`` ships the run to a live
dashboard (the installed one of ``picoflow-web serve``), where it shows up finished.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.packaging.conftest import NEWEST_PYTHON
from tests.packaging.installed import REPO_ROOT, Served, Venv, outside_env, run
from tests.webhelpers import wait_for

pytestmark = [pytest.mark.slow]


def docs_shipping_example() -> str:
    """The docs' complete example under "Ship events from your process"."""
    text = (REPO_ROOT / "docs" / "tutorials" / "watch-your-process.md").read_text(
        encoding="utf-8")
    section = text.split("## Ship events from your process", 1)[1]
    return str(re.findall(r"```python\n(.*?)```", section, re.DOTALL)[0])


def test_the_runtime_alone_has_no_django(runtime_venv: Venv, tmp_path: Path) -> None:
    env = outside_env(tmp_path)
    probe = subprocess.run([runtime_venv.python, "-c", "import django"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=False)
    assert probe.returncode == 1 and "No module named 'django'" in probe.stderr
    found = run([runtime_venv.python, "-c",
                 "import runtime, runtime.events.dashboard as d; print(runtime.__file__, "
                 "d.DashboardSink.__name__)"], env=env, cwd=tmp_path).stdout
    assert "site-packages/runtime/__init__.py DashboardSink" in found
    listed = run([runtime_venv.python, "-m", "pip", "list", "--format=json"], env=env,
                 cwd=tmp_path).stdout
    names = {p["name"].lower() for p in json.loads(listed)}
    assert {"pydantic", "anyio", "picoflow-web"} <= names
    assert not names & {"django", "channels", "daphne", "whitenoise", "httpx2"}
    # What ships to a dashboard says what to install.
    sink = subprocess.run([runtime_venv.python, "-c", "from runtime.events import "
                           "DashboardSink; DashboardSink('http://127.0.0.1:9', 't')"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert sink.returncode == 1
    assert sink.stderr.strip().splitlines()[-1] == (
        "ImportError: DashboardSink sends with httpx2, which is not installed: "
        "pip install 'picoflow-web[http]'")
    # The command says how to get the dashboard instead of failing with a traceback.
    serve = subprocess.run([runtime_venv.bin("picoflow-web"), "serve"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=False)
    assert serve.returncode == 2 and "pip install 'picoflow-web[web]'" in serve.stderr


@pytest.mark.skipif(NEWEST_PYTHON is None, reason="python3.13 is not on this machine")
def test_the_runtime_alone_is_installed_on_python_3_13(runtime_venv: Venv,
                                                       tmp_path: Path) -> None:
    version = run([runtime_venv.python, "-c", "import sys, runtime; "
                   "print('%d.%d' % sys.version_info[:2])"],
                  env=outside_env(tmp_path), cwd=tmp_path).stdout.strip()
    assert version == "3.13"
    classifiers = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"Programming Language :: Python :: {version}"' in classifiers


def test_the_docs_example_ships_its_run_to_a_live_dashboard(
    http_venv: Venv, web_venv: Venv, dashboard: Served, tmp_path: Path,
) -> None:
    # The docs' token command, through the installed dashboard's own command.
    made = run([web_venv.bin("picoflow-web"), "manage", "create_api_token", "admin", "laptop",
                "--scope", "ingest", "--scope", "read"], env=dashboard.env, cwd=tmp_path)
    token = made.stdout.strip().splitlines()[-1]
    script = tmp_path / "counting.py"
    script.write_text(docs_shipping_example(), encoding="utf-8")
    shipped = run([http_venv.python, script], cwd=tmp_path, env=outside_env(
        tmp_path, {"PICOFLOW_DASHBOARD_URL": dashboard.base_url,
                   "PICOFLOW_DASHBOARD_TOKEN": token}))
    assert shipped.stdout.strip() == "total 10"
    # engine.close() sent everything: the dashboard has the run, finished, with its events.
    found = _runs(dashboard.base_url, token, "Counting")
    assert [r["status"] for r in found] == ["finished"], found
    events = _get(dashboard.base_url, f"/api/runs/{found[0]['id']}/events", token)["events"]
    assert events[0]["type"] == "turn.started" and events[-1]["type"] == "turn.finished"
    assert [e["seq"] for e in events] == list(range(len(events)))


def _get(base_url: str, path: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(base_url + path,
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def _runs(base_url: str, token: str, flow: str) -> list[dict[str, str]]:
    """The runs of ``flow``, once one is there and no longer running (polled: ingest
    stores a batch before it answers, but a turn's end may come in a later batch)."""
    runs: list[dict[str, str]] = []

    def ended() -> bool:
        runs[:] = _get(base_url, f"/api/runs?flow={flow}", token)["runs"]
        return bool(runs) and all(r["status"] != "running" for r in runs)

    wait_for(ended, f"a run of {flow} to end")
    return runs
