"""The project as a new user gets it: built into a wheel, installed into a fresh virtualenv
outside the checkout, started with its own ``picoflow-web`` command.

* :func:`build_dists` copies the sources a build needs into a temporary folder (the
  checkout is not written to) and runs ``python -m build`` there: an sdist, and the wheel
  built from that sdist, so a file missing from the sdist fails the build.
* :func:`make_venv` creates a virtualenv with ``python -m venv`` and installs into it with
  its own pip (from PyPI or pip's configured indexes; pip's cache makes reruns quick).
* :func:`outside_env` is the environment of such a process: nothing that points back into
  the checkout (``PYTHONPATH``) or at the test suite's settings and services.
* :func:`served` runs ``picoflow-web serve`` on a free port until the block ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "CHANGELOG.md", "LICENSE",
           "manage.py", "runtime", "picoflow_web", "templates", "static")
"""What a build reads: the packages, the top-level site files and the metadata."""
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE",
           "DATABASE_URL", "REDIS_URL")
"""Variables that would lead an installed copy back to the checkout or the suite's setup."""


class ServeError(RuntimeError):
    """``picoflow-web serve`` exited or did not answer in time."""


def run(args: list[str | Path], *, env: Mapping[str, str], cwd: Path,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run a command; its output is kept, and shown if it fails."""
    result = subprocess.run([str(a) for a in args], env=dict(env), cwd=cwd, text=True,
                            capture_output=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {result.returncode}:\n"
                             f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result


def outside_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an installed copy: the suite's own variables removed, the
    per-user data folder (``XDG_DATA_HOME``) under ``home``."""
    env = {k: v for k, v in os.environ.items()
           if k not in DROPPED and not k.startswith(("PICOFLOW_", "PYTEST_"))}
    env.update({"XDG_DATA_HOME": str(home / "xdg-data"), "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


def build_dists(workdir: Path) -> tuple[Path, Path]:
    """The wheel and the sdist of the checkout, built in ``workdir``."""
    source = workdir / "source"
    source.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        origin = REPO_ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=ignore)
        else:
            shutil.copy2(origin, source / name)
    out = workdir / "dist"
    run([sys.executable, "-m", "build", "--outdir", out, source],
        env=outside_env(workdir), cwd=workdir)
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return wheels[0], sdists[0]


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name


def make_venv(root: Path, *requirements: str, python: str = sys.executable) -> Venv:
    """A fresh virtualenv of ``python`` at ``root`` with ``requirements`` pip-installed."""
    run([python, "-m", "venv", root], env=outside_env(root.parent), cwd=root.parent)
    venv = Venv(root)
    run([venv.python, "-m", "pip", "install", "--disable-pip-version-check", "-q",
         *requirements], env=outside_env(root.parent), cwd=root.parent)
    return venv


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (``serve`` binds it itself a moment later)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    data_dir: Path
    env: dict[str, str]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def wait_healthy(base_url: str, process: subprocess.Popen[bytes], log: Path,
                 timeout: float = 120) -> None:
    """Until ``/healthz`` answers 200; fails when the server exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServeError(f"exited {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(base_url + "/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise ServeError(f"no answer from {base_url}:\n{log.read_text(errors='replace')}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a user stops it (it stops its Daphne and workers); its own process group
    is killed only if it does not exit."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def background(args: list[str | Path], *, env: Mapping[str, str], cwd: Path,
               log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process for the duration of the block (own session: Ctrl-C goes to it alone)."""
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(a) for a in args], env=dict(env), cwd=cwd,
                                   stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    except BaseException:
        print(f"--- {log_path} ---\n{log_path.read_text(errors='replace')}", file=sys.stderr)
        raise
    finally:
        stop(process)


@contextlib.contextmanager
def served(venv: Venv, home: Path, *, workers: int = 1,
           env: Mapping[str, str] | None = None) -> Iterator[Served]:
    """``picoflow-web serve`` from ``venv``, run in ``home`` with no ``--data-dir``: its
    data goes to the per-user folder, ``$XDG_DATA_HOME/picoflow-web``."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server_env = outside_env(home, env)
    log_path = home / "serve.log"
    with background([venv.bin("picoflow-web"), "serve", "--port", str(port),
                     "--workers", str(workers)], env=server_env, cwd=home,
                    log_path=log_path) as process:
        base_url = f"http://127.0.0.1:{port}"
        wait_healthy(base_url, process, log_path)
        yield Served(base_url, process, log_path,
                     Path(server_env["XDG_DATA_HOME"]) / "picoflow-web", server_env)
