"""The run sockets through a real Daphne, with a plain ``websockets`` client: what only a
real server shows.

* Every refusal closes with its documented code (see :mod:`picoflow_web.live.consumers`), and
  the server logs no traceback for it.
* A run whose id Channels would refuse as a group name (a space, a non-ASCII letter, a
  ``/``) is watched live like any other.
* A client that resumes with ``?after=N`` after Daphne restarted gets every later event
  exactly once, in order: those stored while the server was down and those after.

One server (and one ``db_worker``) serves the module; the flows are the tests'
``Ticking`` (:mod:`tests.flows_pkg.ticking`), whose runs go on until their test says stop.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.livedaphne import REPO_ROOT, LiveDaphne, live_daphne, run_manage
from tests.webhelpers import PASSWORD, TERMINAL_EVENTS, HttpSession, bearer, wait_for

pytestmark = pytest.mark.usefixtures("no_tracebacks")


@dataclass
class Site:
    server: LiveDaphne
    token: str
    cookie: str
    """A session cookie of ``alice`` (operator of the default project)."""
    outsider_cookie: str
    """A session cookie of ``bob``, who belongs to another project only."""


def _manage(server: LiveDaphne, *args: str) -> str:
    done = run_manage(*args, env=server.env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    env = {"PICOFLOW_FLOWS": "tests.flows_pkg.ticking:flows", "PYTHONPATH": str(REPO_ROOT)}
    with live_daphne(env) as server:
        _manage(server, "shell", "-c",
                "from django.contrib.auth import get_user_model; User = get_user_model(); "
                f"User.objects.create_user('alice', password={PASSWORD!r}); "
                f"User.objects.create_user('bob', password={PASSWORD!r})")
        _manage(server, "picoflow_project", "add-member", "default", "alice",
                "--role", "operator")
        _manage(server, "picoflow_project", "create", "other")
        _manage(server, "picoflow_project", "add-member", "other", "bob", "--role",
                "operator")
        token = _manage(server, "create_api_token", "alice", "live")
        cookies = []
        for user in ("alice", "bob"):
            browser = HttpSession(server.base_url)
            browser.login(user)
            cookies.append(browser.cookie_header())
        yield Site(server, token, *cookies)


@pytest.fixture
def no_tracebacks(site: Site) -> Iterator[None]:
    """The server logs no traceback while the test runs."""
    before = len(site.server.log())
    yield
    assert "Traceback" not in site.server.log()[before:], site.server.log()[before:]


def ws(site: Site, path: str, cookie: str | None = None,
       origin: str | None = "server") -> ClientConnection:
    headers = {"Cookie": cookie} if cookie else {}
    return connect(site.server.ws_base_url + path, additional_headers=headers,
                   origin=site.server.base_url if origin == "server" else origin,  # type: ignore[arg-type]
                   open_timeout=10, max_size=None)


def close_code(socket: ClientConnection) -> tuple[int | None, list[dict[str, Any]]]:
    """Read until the server closes ``socket``: its close code, and what it sent first."""
    sent: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            sent.append(json.loads(socket.recv(timeout=15)))
    return (closed.value.rcvd.code if closed.value.rcvd else None), sent


def start_run(site: Site, config: dict[str, Any]) -> str:
    answer = HttpSession(site.server.base_url).post(
        "/api/runs", json_body={"flow": "Ticking", "message": "tick", "config": config},
        headers=bearer(site.token))
    assert answer.status == 201, answer.body
    return str(answer.json()["run"]["id"])


def stored_events(site: Site, run_id: str) -> list[dict[str, Any]]:
    """All of a run's stored events (``GET /api/runs/<id>/events``, page by page)."""
    events: list[dict[str, Any]] = []
    while True:
        after = events[-1]["seq"] if events else -1
        page = HttpSession(site.server.base_url).get(
            f"/api/runs/{quote(run_id, safe='')}/events?after={after}",
            headers=bearer(site.token))
        assert page.status == 200, page.body
        batch = page.json()["events"]
        if not batch:
            return events
        events.extend(batch)


def stored_count(site: Site, run_id: str) -> int:
    """How many events the run stored, read from the database itself (Daphne may be
    down)."""
    with contextlib.closing(sqlite3.connect(site.server.data_dir / "picoflow.sqlite3")) as db:
        row = db.execute("SELECT COUNT(*) FROM picoflow_web_eventrecord WHERE run_id = ?",
                         (run_id,)).fetchone()
    return int(row[0])


def read_events(socket: ClientConnection, *, until_seq: int | None = None
                ) -> list[dict[str, Any]]:
    """Events from a run socket until one with ``seq >= until_seq`` (or the turn's last)."""
    events: list[dict[str, Any]] = []
    while True:
        message = json.loads(socket.recv(timeout=30))
        assert message["type"] == "events", message
        events.extend(message["events"])
        if until_seq is not None and events and events[-1]["seq"] >= until_seq:
            return events
        if any(e["type"] in TERMINAL_EVENTS for e in message["events"]):
            return events


# -- refusals -------------------------------------------------------------------------------


def test_refusals_close_with_their_documented_codes(site: Site, tmp_path: Path) -> None:
    from picoflow_web.live.consumers import (
        CLOSE_BAD_REQUEST,
        CLOSE_FORBIDDEN,
        CLOSE_NOT_FOUND,
        CLOSE_UNAUTHENTICATED,
    )

    run_id = start_run(site, {"stop_file": str(tmp_path / "stop"), "ticks": 1})
    refusals = {
        "unauthenticated": (f"/ws/runs/{run_id}/", None, "server", CLOSE_UNAUTHENTICATED),
        "unauthenticated list": ("/ws/runs/", None, "server", CLOSE_UNAUTHENTICATED),
        "unknown run": ("/ws/runs/no-such-run/", site.cookie, "server", CLOSE_NOT_FOUND),
        "unknown path": ("/ws/nowhere/", site.cookie, "server", CLOSE_NOT_FOUND),
        "NUL in the run id": ("/ws/runs/a%00b/", site.cookie, "server", CLOSE_NOT_FOUND),
        "foreign project": (f"/ws/runs/{run_id}/", site.outsider_cookie, "server",
                            CLOSE_NOT_FOUND),
        "bad after": (f"/ws/runs/{run_id}/?after=abc", site.cookie, "server",
                      CLOSE_BAD_REQUEST),
        "after out of range": (f"/ws/runs/{run_id}/?after=-5", site.cookie, "server",
                               CLOSE_BAD_REQUEST),
        "foreign origin": (f"/ws/runs/{run_id}/", site.cookie, "http://evil.example",
                           CLOSE_FORBIDDEN),
        "no origin": ("/ws/runs/", site.cookie, None, CLOSE_FORBIDDEN),
        "relay without its key": ("/ws/relay/", None, None, CLOSE_FORBIDDEN),
    }
    for name, (path, cookie, origin, expected) in refusals.items():
        with ws(site, path, cookie, origin) as socket:
            code, sent = close_code(socket)
        assert code == expected, (name, code, sent)
        if expected == CLOSE_BAD_REQUEST:  # says why, in the API's error shape
            assert sent[-1]["type"] == "error"
            assert sent[-1]["error_code"] == "bad_parameter", sent


def test_what_a_client_sends_closes_its_socket_with_4400(site: Site, tmp_path: Path) -> None:
    from picoflow_web.live.consumers import CLOSE_BAD_REQUEST

    run_id = start_run(site, {"stop_file": str(tmp_path / "stop"), "ticks": 1})
    for path in (f"/ws/runs/{run_id}/?after=100000", "/ws/runs/"):
        for junk in ('{"cmd": "publish"}', b"\x00\x01"):
            with ws(site, path, site.cookie) as socket:
                if path != "/ws/runs/":
                    assert json.loads(socket.recv(timeout=15))["type"] == "run"
                socket.send(junk)
                code, sent = close_code(socket)
            assert code == CLOSE_BAD_REQUEST, (path, junk, code)
            assert sent[-1]["type"] == "error" and sent[-1]["code"] == "junk", sent


# -- resume across a restart ----------------------------------------------------------------


@pytest.mark.parametrize(("while_down", "ends"), [
    ("idle", "at once"), ("busy", "at once"), ("busy", "later")])
def test_a_resume_after_a_daphne_restart_gets_every_later_event_once(
        site: Site, tmp_path: Path, while_down: str, ends: str) -> None:
    """While Daphne is down the run stores events (``busy``) or waits, storing none
    (``idle``, as on a model); then it ends either as soon as the client is back (its
    last batches are the first its worker publishes after the restart) or after more live
    batches."""
    stop, pause, paused = tmp_path / "stop", tmp_path / "pause", tmp_path / "paused"
    run_id = start_run(site, {"stop_file": str(stop), "pause_file": str(pause),
                              "paused_file": str(paused)})
    server = site.server
    with ws(site, f"/ws/runs/{run_id}/", site.cookie) as socket:
        assert json.loads(socket.recv(timeout=15))["type"] == "run"
        last = read_events(socket, until_seq=20)[-1]["seq"]
        if while_down == "idle":
            pause.touch()
            wait_for(paused.exists, f"run {run_id} to pause")
        server.stop_daphne()
        with pytest.raises(ConnectionClosed):  # the server went away
            while True:
                socket.recv(timeout=15)
    if while_down == "busy":  # these events reach no browser live
        wait_for(lambda: stored_count(site, run_id) >= last + 21, "events while down")
    server.start_daphne()

    with ws(site, f"/ws/runs/{run_id}/?after={last}", site.cookie) as socket:
        hello = json.loads(socket.recv(timeout=15))
        assert hello["type"] == "run" and hello["run"]["status"] == "running", hello
        stored_then = stored_count(site, run_id) - 1
        resumed = read_events(socket, until_seq=stored_then) if stored_then > last else []
        if ends == "later":  # events stored after the reconnection reach it live too
            resumed += read_events(socket, until_seq=stored_count(site, run_id) + 20)
        stop.touch()
        pause.unlink(missing_ok=True)
        resumed += read_events(socket)

    stored = stored_events(site, run_id)
    assert stored[-1]["type"] in TERMINAL_EVENTS
    assert [e["seq"] for e in resumed] == list(range(last + 1, len(stored)))
    assert resumed == stored[last + 1:]
