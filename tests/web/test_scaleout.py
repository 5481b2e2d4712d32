"""Two Daphne processes and two workers (``manage.py db_worker``) sharing a private Redis
(channel layer) and a private PostgreSQL cluster (database): a run started through Daphne
A executes on one of the workers and is watched live over websockets on Daphne B, which
never ran it; twenty runs started through both spread over both workers, each executed
exactly once; a session goes on across the Daphnes. The same servers also check what only
a real server shows: Origin refusals, close codes of refused sockets, and a replay larger
than Daphne's 1 MiB websocket message limit.

Redis and PostgreSQL are the test session's (``tests/conftest.py``), the database this
module's own. Skipped, with the reason, only when redis-server or PostgreSQL (or their
Python clients) are missing and ``scripts/ensure_services.sh`` could not install them.
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
from tests.livedaphne import REPO_ROOT, LiveDaphne, build_env, live_daphne, run_manage
from tests.webhelpers import (
    PASSWORD,
    TERMINAL_EVENTS,
    HttpSession,
    PostgresServer,
    assert_gap_free,
    bearer,
    seqs_of,
    wait_for,
)

LATENCY = "0.03"
"""Demo time unit in both servers and workers: TimingFlow then runs for about half a
second."""

WORKERS = ("wa", "wb")
"""The worker ids of the two ``db_worker`` processes."""


@dataclass
class Pair:
    a: LiveDaphne
    b: LiveDaphne
    token: str
    manage_env: dict[str, str]


@pytest.fixture(scope="module")
def pair(postgres: PostgresServer, redis: str) -> Iterator[Pair]:
    with contextlib.ExitStack() as stack:
        data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pf-scaleout-")))
        env = {
            "DATABASE_URL": postgres.create_database(),
            "REDIS_URL": redis,
            "PICOFLOW_SECRET_KEY": secrets.token_urlsafe(50),
            "PICOFLOW_DEMO_LATENCY": LATENCY,
            "PICOFLOW_LOG_LEVEL": "WARNING",
            # The tests' coordinator and its children, beside the demos.
            "PICOFLOW_FLOWS": "tests.flows_pkg.coordinated:flows",
            "PYTHONPATH": str(REPO_ROOT),
        }
        manage_env = build_env(data / "manage", env)
        migrated = run_manage("migrate", "--noinput", env=manage_env)  # once, for both
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr

        def credentials() -> str:
            made = run_manage("shell", "-c", "from django.contrib.auth import get_user_model; "
                              "get_user_model().objects.create_user("
                              f"'alice', password={PASSWORD!r})", env=manage_env)
            assert made.returncode == 0, made.stderr
            joined = run_manage("picoflow_project", "add-member", "default", "alice",
                                "--role", "operator", env=manage_env)
            assert joined.returncode == 0, joined.stderr
            issued = run_manage("create_api_token", "alice", "scaleout", env=manage_env)
            assert issued.returncode == 0, issued.stderr
            return issued.stdout.strip()

        # Both servers and the credentials at once: each is a subprocess to wait for.
        with ThreadPoolExecutor(3) as pool:
            starting = [pool.submit(stack.enter_context,
                                    live_daphne(env, data_dir=data / name, migrate=False,
                                                workers=0))
                        for name in ("a", "b")]
            token = pool.submit(credentials).result()
            a, b = (future.result() for future in starting)
        assert token.startswith("pf_")
        # Two workers beside the two Daphnes, on the same database and Redis: they publish
        # their runs' events to Redis themselves, so browsers of A and B both hear them.
        # A coordinator's children go through Daphne A (PICOFLOW_SELF_URL), wherever it runs.
        for worker in WORKERS:
            a.start_worker(worker, {**env, "PICOFLOW_SELF_URL": a.base_url,
                                    "PICOFLOW_SELF_TOKEN": token})
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


def stored_events(server: LiveDaphne, token: str, run_id: str) -> list[dict[str, Any]]:
    """All of a run's stored events, page by page (``GET /api/runs/<id>/events``)."""
    events: list[dict[str, Any]] = []
    api = HttpSession(server.base_url)
    while True:
        page = api.get(f"/api/runs/{run_id}/events?after={events[-1]['seq'] if events else -1}",
                       headers=bearer(token))
        assert page.status == 200, page.body
        batch = page.json()["events"]
        if not batch:
            return events
        events.extend(batch)


def run_summary(server: LiveDaphne, token: str, run_id: str) -> dict[str, Any]:
    answer = HttpSession(server.base_url).get(f"/api/runs/{run_id}", headers=bearer(token))
    assert answer.status == 200, answer.body
    return answer.json()["run"]


def start_run(server: LiveDaphne, token: str, flow: str, message: str = "go",
              config: dict[str, Any] | None = None) -> str:
    """``POST /api/runs`` on ``server``: the new run's id (it is queued for a worker)."""
    body: dict[str, Any] = {"flow": flow, "message": message}
    if config is not None:
        body["config"] = config
    answer = HttpSession(server.base_url).post("/api/runs", json_body=body,
                                               headers=bearer(token))
    assert answer.status == 201, answer.body
    run = answer.json()["run"]
    assert run["status"] == "queued" and run["origin"]["kind"] == "worker"
    return str(run["id"])


ENDED = frozenset({"finished", "failed", "cancelled", "interrupted"})


def wait_ended(server: LiveDaphne, token: str, run_ids: list[str],
               timeout: float = 120.0) -> dict[str, dict[str, Any]]:
    """Poll until every run ended (a timeout, not a bound); their summaries."""
    ended: dict[str, dict[str, Any]] = {}

    def all_ended() -> bool:
        for run_id in run_ids:
            if run_id not in ended:
                run = run_summary(server, token, run_id)
                if run["status"] in ENDED:
                    ended[run_id] = run
        return len(ended) == len(run_ids)

    try:
        wait_for(all_ended, f"{len(run_ids)} runs to end", timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{len(run_ids) - len(ended)} of {len(run_ids)} runs did not "
                             f"end:\n{server.worker_logs()}") from exc
    return ended


def task_results(pair: Pair) -> list[dict[str, Any]]:
    """Every django-tasks-db task result (``DBTaskResult``, app label
    ``django_tasks_database``) in the shared database, read with psycopg."""
    import psycopg

    with psycopg.connect(pair.manage_env["DATABASE_URL"]) as connection:
        rows = connection.execute(
            "SELECT args_kwargs, status, worker_ids, task_path "
            "FROM django_tasks_database_dbtaskresult").fetchall()
    return [{"run_id": (args_kwargs.get("args") or [None])[0], "status": status,
             "worker_ids": worker_ids, "task_path": task_path}
            for args_kwargs, status, worker_ids, task_path in rows]


def test_run_started_on_a_executes_on_a_worker_and_is_streamed_live_by_b(pair: Pair) -> None:
    browser = HttpSession(pair.b.base_url)
    browser.login("alice")  # /login/ on B, with its CSRF round-trip
    cookie = browser.cookie_header()

    with ws_connect(pair.b, "/ws/runs/", cookie) as runs_list:
        # POST /api/runs on A answers at once: the run is queued for a worker.
        run_id = start_run(pair.a, pair.token, "TimingFlow")

        announced = recv_json(runs_list)
        while announced["run"]["id"] != run_id or announced["run"]["status"] == "queued":
            assert announced["type"] == "run"
            announced = recv_json(runs_list)
        # A worker took it (B heard so through Redis): running, on wa or wb.
        assert announced["run"]["status"] == "running" and announced["run"]["flow"] == "TimingFlow"
        worker = announced["run"]["worker"]
        assert worker in WORKERS
        assert announced["run"]["origin"]["kind"] == "worker"
        assert announced["run"]["origin"]["worker"] == worker

        messages = []
        with ws_connect(pair.b, f"/ws/runs/{run_id}/", cookie) as run_socket:
            hello = recv_json(run_socket)
            assert hello["type"] == "run" and hello["run"]["id"] == run_id
            # B joined while the worker was still playing the turn: the rest came live.
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
        assert finished["run"]["worker"] == worker

    events = [e for m in messages for e in m["events"]]
    assert_gap_free(seqs_of(events), finished["run"]["event_count"])
    assert events[-1]["type"] == "turn.finished"
    for event in events:
        parse_event(event)
    # Live: several batches, the first of them sent before the turn ended.
    assert len(messages) >= 3, "expected several live batches, not one replay"
    assert not any(e["type"] in TERMINAL_EVENTS for e in messages[0]["events"])
    # What B streamed is what the worker stored in the shared database.
    assert stored_events(pair.b, pair.token, run_id) == events
    assert [e["type"] for e in events].count("turn.started") == 1
    # The worker announces the run's end before django-tasks records its task's result.
    def task_of_run() -> list[dict[str, Any]]:
        return [t for t in task_results(pair) if t["run_id"] == run_id]

    wait_for(lambda: [t["status"] for t in task_of_run()] == ["SUCCESSFUL"],
             "the run's task to be recorded as successful")
    (task,) = task_of_run()
    assert task["worker_ids"] == [worker]


RUNS = 20


def test_twenty_runs_spread_over_both_workers_each_executed_once(pair: Pair) -> None:
    before = {t["run_id"] for t in task_results(pair)}
    servers = (pair.a, pair.b)
    # Short runs (20 branches, about 0.2 s each), started through A and B alternately.
    config = {"branches": 20, "rate": 100}
    with ThreadPoolExecutor(4) as pool:
        run_ids = list(pool.map(
            lambda i: start_run(servers[i % 2], pair.token, "FanOutFlow", config=config),
            range(RUNS)))
    assert len(set(run_ids)) == RUNS and not before & set(run_ids)

    ended = wait_ended(pair.b, pair.token, run_ids)
    for run_id, run in ended.items():
        assert run["status"] == "finished", run
        assert run["reply"]["success"] is True, run
        assert run["worker"] in WORKERS, run
        assert run["origin"] == {"kind": "worker", "worker": run["worker"],
                                 "label": f"worker {run['worker']}"}
        events = stored_events(pair.a, pair.token, run_id)
        assert_gap_free(seqs_of(events), run["event_count"])
        types = [e["type"] for e in events]
        turns = types.count("turn.started")
        assert turns == 1, f"run {run_id} was played {turns} times"
        assert types[-1] == "turn.finished"
    by_worker = {w: sum(r["worker"] == w for r in ended.values()) for w in WORKERS}
    assert all(by_worker.values()), f"both workers must execute runs: {by_worker}"

    # The task queue: one task per run, each successful, taken by one worker only, the
    # worker the run records.
    # (A run's end is announced before django-tasks records its task's result.)
    def new_tasks() -> list[dict[str, Any]]:
        return [t for t in task_results(pair) if t["run_id"] not in before]

    wait_for(lambda: all(t["status"] not in ("READY", "RUNNING") for t in new_tasks()),
             "every run's task to be recorded as ended")
    tasks = new_tasks()
    assert sorted(t["run_id"] for t in tasks) == sorted(run_ids)
    for task in tasks:
        assert task["task_path"] == "picoflow_web.execute.tasks.execute_run"
        assert task["status"] == "SUCCESSFUL", task
        assert task["worker_ids"] == [ended[task["run_id"]]["worker"]], task


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


def test_a_coordinator_started_on_b_sends_its_children_through_a(pair: Pair) -> None:
    """concurrent_steps() with SELF_URL at Daphne A, the coordinator asked for on B: the
    children run on the workers once each, and both Daphnes show them linked to it."""
    config = {"_concurrent": True, "districts": 6, "batch_size": 3, "fail": -1, "sleep": -1,
              "refused": -1, "timeout": 60}
    reply = HttpSession(pair.b.base_url).post(
        "/ai/run", json_body={"flowName": "Census", "message": "count", "config": config},
        headers=bearer(pair.token), timeout=180)
    assert reply.status == 200, reply.body
    body = reply.json()
    assert body["message"] == " ".join(f"{i}:fulfilled" for i in range(6))
    coordinator = body["run"]
    events = stored_events(pair.a, pair.token, coordinator)
    finished = [e for e in events if e["type"] == "concurrent.child_finished"]
    assert sorted(e["item"] for e in finished) == list(range(6))
    for event in finished:
        child = run_summary(pair.b, pair.token, event["child_run_id"])
        assert child["status"] == "finished"
        assert child["origin"]["coordinator"]["run_id"] == coordinator
        assert child["origin"]["worker"] in WORKERS
        started = [e for e in stored_events(pair.a, pair.token, child["id"])
                   if e["type"] == "turn.started"]
        assert len(started) == 1


def test_b_refuses_sockets_with_a_foreign_or_missing_origin(pair: Pair) -> None:
    from websockets.exceptions import ConnectionClosed

    browser = HttpSession(pair.b.base_url)
    browser.login("alice")
    for origin in ("http://evil.example", None):
        # Closed with 4403, as every refusal is closed with its code (picoflow_web.live.consumers).
        with ws_connect(pair.b, "/ws/runs/", browser.cookie_header(), origin=origin) as ws, \
                pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403, origin
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


def test_b_replays_a_wide_finished_run(pair: Pair) -> None:
    """A 1,200-branch run (over 1 MiB of events), executed by a worker, replayed through a
    default Daphne, whose websocket messages are capped at 1 MiB: the consumer must split
    what it sends."""
    from websockets.exceptions import ConnectionClosed

    run_id = start_run(pair.a, pair.token, "FanOutFlow", config={"branches": 1200})
    run = wait_ended(pair.a, pair.token, [run_id])[run_id]
    assert run["status"] == "finished", run
    count = run["event_count"]
    size = sum(len(json.dumps(e)) for e in stored_events(pair.a, pair.token, run_id))
    assert size > 1024 * 1024, "the run's events must not fit in one message"
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
