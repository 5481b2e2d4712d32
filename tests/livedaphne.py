"""Start a real Daphne process serving ``picoflow_web.asgi:application``.

Usage::

    from tests.livedaphne import live_daphne

    with live_daphne() as server:
        status, headers, body = server.get("/healthz")

The test process binds a listening socket on ``127.0.0.1:0`` and hands it to
Daphne with ``--fd``, so the port is known before Daphne starts and no other
process can take it in between. Each server gets its own temporary
``PICOFLOW_DATA_DIR`` and SQLite database (a copy of one migrated once per test
process, or migrated in place when the folder already holds a database)
unless ``data_dir`` is given; pass the same ``data_dir`` to two servers to make
them share one database. ``server.stop_daphne()`` and ``server.start_daphne()``
restart Daphne on the same port and data folder (its workers go on meanwhile); the new
one binds the port itself, as a restarted server would.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ASGI_APP = "picoflow_web.asgi:application"


class DaphneStartError(RuntimeError):
    """Daphne exited or did not answer HTTP in time."""


@dataclass
class LiveDaphne:
    host: str
    port: int
    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    env: dict[str, str] = field(repr=False)
    extra_args: tuple[str, ...] = ()
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    """The ``manage.py db_worker`` processes started for this server (``start_worker``)."""

    def start_worker(self, worker_id: str | None = None,
                     env: Mapping[str, str | None] | None = None) -> subprocess.Popen[bytes]:
        """Start a ``manage.py db_worker`` on this server's database; browsers hear its runs
        through this server (``PICOFLOW_RELAY_URL``). Stopped with the server."""
        worker_env = dict(self.env, PICOFLOW_RELAY_URL=self.base_url)
        for key, value in (env or {}).items():
            if value is None:
                worker_env.pop(key, None)
            else:
                worker_env[key] = value
        name = worker_id or f"w{len(self.workers) + 1}-{self.port}"
        log = (self.data_dir / f"worker-{name}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "manage.py"), "db_worker", "--no-startup-delay",
             "--worker-id", name, "--interval", worker_env.get("PICOFLOW_WORKER_POLL", "0.05")],
            cwd=REPO_ROOT, env=worker_env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT)
        log.close()
        self.workers.append(process)
        return process

    def worker_logs(self) -> str:
        """Everything the workers wrote so far."""
        return "".join(f"--- {path.name} ---\n{path.read_text(errors='replace')}"
                       for path in sorted(self.data_dir.glob("worker-*.log")))

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_base_url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + (path if path.startswith("/") else "/" + path)

    def get(
        self, path: str, *, headers: Mapping[str, str] | None = None, timeout: float = 10.0
    ) -> tuple[int, Message, bytes]:
        """GET ``path``; returns (status, headers, body) for any HTTP status."""
        request = urllib.request.Request(self.url(path), headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.headers, exc.read()

    def stop_daphne(self) -> None:
        """Stop Daphne (as its process manager would: SIGTERM); the workers go on, and
        connections to the port are refused until :meth:`start_daphne`."""
        stop_process(self.process)

    def start_daphne(self, timeout: float = 30.0) -> None:
        """Start a new Daphne on the same port, data folder and arguments; returns once it
        answers. Its output goes on in the same log.

        This one binds the port itself, as a restarted server does: connections are refused
        until it listens, once the application is loaded.
        """
        self.process = _spawn_daphne(["-b", self.host, "-p", str(self.port)], self.env,
                                     self.log_path, self.extra_args)
        _wait_until_ready(self, timeout)

    def log(self) -> str:
        """Everything Daphne has written to stdout/stderr so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


@dataclass(frozen=True)
class SharedServer:
    """The test session's live dashboard (the ``shared_daphne`` fixture, tests/conftest.py)."""

    server: LiveDaphne
    password: str
    """The first user's, ``admin``."""
    token: str
    """An API token of ``operator``, an operator of the default project, with every scope."""


def build_env(data_dir: Path, overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The environment for a server (or manage.py) using ``data_dir``."""
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "picoflow_web.config.settings",
            "PICOFLOW_DATA_DIR": str(data_dir),
            "DATABASE_URL": f"sqlite:///{data_dir / 'picoflow.sqlite3'}",
            "PICOFLOW_DEBUG": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    # The parent's pytest settings must not leak into the server.
    env.pop("PYTEST_CURRENT_TEST", None)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_manage(
    *args: str, env: Mapping[str, str], timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py`` with ``args`` in the checkout; output is captured."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args],
        cwd=REPO_ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


_MIGRATED: dict[bool, Path] = {}
"""The databases servers' copies are taken from, once each is made (one per process): with
every migration applied (False), and with the first user made too (True)."""

ADMIN_PASSWORD = "admin_password"
"""Where ``manage.py ensure_admin`` keeps the first user's password in a data folder."""


def _migrated_template(admin: bool = False) -> Path:
    """A SQLite database with every migration applied (and with ``admin``, the first user
    ``manage.py ensure_admin`` makes, its password next to it), made on first use: each
    command costs a Django start-up, paid once instead of once per server."""
    if admin not in _MIGRATED:
        folder = Path(tempfile.mkdtemp(prefix="picoflow-migrated-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        database = folder / "picoflow.sqlite3"
        if admin:
            _copy_database(_migrated_template(), database)
            result = run_manage("ensure_admin", env=build_env(folder))
        else:
            result = run_manage("migrate", "--noinput", env=build_env(folder))
        if result.returncode != 0:
            raise DaphneStartError(f"manage.py {result.args[2]} failed ({result.returncode}):\n"
                                   f"{result.stdout}\n{result.stderr}")
        _MIGRATED[admin] = database
    return _MIGRATED[admin]


def _copy_database(source: Path, target: Path) -> None:
    # The backup API copies what the source's write-ahead log may still hold, too.
    with contextlib.closing(sqlite3.connect(source)) as old, \
            contextlib.closing(sqlite3.connect(target)) as copy:
        old.backup(copy)
    target.chmod(0o600)  # as the settings create it


def _migrate(data_dir: Path, env: Mapping[str, str], admin: bool) -> None:
    """Give the server at ``data_dir`` a migrated database (with ``admin``, its first user
    too): a copy of a template when it would get a new SQLite file of its own, else the
    ``manage.py`` commands on what it has."""
    database = data_dir / "picoflow.sqlite3"
    fresh = (env.get("DATABASE_URL") == f"sqlite:///{database}"
             and (not database.exists() or database.stat().st_size == 0))
    if fresh:
        template = _migrated_template(admin)
        _copy_database(template, database)
        if admin:
            password = data_dir / ADMIN_PASSWORD
            password.touch(mode=0o600)  # private from its first byte, as ensure_admin's
            password.write_bytes((template.parent / ADMIN_PASSWORD).read_bytes())
        return
    for command in (("migrate", "--noinput"), ("ensure_admin",))[:1 + admin]:
        result = run_manage(*command, env=env)
        if result.returncode != 0:
            raise DaphneStartError(
                f"manage.py {command[0]} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )


def _wait_until_ready(server: LiveDaphne, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise DaphneStartError(
                f"Daphne exited with code {server.process.returncode} before answering.\n"
                f"--- Daphne log ---\n{server.log()}"
            )
        try:
            status, _, _ = server.get("/healthz", timeout=2.0)
        except OSError as exc:  # connection refused/reset while starting up
            last_error = exc
        else:
            if status == 200:
                return
            last_error = DaphneStartError(f"/healthz answered HTTP {status}")
        time.sleep(0.1)
    raise DaphneStartError(
        f"Daphne did not answer within {timeout:.0f}s (last error: {last_error!r}).\n"
        f"--- Daphne log ---\n{server.log()}"
    )


def _spawn_daphne(endpoint: list[str], env: Mapping[str, str], log_path: Path,
                  extra_args: tuple[str, ...], pass_fds: tuple[int, ...] = ()
                  ) -> subprocess.Popen[bytes]:
    """Daphne listening where ``endpoint`` (its arguments) says, appending its output to
    ``log_path``."""
    with log_path.open("ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "daphne", *endpoint, *extra_args, ASGI_APP],
            cwd=REPO_ROOT,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            pass_fds=pass_fds,
        )


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


@contextlib.contextmanager
def live_daphne(
    env: Mapping[str, str | None] | None = None,
    *,
    data_dir: Path | None = None,
    migrate: bool = True,
    host: str = "127.0.0.1",
    startup_timeout: float = 30.0,
    extra_args: tuple[str, ...] = (),
    workers: int = 1,
    admin: bool = False,
) -> Iterator[LiveDaphne]:
    """Run Daphne for the duration of the ``with`` block.

    ``env`` overrides the inherited environment (a ``None`` value removes a
    variable). ``data_dir`` defaults to a fresh temporary folder that is removed
    afterwards; a given one is kept. ``migrate`` gives the server a migrated database
    first (see :func:`_migrate`). ``extra_args`` go to the daphne command
    line before the application path. ``workers`` ``manage.py db_worker`` processes
    execute the runs started through it (more with ``server.start_worker()``). ``admin``:
    the database has its first user (``manage.py ensure_admin``), whose password is in the
    data folder's ``admin_password``; it needs ``migrate``.
    """
    owns_data_dir = data_dir is None
    data_path = Path(tempfile.mkdtemp(prefix="picoflow-daphne-")) if data_dir is None else data_dir
    data_path.mkdir(parents=True, exist_ok=True)
    server_env = build_env(data_path, env)
    process: subprocess.Popen[bytes] | None = None
    server: LiveDaphne | None = None
    try:
        if migrate:
            _migrate(data_path, server_env, admin)

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, 0))
            listener.listen(128)
            port = listener.getsockname()[1]
            fd = listener.fileno()
            log_path = data_path / f"daphne-{port}.log"
            log_path.write_bytes(b"")
            process = _spawn_daphne(["--fd", str(fd)], server_env, log_path, extra_args,
                                    pass_fds=(fd,))
        # Daphne holds its own copy of the listening socket now.
        server = LiveDaphne(
            host=host,
            port=port,
            process=process,
            data_dir=data_path,
            log_path=log_path,
            env=server_env,
            extra_args=extra_args,
        )
        _wait_until_ready(server, startup_timeout)
        for _ in range(workers):
            server.start_worker()
        try:
            yield server
        except BaseException:
            # Shown by pytest with the failing test's captured output.
            print(f"--- Daphne log ({log_path}) ---\n{server.log()}\n{server.worker_logs()}",
                  file=sys.stderr)
            raise
        finally:
            for worker in server.workers:
                stop_process(worker)
    finally:
        if server is not None:
            process = server.process  # the one running now, after any restart
        if process is not None:
            stop_process(process)
        if owns_data_dir:
            shutil.rmtree(data_path, ignore_errors=True)
