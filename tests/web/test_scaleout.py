"""Two Daphne processes sharing a private Redis (channel layer) and a private PostgreSQL
cluster (database): a turn played by process A is watched live over websockets on
process B, which never ran it; a session goes on across them. The same pair also checks
what only a real server shows: Origin refusals, close codes of refused sockets, and a
replay larger than Daphne's 1 MiB websocket message limit.

Skipped, with the reason, only when redis-server or PostgreSQL (or their Python clients)
are missing and ``scripts/ensure_services.sh`` could not install them.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.events import parse_event
from tests.livedaphne import LiveDaphne, build_env, live_daphne, run_manage
from tests.webhelpers import (
    PASSWORD,
    TERMINAL_EVENTS,
    HttpSession,
    assert_gap_free,
    bearer,
    postgres_cluster,
    redis_server,
    require_services,
    seqs_of,
)

try:
    from websockets.exceptions import InvalidStatus
except ImportError:  # websockets missing: require_services() skips these tests
    InvalidStatus = Exception  # type: ignore[assignment,misc]

LATENCY = "0.03"
"""Demo time unit in both servers: TimingFlow then runs for about half a second."""


@dataclass
class Pair:
    a: LiveDaphne
    b: LiveDaphne
    token: str
    manage_env: dict[str, str]


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    require_services()
    with contextlib.ExitStack() as stack:
        redis_url = stack.enter_context(redis_server())
        database_url = stack.enter_context(postgres_cluster())
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pf-scaleout-")))
        env = {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "PICOFLOW_SECRET_KEY": secrets.token_urlsafe(50),
            "PICOFLOW_DEMO_LATENCY": LATENCY,
            "PICOFLOW_LOG_LEVEL": "WARNING",
        }
        manage_env = build_env(data / "manage", env)
        migrated = run_manage("migrate", "--noinput", env=manage_env)  # once, for both
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr

        def credentials() -> str:
            made = run_manage("shell", "-c", "from django.contrib.auth import get_user_model; "
                              "get_user_model().objects.create_user("
                              f"'alice', password={PASSWORD!r})", env=manage_env)
            assert made.returncode == 0, made.stderr
            issued = run_manage("create_api_token", "alice", "scaleout", env=manage_env)
            assert issued.returncode == 0, issued.stderr
            return issued.stdout.strip()

        # Both servers and the credentials at once: each is a subprocess to wait for.
        with ThreadPoolExecutor(3) as pool:
            starting = [pool.submit(stack.enter_context,
                                    live_daphne(env, data_dir=data / name, migrate=False))
                        for name in ("a", "b")]
            token = pool.submit(credentials).result()
            a, b = (future.result() for future in starting)
        assert token.startswith("pf_")
        yield Pair(a, b, token, manage_env)


def ws_connect(server: LiveDaphne, path: str, cookie: str | None,
               origin: str | None = "server") -> Any:
    from websockets.sync.client import connect

    headers = {"Cookie": cookie} if cookie else {}
    return connect(server.ws_base_url + path, additional_headers=headers,
                   origin=server.base_url if origin == "server" else origin,  # type: ignore[arg-type]
                   open_timeout=10, max_size=None)


def recv_json(ws: Any, timeout: float = 15.0) -> dict[str, Any]:
    return json.loads(ws.recv(timeout=timeout))


def test_turn_on_a_is_streamed_live_by_b(pair: Pair) -> None:
    browser = HttpSession(pair.b.base_url)
    browser.login("alice")  # /login/ on B, with its CSRF round-trip
    cookie = browser.cookie_header()
    api = HttpSession(pair.a.base_url)

    with ws_connect(pair.b, "/ws/runs/", cookie) as runs_list:
        # POST /api/runs answers at once; A plays the turn in the background.
        answer = api.post("/api/runs", json_body={"flow": "TimingFlow", "message": "go"},
                          headers=bearer(pair.token))
        assert answer.status == 201, answer.body
        run_id = answer.json()["run"]["id"]

        started = recv_json(runs_list)
        assert started["type"] == "run" and started["run"]["id"] == run_id
        assert started["run"]["status"] == "running" and started["run"]["flow"] == "TimingFlow"

        messages = []
        with ws_connect(pair.b, f"/ws/runs/{run_id}/", cookie) as run_socket:
            hello = recv_json(run_socket)
            assert hello["type"] == "run" and hello["run"]["id"] == run_id
            # B joined while A was still playing the turn: the rest came through Redis.
            assert hello["run"]["status"] == "running"
            while True:
                message = recv_json(run_socket)
                assert message["type"] == "events"
                messages.append(message)
                if any(e["type"] in TERMINAL_EVENTS for e in message["events"]):
                    break

        finished = recv_json(runs_list)
        while finished["run"]["id"] != run_id or finished["run"]["status"] == "running":
            finished = recv_json(runs_list)
        assert finished["run"]["status"] == "finished"
        assert finished["run"]["reply"]["success"] is True

    events = [e for m in messages for e in m["events"]]
    assert_gap_free(seqs_of(events), finished["run"]["event_count"])
    assert events[-1]["type"] == "turn.finished"
    for event in events:
        parse_event(event)
    assert len(messages) >= 3, "expected several live batches, not one replay"
    # What B streamed is what A stored in the shared database.
    stored = HttpSession(pair.b.base_url).get(f"/api/runs/{run_id}/events",
                                              headers=bearer(pair.token)).json()
    assert stored["events"] == events


def test_ai_run_on_a_continues_its_session_on_b(pair: Pair) -> None:
    """The /ai/run contract across processes: the session lives in the shared database.

    (``Chat-Session-Id``: Daphne drops ``CHAT_SESSION_ID``, see test_api.py.)
    """
    first = HttpSession(pair.a.base_url).post(
        "/ai/run", json_body={"flowName": "HotelFlow", "message": "Hi"},
        headers=bearer(pair.token))
    assert first.status == 200, first.body
    session_id = first.json()["session"]
    assert first.headers["CHAT_SESSION_ID"] == session_id
    second = HttpSession(pair.b.base_url).post(
        "/ai/run", json_body={"flowName": "HotelFlow", "message": "yes"},
        headers={"Chat-Session-Id": session_id, **bearer(pair.token)})
    assert second.status == 200, second.body
    assert second.json()["session"] == session_id
    assert "dates" in second.json()["message"]
    ended = HttpSession(pair.a.base_url).post(
        "/ai/end", headers={"Chat-Session-Id": session_id, **bearer(pair.token)})
    assert ended.status == 200 and ended.json()["success"] is True


def test_b_refuses_sockets_with_a_foreign_or_missing_origin(pair: Pair) -> None:
    browser = HttpSession(pair.b.base_url)
    browser.login("alice")
    for origin in ("http://evil.example", None):
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(pair.b, "/ws/runs/", browser.cookie_header(), origin=origin)
        assert refused.value.response.status_code == 403, origin
    with ws_connect(pair.b, "/ws/runs/", browser.cookie_header()):
        pass  # the same socket with B's own Origin opens


@pytest.mark.parametrize(("path", "logged_in", "code"), [
    ("/ws/runs/", False, 4401),
    ("/ws/runs/no-such-run/", False, 4401),
    ("/ws/runs/no-such-run/", True, 4404),
])
def test_refused_sockets_get_their_close_code_over_daphne(
    pair: Pair, path: str, logged_in: bool, code: int
) -> None:
    from websockets.exceptions import ConnectionClosed

    cookie = None
    if logged_in:
        browser = HttpSession(pair.b.base_url)
        browser.login("alice")
        cookie = browser.cookie_header()
    with ws_connect(pair.b, path, cookie) as refused, \
            pytest.raises(ConnectionClosed) as closed:
        refused.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == code


WIDE_RUN = """
import asyncio, json
from runtime import Flow, LogicStep, ModelSelection, ParallelConfig, RunStepRequest
from picoflow_web import services
from picoflow_web.engine import get_engine
from picoflow_web.models import EventRecord

class Noop(LogicStep):
    async def run_logic(self):
        return None

class Fan(LogicStep):
    async def run_logic(self):
        await self.run_steps([RunStepRequest(Noop, key=str(i)) for i in range(3000)])
        return "fanned out"

class WideFlow(Flow):
    def config_model(self):
        return ModelSelection(provider="none", name="none")
    def define_steps(self):
        return [Fan(self), Noop(self)]
    def config_parallel_execution(self):
        return ParallelConfig(max_invocations=100_000)

get_engine().register_flow(WideFlow)
run, reply = asyncio.run(services.run_execute(flow="WideFlow", message="go"))
assert reply.success, reply.message
size = sum(len(json.dumps(p)) for p in
           EventRecord.objects.filter(run_id=run.id).values_list("payload", flat=True))
print(run.id, run.event_count, size)
"""


def test_b_replays_a_wide_finished_run(pair: Pair) -> None:
    """A 3,000-branch run (over 1 MiB of events) replayed through a default Daphne, whose
    websocket messages are capped at 1 MiB: the consumer must split what it sends."""
    from websockets.exceptions import ConnectionClosed

    played = run_manage("shell", "-c", WIDE_RUN, env=pair.manage_env)
    assert played.returncode == 0, played.stdout + played.stderr
    run_id, count, size = played.stdout.split()[-3:]
    assert int(size) > 1024 * 1024, "the run's events must not fit in one message"
    browser = HttpSession(pair.b.base_url)
    browser.login("alice")
    seqs: list[int] = []
    largest = 0
    with ws_connect(pair.b, f"/ws/runs/{run_id}/", browser.cookie_header()) as feed:
        assert recv_json(feed)["type"] == "run"
        try:
            while len(seqs) < int(count):
                text = feed.recv(timeout=15)
                largest = max(largest, len(text.encode()))
                seqs.extend(e["seq"] for e in json.loads(text)["events"])
        except ConnectionClosed as closed:
            raise AssertionError(f"closed after {len(seqs)} of {count} events: "
                                 f"{closed.rcvd}") from None
    assert_gap_free(seqs, int(count))
    assert largest <= 1024 * 1024
