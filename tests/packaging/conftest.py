"""Session fixtures of the packaging tests: the wheel is built once, installed once into
a virtualenv with the dashboard (``[web]``), once into one with the runtime alone and once
into one with the runtime and httpx2 (``[http]``), and the dashboard from the first is served
once for every test that needs it.

Everything lives in one temporary folder outside the checkout (pytest's
``tmp_path_factory``); the installed copies never see the checkout (no ``PYTHONPATH``,
their working folder is elsewhere).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.installed import REPO_ROOT, Served, Venv, build_dists, make_venv, served


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path
    seconds: float
    """How long the build took (reported, never asserted)."""


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    started = time.monotonic()
    wheel, sdist = build_dists(tmp_path_factory.mktemp("build"))
    return Dists(wheel, sdist, time.monotonic() - started)


@pytest.fixture(scope="session")
def web_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh virtualenv with ``picoflow-web[web]`` installed from the wheel."""
    root = tmp_path_factory.mktemp("web-venv") / "venv"
    venv = make_venv(root, f"{dists.wheel}[web]")
    assert not str(venv.root).startswith(str(REPO_ROOT))
    return venv


def _python(version: str) -> str | None:
    """An interpreter of ``version`` that runs: on the PATH, or one pyenv installed (its
    shim on the PATH fails unless that version is selected)."""
    candidates = [shutil.which(f"python{version}"),
                  *sorted(map(str, (Path.home() / ".pyenv/versions").glob(
                      f"{version}*/bin/python{version}")), reverse=True)]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import venv, ensurepip"],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return None


NEWEST_PYTHON = _python("3.13")
"""The newest Python the classifiers name, when this machine has it: the runtime alone is
installed there (the dashboard it ships to runs on the suite's own Python)."""


@pytest.fixture(scope="session")
def runtime_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh virtualenv with the wheel installed without extras: the runtime alone."""
    return make_venv(tmp_path_factory.mktemp("runtime-venv") / "venv", str(dists.wheel),
                     python=NEWEST_PYTHON or sys.executable)


@pytest.fixture(scope="session")
def http_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh virtualenv with ``picoflow-web[http]``: the runtime and httpx2, what a
    ``DashboardSink`` ships with."""
    return make_venv(tmp_path_factory.mktemp("http-venv") / "venv", f"{dists.wheel}[http]")


@pytest.fixture(scope="session")
def dashboard(web_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``picoflow-web serve`` from the installed wheel, one worker, quick demo flows."""
    with served(web_venv, tmp_path_factory.mktemp("home"),
                env={"PICOFLOW_DEMO_LATENCY": "0.05"}) as server:
        yield server
