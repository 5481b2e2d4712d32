"""Shared helpers of the web tests.

* Credentials in the test database: users, bearer tokens, session cookies.
* Websocket helpers for ``channels.testing.WebsocketCommunicator``: headers with an
  ``Origin`` (``AllowedHostsOriginValidator`` refuses sockets without one) and readers
  that collect a run's events until the turn ends.
* Event-sequence checks: seqs ``0..n-1``, no gap, no duplicate.
* :class:`HttpSession`: a small cookie-keeping HTTP client for live Daphne servers (no
  redirect following, any status returned), with a real ``/login/`` CSRF round-trip.
* Private services for cross-process tests: :func:`redis_server` and
  :func:`postgres_server` start throw-away instances on unix sockets in a temporary
  folder and remove them afterwards (the session shares one of each: the ``redis`` and
  ``postgres`` fixtures in ``tests/conftest.py``). :func:`require_services` skips a test,
  with the reason, only when a binary is missing and ``scripts/ensure_services.sh`` cannot
  install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.message import Message
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
ORIGIN = "http://127.0.0.1"
PASSWORD = "a-long-test-password-9417"
TERMINAL_EVENTS = frozenset({"turn.finished", "turn.failed"})
"""The last event of every turn."""


# -- credentials (test database, in-process) ---------------------------------------------


async def amake_user(username: str = "alice", password: str = PASSWORD, *,
                     project: str | None = "default", role: str = "operator",
                     **extra: Any) -> Any:
    """A user in the test database, with ``role`` in ``project`` (None: no project)."""
    from django.contrib.auth import get_user_model

    user = await get_user_model().objects.acreate_user(
        username=username, password=password, **extra)
    if project is not None:
        await amember(user, project, role)
    return user


async def amember(user: Any, project: str, role: str = "operator") -> None:
    """Give ``user`` ``role`` in ``project`` (made if missing)."""
    from picoflow_web.models import Membership, Project

    found, _ = await Project.objects.aget_or_create(name=project)
    await Membership.objects.aupdate_or_create(project=found, user=user,
                                               defaults={"role": role})


async def atoken(user: Any, name: str = "tests", scopes: tuple[str, ...] | None = None,
                 project: str = "default", **extra: Any) -> str:
    """A new raw bearer token for ``user`` in ``project``."""
    from asgiref.sync import sync_to_async

    from picoflow_web.models import ApiToken, Project

    found, _ = await Project.objects.aget_or_create(name=project)
    _, raw = await sync_to_async(ApiToken.issue)(user, name, scopes, project=found, **extra)
    return raw


async def asession_cookie(user: Any) -> str:
    """A ``Cookie`` header value carrying a logged-in session of ``user``."""
    from django.conf import settings
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


def bearer(raw: str) -> dict[str, str]:
    """Headers of a bearer-token request."""
    return {"Authorization": f"Bearer {raw}"}


def ws_headers(cookie: str | None = None, origin: str | None = ORIGIN,
               host: str = "127.0.0.1") -> list[tuple[bytes, bytes]]:
    """Scope headers of a websocket handshake (Origin unless ``origin`` is None)."""
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if cookie is not None:
        headers.append((b"cookie", cookie.encode()))
    return headers


# -- event sequences -----------------------------------------------------------------------


def seqs_of(events: Iterable[Mapping[str, Any]]) -> list[int]:
    return [int(e["seq"]) for e in events]


def assert_gap_free(seqs: list[int], count: int | None = None) -> None:
    """``seqs`` is exactly ``0, 1, ..., n-1`` (and ``n == count`` when given)."""
    # Counted once each: a wide run's tens of thousands of seqs, each counted through the
    # list, would take the check seconds.
    duplicates = sorted(s for s, times in Counter(seqs).items() if times > 1)
    assert not duplicates, f"duplicate seqs {duplicates[:20]}"
    expected = list(range(len(seqs) if count is None else count))
    if seqs != expected:
        missing = sorted(set(expected) - set(seqs))
        extra = sorted(set(seqs) - set(expected))
        disorder = seqs != sorted(seqs)
        raise AssertionError(
            f"seqs are not 0..{len(expected) - 1}: missing {missing[:20]}, unexpected "
            f"{extra[:20]}, out of order: {disorder} (got {len(seqs)} events)")


async def receive_run_messages(communicator: Any, *, until_end: bool = True,
                               max_events: int | None = None,
                               timeout: float = 10.0) -> list[dict[str, Any]]:
    """JSON messages from a run socket until the turn's last event (or ``max_events``)."""
    messages: list[dict[str, Any]] = []
    received = 0
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"run socket: no end of turn within {timeout}s; got "
                                 f"{received} events in {len(messages)} messages")
        message = await communicator.receive_json_from(timeout=remaining)
        messages.append(message)
        if message.get("type") != "events":
            continue
        received += len(message["events"])
        if until_end and any(e["type"] in TERMINAL_EVENTS for e in message["events"]):
            return messages
        if max_events is not None and received >= max_events:
            return messages


def events_of(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events of ``events`` messages, in the order received."""
    return [e for m in messages if m.get("type") == "events" for e in m["events"]]


async def wait_until(predicate: Callable[[], Awaitable[bool]], *, timeout: float = 10.0,
                     interval: float = 0.005, what: str = "condition") -> None:
    """Poll an async predicate until it holds."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition()`` until it holds (a timeout, not a bound: a failure names what)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


async def stored_count(run_id: str) -> int:
    from picoflow_web.models import EventRecord

    return await EventRecord.objects.filter(run_id=run_id).acount()


async def wait_run_done(run_id: str, timeout: float = 15.0) -> Any:
    """Wait until the run ended, and until its (inline) task ended."""
    from picoflow_web.models import Run
    from tests import inline_tasks

    async def done() -> bool:
        status = await Run.objects.filter(id=run_id).values_list("status", flat=True).afirst()
        return status in Run.ENDED

    await wait_until(done, timeout=timeout, what=f"run {run_id} to finish")
    pending = [t for t in list(inline_tasks.RUNNING) if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)
    return await Run.objects.aget(id=run_id)

async def run_to_the_end(**start: Any) -> tuple[Any, Any]:
    """``services.run_execute``, and until its worker's task ended too (the task still
    stops its lease keeper after the reply is recorded): the run and its reply."""
    from picoflow_web.execute import services

    run, reply = await services.run_execute(**start)
    await wait_run_done(run.id)
    return run, reply


# -- HTTP against live servers --------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class HttpResponse:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class HttpSession:
    """Cookie-keeping HTTP client for one live server (no redirects followed)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.cookies: dict[str, str] = {}
        self._opener = urllib.request.build_opener(_NoRedirect)

    def cookie_header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())

    def request(self, method: str, path: str, *, json_body: Any = None,
                form: Mapping[str, str] | None = None, data: bytes | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: float = 15.0) -> HttpResponse:
        all_headers = dict(headers or {})
        if json_body is not None:
            data = json.dumps(json_body).encode()
            all_headers.setdefault("Content-Type", "application/json")
        elif form is not None:
            data = urllib.parse.urlencode(form).encode()
            all_headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        if self.cookies:
            all_headers.setdefault("Cookie", self.cookie_header())
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers=all_headers)
        try:
            with self._opener.open(request, timeout=timeout) as raw:
                response = HttpResponse(raw.status, raw.headers, raw.read())
        except urllib.error.HTTPError as exc:
            with exc:
                response = HttpResponse(exc.code, exc.headers, exc.read())
        for header in response.headers.get_all("Set-Cookie") or []:
            parsed: SimpleCookie = SimpleCookie()
            parsed.load(header)
            for name, morsel in parsed.items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value
        return response

    def get(self, path: str, **kwargs: Any) -> HttpResponse:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> HttpResponse:
        return self.request("POST", path, **kwargs)

    def login(self, username: str, password: str = PASSWORD) -> None:
        """Log in through ``/login/``: fetch the form (CSRF cookie), post it back."""
        page = self.get("/login/")
        assert page.status == 200, f"GET /login/ answered {page.status}"
        token = self.cookies.get("csrftoken")
        assert token, "GET /login/ set no csrftoken cookie"
        answer = self.post("/login/", form={"username": username, "password": password,
                                            "csrfmiddlewaretoken": token},
                           headers={"Origin": self.base_url, "Referer": self.base_url + "/"})
        assert answer.status == 302, f"POST /login/ answered {answer.status}"
        assert "sessionid" in self.cookies, "POST /login/ set no session cookie"


# -- private services -------------------------------------------------------------------------


class ServiceError(RuntimeError):
    """A private service did not start."""


def find_binary(name: str) -> str | None:
    """``name`` on PATH, else in Debian's ``/usr/lib/postgresql/<version>/bin``."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return candidates[-1] if candidates else None


SERVICE_BINARIES = ("redis-server", "initdb", "pg_ctl", "postgres")
SERVICE_MODULES = ("psycopg", "channels_redis", "websockets")


def _missing_services() -> list[str]:
    missing = [b for b in SERVICE_BINARIES if find_binary(b) is None]
    missing += [f"python module {m}" for m in SERVICE_MODULES
                if importlib.util.find_spec(m) is None]
    return missing


_ENSURE_TRIED: list[str] = []


def require_services() -> None:
    """Skip the calling test if redis-server / PostgreSQL (or their Python clients) are
    missing and ``scripts/ensure_services.sh`` could not install them."""
    import pytest

    missing = _missing_services()
    if missing and not _ENSURE_TRIED:
        script = REPO_ROOT / "scripts" / "ensure_services.sh"
        venv_python = os.environ.get("PICOFLOW_TEST_PYTHON") or _venv_python()
        try:
            result = subprocess.run(["bash", str(script), venv_python], cwd=REPO_ROOT,
                                    capture_output=True, text=True, timeout=900, check=False)
            _ENSURE_TRIED.append((result.stdout + result.stderr).strip()[-600:])
        except (OSError, subprocess.TimeoutExpired) as exc:
            _ENSURE_TRIED.append(f"running it failed: {exc}")
        importlib.invalidate_caches()
        missing = _missing_services()
    if missing:
        note = f": {_ENSURE_TRIED[0]}" if _ENSURE_TRIED and _ENSURE_TRIED[0] else ""
        pytest.skip(f"needs {', '.join(missing)}, which scripts/ensure_services.sh could "
                    f"not install (it installs only as root with apt-get){note}")


def _venv_python() -> str:
    import sys

    return sys.executable


def _run_as_postgres(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL server tool; as root through ``runuser -u postgres``."""
    command = list(args)
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)


def _private_dir(prefix: str, owner: str | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    if owner is not None and os.geteuid() == 0:
        shutil.chown(path, user=owner, group=owner)
    return path


@contextlib.contextmanager
def redis_server(timeout: float = 10.0) -> Iterator[str]:
    """A private ``redis-server`` on a unix socket only; yields its ``REDIS_URL``."""
    binary = find_binary("redis-server")
    if binary is None:
        raise ServiceError("redis-server is not installed")
    workdir = _private_dir("pf-redis-")
    sock = workdir / "redis.sock"
    log = workdir / "redis.log"
    process = subprocess.Popen(
        [binary, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
         "--save", "", "--appendonly", "no", "--dir", str(workdir),
         "--logfile", str(log), "--daemonize", "no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout
        while not _redis_ping(sock):
            if process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace") if log.exists() else ""
                raise ServiceError(f"redis-server did not start:\n{text}")
            time.sleep(0.02)
        yield f"unix://{sock}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _redis_ping(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(1.0)
            client.connect(str(sock))
            client.sendall(b"PING\r\n")
            return client.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass(frozen=True)
class PostgresServer:
    """A private PostgreSQL cluster (:func:`postgres_server`): ``user`` may log in over the
    unix socket in ``socket_dir`` and create databases."""

    socket_dir: Path
    user: str

    def url(self, database: str) -> str:
        """The ``DATABASE_URL`` of ``database`` for :attr:`user`."""
        return f"postgres://{self.user}@/{database}?host={urllib.parse.quote(str(self.socket_dir))}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database owned by :attr:`user` (a fresh name unless given): its
        ``DATABASE_URL``. Tests that share the cluster each take one of their own."""
        import psycopg

        name = name or f"pf_{secrets.token_hex(6)}"
        with psycopg.connect(host=str(self.socket_dir), user="postgres", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}" OWNER "{self.user}"')
        return self.url(name)


@contextlib.contextmanager
def postgres_server(user: str = "picoflow") -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster listening on a unix socket only.

    As root, ``initdb``/``pg_ctl`` run as the ``postgres`` user (PostgreSQL refuses to
    run as root). Creates ``user`` with CREATEDB; the cluster is stopped and deleted
    afterwards. The test session shares one (the ``postgres`` fixture in
    ``tests/conftest.py``).
    """
    import psycopg

    initdb, pg_ctl = find_binary("initdb"), find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise ServiceError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    workdir = _private_dir("pf-pg-", owner="postgres")
    data = workdir / "data"
    log = workdir / "server.log"
    started = False
    try:
        result = _run_as_postgres([initdb, "-D", str(data), "-U", "postgres", "-A", "trust",
                                   "-E", "UTF8", "--locale=C", "--no-sync"], timeout=120)
        if result.returncode != 0:
            raise ServiceError(f"initdb failed:\n{result.stdout}\n{result.stderr}")
        options = (f"-c listen_addresses='' -c unix_socket_directories='{workdir}' "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   "-c max_connections=100")
        result = _run_as_postgres([pg_ctl, "-D", str(data), "-l", str(log), "-o", options,
                                   "-w", "-t", "60", "start"], timeout=90)
        if result.returncode != 0:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise ServiceError(f"pg_ctl start failed:\n{result.stdout}\n{result.stderr}\n{text}")
        started = True
        with psycopg.connect(host=str(workdir), user="postgres", dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(f'CREATE ROLE "{user}" LOGIN CREATEDB')
        yield PostgresServer(workdir, user)
    finally:
        if started:
            _run_as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
                             timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)
