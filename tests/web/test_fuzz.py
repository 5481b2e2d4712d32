"""A real, independent fuzzer against a live Daphne: ``schemathesis run --checks all``
generates requests from ``/api/openapi.json`` (its examples, boundary values, random and
schema-violating data, and sequences that follow the document's links) and checks every
answer: no 5xx; each status, content type, header and body as documented; schema-valid
requests accepted and schema-violating ones refused; 401 without credentials; 405 with
``Allow`` for a method an endpoint does not take. The few exceptions are written down, with
their reasons, in ``schemathesis.toml`` and ``schemathesis_hooks.py`` next to this file.
Bounded in examples so the test stays about a minute long."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.livedaphne import REPO_ROOT, LiveDaphne, live_daphne, run_manage

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "schemathesis.toml"

EXAMPLES = int(os.environ.get("PICOFLOW_FUZZ_EXAMPLES", "60"))
"""Generated requests per operation and phase (under a minute for all of them); more with
``PICOFLOW_FUZZ_EXAMPLES`` for a longer hunt."""

MAKE_TOKEN = (
    "from django.contrib.auth import get_user_model; "
    "from picoflow_web.models import ApiToken, Membership, Project; "
    "fuzz = get_user_model().objects.create_user('fuzz'); "
    "Membership.objects.create(project=Project.objects.get_or_create(name='default')[0], "
    "user=fuzz, role='operator'); "
    "print(ApiToken.issue(fuzz, 'fuzz', ('read', 'run', 'ingest'))[1])"
)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with live_daphne({"PICOFLOW_DEMO_LATENCY": "0", "PICOFLOW_DEMOS": "1"}) as live:
        made = run_manage("shell", "-c", MAKE_TOKEN, env=live.env)
        assert made.returncode == 0, made.stderr
        yield live, made.stdout.split()[-1]


def schemathesis_run(live: LiveDaphne, token: str, report: Path, *args: str
                     ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``schemathesis run --checks all`` against ``live`` with this folder's config; the
    finished process and its JSON report."""
    # The command line, as a user would run it (schemathesis' pytest plugin does not run
    # under this pytest: it reads a private attribute pytest 9 dropped).
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG),
               "run", "--checks", "all", "--max-examples", str(EXAMPLES),
               "--header", f"Authorization: Bearer {token}", "--no-color",
               "--report", "json", "--report-json-path", str(report), *args,
               live.base_url + "/api/openapi.json"]
    done = subprocess.run(command, cwd=REPO_ROOT, env={**live.env, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=900, check=False)
    return done, json.loads(report.read_text()) if report.exists() else {}


def test_the_api_passes_every_schemathesis_check(server: tuple[LiveDaphne, str],
                                                 tmp_path: Path) -> None:
    live, token = server
    done, report = schemathesis_run(live, token, tmp_path / "report.json")
    shown = f"{done.stdout[-30000:]}\n{done.stderr[-5000:]}"
    assert done.returncode == 0, shown
    assert report["failures"] == [] and report["errors"] == [], shown
    operations = report["operations"]
    assert operations["tested"] == operations["total"] >= 16, shown
    # Every phase that has something to run ran clean, the stateful one (sequences along
    # the links between operations) included; the document has no examples to replay.
    phases = {name: phase["status"] for name, phase in report["phases"].items()}
    assert phases == {**phases, "coverage": "success", "fuzzing": "success",
                      "stateful": "success"}, shown
    assert set(phases.values()) <= {"success", "skip"}, shown
