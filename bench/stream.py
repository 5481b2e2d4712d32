"""Streaming benchmark: events stored and delivered per second to one websocket client.

Measured in the same run, against the same Daphne process and the same events:

* **raw**: :class:`RawPushConsumer` (defined here, mounted at ``/ws/bench/raw/``) holds
  the N events of a finished turn in memory and pushes them with ``send_json``, in
  frames cut as the bridge cuts them (``RunRecorder.batch_events`` events, about
  ``MESSAGE_BYTES``). No store, no
  channel layer: the floor of Daphne + one websocket.
* **ours**: a real turn of :class:`~bench.stream_flow.StreamBenchFlow` (a LogicStep
  fanning out no-op branches; the events a branch adds are counted first) started with
  ``POST /ai/run`` and executed by a ``manage.py db_worker``, as every run is. The worker
  stores each batch (one bulk insert of the serialised lines) and relays it over its
  websocket to Daphne, which broadcasts it (one ``group_send``); ``RunConsumer`` delivers
  it to a client on ``/ws/runs/<id>/``. The flow waits at a gate (a file) until the client
  is connected; the clock runs from opening the gate to receiving ``turn.finished``.

Also printed for context: the same turn with no store and no socket (runtime alone).

Daphne serves ``bench.stream:application`` (the real application plus the raw route) with
its default settings; Daphne and the worker run with ``PICOFLOW_DEBUG=0``. The client is
this process (``websockets``, no receive limits).

    .venv/bin/python bench/stream.py [--events 10000] [--reps 3]
        [--database-url postgres://...] [--redis-url unix:///...redis.sock]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from tests.livedaphne import stop_process  # noqa: E402

ORIGIN_HOST = "127.0.0.1"

FLOWS = "bench.stream_flow:StreamBenchFlow"
"""What the benchmark's Daphne and worker serve (``PICOFLOW_FLOWS``)."""


# -- served by Daphne (bench.stream:application) -------------------------------------------


def _flow_class() -> type[Any]:
    from bench.stream_flow import StreamBenchFlow

    return StreamBenchFlow


def _build_application() -> Any:
    from picoflow_web.asgi import django_asgi_app  # sets Django up first

    # isort: split
    from channels.generic.websocket import AsyncJsonWebsocketConsumer
    from django.urls import path

    from picoflow_web.asgi_stack import with_picoflow
    from picoflow_web.data import selectors
    from picoflow_web.live.groups import MESSAGE_BYTES
    from picoflow_web.record.recorder import RunRecorder

    batch_size = RunRecorder("size").batch_events

    class RawPushConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
        """``load`` a stored run's events into memory, then ``go``: push them, timed."""

        async def connect(self) -> None:
            self.frames: list[dict[str, Any]] = []
            await self.accept()

        async def receive_json(self, content: Any, **kwargs: Any) -> None:
            if content.get("cmd") == "load":
                events: list[dict[str, Any]] = []
                while page := await selectors.run_events_after(
                        content["run"], events[-1]["seq"] if events else -1):
                    events.extend(page)
                size = int(content.get("batch") or batch_size)
                # Frames as the bridge cuts them: ``size`` events, about MESSAGE_BYTES.
                self.frames = []
                for i in range(0, len(events), size):
                    frame: list[dict[str, Any]] = []
                    used = 0
                    for event in events[i:i + size]:
                        chars = len(json.dumps(event, separators=(",", ":")))
                        if frame and used + chars > MESSAGE_BYTES:
                            self.frames.append({"type": "events", "events": frame})
                            frame, used = [], 0
                        frame.append(event)
                        used += chars
                    self.frames.append({"type": "events", "events": frame})
                await self.send_json({"type": "loaded", "events": len(events),
                                      "frames": len(self.frames), "batch": size})
            elif content.get("cmd") == "go":
                for frame in self.frames:
                    await self.send_json(frame)
                await self.send_json({"type": "done"})

    # The real stack (browsers' routes, the workers' relay socket, the watchdog) plus ours.
    return with_picoflow(django_asgi_app, [path("ws/bench/raw/", RawPushConsumer.as_asgi())])


_APPLICATION: Any = None


def __getattr__(name: str) -> Any:
    """``bench.stream:application`` for Daphne, built on first access."""
    global _APPLICATION
    if name == "application":
        if _APPLICATION is None:
            _APPLICATION = _build_application()
        return _APPLICATION
    raise AttributeError(name)


# -- the bench client ------------------------------------------------------------------------


def _env(data_dir: Path, args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "picoflow_web.config.settings",
        "PICOFLOW_DATA_DIR": str(data_dir),
        "DATABASE_URL": args.database_url or f"sqlite:///{data_dir / 'bench.sqlite3'}",
        "PICOFLOW_DEBUG": "0",
        "PICOFLOW_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "PICOFLOW_SECURE_SSL_REDIRECT": "0",
        "PICOFLOW_LOG_LEVEL": "WARNING",
        "PICOFLOW_FLOWS": FLOWS,
        "PICOFLOW_DEMOS": "0",
        "PYTHONUNBUFFERED": "1",
    })
    if args.redis_url:
        env["REDIS_URL"] = args.redis_url
    else:
        env.pop("REDIS_URL", None)
    return env


def _manage(env: dict[str, str], *argv: str) -> str:
    result = subprocess.run([sys.executable, str(REPO_ROOT / "manage.py"), *argv], cwd=REPO_ROOT,
                            env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


CREDENTIALS = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from picoflow_web.models import ApiToken
user, _ = get_user_model().objects.get_or_create(  # may use every project
    username="bench", defaults={"is_superuser": True, "is_staff": True})
client = Client()
client.force_login(user)
print(json.dumps({"cookie": "sessionid=" + client.cookies["sessionid"].value,
                  "token": ApiToken.issue(user, "bench")[1]}))
"""


class Server:
    """Daphne on ``bench.stream:application``, listening on a socket bound here (--fd), and
    one ``manage.py db_worker`` that executes the runs and relays their events to it."""

    def __init__(self, env: dict[str, str], log: Path, extra: tuple[str, ...] = ()) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind((ORIGIN_HOST, 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.base = f"http://{ORIGIN_HOST}:{self.port}"
        self.ws = f"ws://{ORIGIN_HOST}:{self.port}"
        self.log = log
        self.env = env
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "--fd", str(self.listener.fileno()), *extra,
                 "bench.stream:application"],
                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, pass_fds=(self.listener.fileno(),))
        self.listener.close()
        try:
            self._wait_healthy(env)
        except BaseException:
            stop_process(self.process)  # a Daphne that never answered is not left behind
            raise
        worker_log = log.with_name("worker.log")
        with worker_log.open("wb") as out:
            self.worker = subprocess.Popen(
                [sys.executable, str(REPO_ROOT / "manage.py"), "db_worker",
                 "--no-startup-delay", "--worker-id", "bench", "--interval", "0.05"],
                cwd=REPO_ROOT, env={**env, "PICOFLOW_RELAY_URL": self.base},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def _wait_healthy(self, env: dict[str, str]) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    f"Daphne did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.1)

    def stop(self) -> None:
        stop_process(self.worker)
        stop_process(self.process)


def _post(url: str, body: dict[str, Any], token: str) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


async def _connect(server: Server, path: str, cookie: str) -> Any:
    from websockets.asyncio.client import connect

    return await connect(server.ws + path, origin=server.base,  # type: ignore[arg-type]
                         additional_headers={"Cookie": cookie}, max_size=None,
                         max_queue=None, open_timeout=30)


async def run_ours(server: Server, cookie: str, token: str, branches: int,
                   rep: int) -> dict[str, Any]:
    """One bridged turn; returns its rate and the run id."""
    gate = server.log.with_name(f"gate-{rep}-{time.monotonic_ns()}")
    runs = await _connect(server, "/ws/runs/", cookie)
    turn = asyncio.create_task(asyncio.to_thread(
        _post, server.base + "/ai/run",
        {"flowName": "StreamBenchFlow", "message": "go",
         "config": {"gate": str(gate), "branches": branches}}, token))
    while True:
        summary = json.loads(await asyncio.wait_for(runs.recv(), 30))["run"]
        if summary["flow"] == "StreamBenchFlow" and summary["status"] == "running":
            run_id = summary["id"]
            break
    await runs.close()

    feed = await _connect(server, f"/ws/runs/{run_id}/", cookie)
    seen: list[int] = []
    while True:  # what the turn emitted before the gate: replayed, not timed
        try:
            message = json.loads(await asyncio.wait_for(feed.recv(), 0.3))
        except TimeoutError:
            break
        if message["type"] == "events":
            seen.extend(e["seq"] for e in message["events"])
    before = len(seen)
    frames: list[int] = []
    largest = 0
    cpu = cpu_window(server)
    start = time.perf_counter()
    gate.touch()
    while True:
        text = await asyncio.wait_for(feed.recv(), 120)
        message = json.loads(text)
        if message["type"] != "events":
            continue
        frames.append(len(message["events"]))
        largest = max(largest, len(text.encode()))
        seen.extend(e["seq"] for e in message["events"])
        if message["events"][-1]["type"] in ("turn.finished", "turn.failed"):
            break
    elapsed = time.perf_counter() - start
    used = cpu_used(cpu, server)
    await feed.close()
    reply = await turn
    if not reply.get("success"):
        raise SystemExit(f"bench turn failed: {reply}")
    if seen != list(range(len(seen))):
        raise SystemExit(f"bridged stream had a gap or duplicate ({len(seen)} events)")
    timed = len(seen) - before
    return {"rate": timed / elapsed, "events": timed, "total": len(seen), "seconds": elapsed,
            "frames": frames, "largest": largest, "run": run_id, "cpu": used}


async def receive_turn(feed: Any, seen: list[int]) -> None:
    """Add the seqs of the events ``feed`` delivers to ``seen`` until the turn's last."""
    while True:
        message = json.loads(await asyncio.wait_for(feed.recv(), 120))
        if message["type"] != "events":
            continue
        seen.extend(e["seq"] for e in message["events"])
        if message["events"][-1]["type"] in ("turn.finished", "turn.failed"):
            return


async def run_alone(server: Server, cookie: str, branches: int, rep: int) -> dict[str, Any]:
    """The bridge apart from the runtime: ``bench/stream_feed.py`` (a process configured as a
    worker) feeds a recorded turn's events to a RunRecorder; its rate to this client."""
    run_id = uuid.uuid4().hex
    gate = server.log.with_name(f"feed-gate-{rep}-{time.monotonic_ns()}")
    feeder = await asyncio.create_subprocess_exec(
        sys.executable, str(REPO_ROOT / "bench" / "stream_feed.py"), run_id, str(branches),
        str(gate), cwd=REPO_ROOT, env={**server.env, "PICOFLOW_RELAY_URL": server.base},
        stdout=asyncio.subprocess.PIPE)
    assert feeder.stdout is not None
    ready = await asyncio.wait_for(feeder.stdout.readline(), 120)
    if ready.strip() != b"ready":
        raise SystemExit(f"the feeder did not start: {ready!r}")
    feed = await _connect(server, f"/ws/runs/{run_id}/", cookie)
    seen: list[int] = []
    start = time.perf_counter()
    gate.touch()
    await receive_turn(feed, seen)
    elapsed = time.perf_counter() - start
    await feed.close()
    await asyncio.wait_for(feeder.wait(), 120)
    if seen != list(range(len(seen))):
        raise SystemExit(f"the fed stream had a gap or duplicate ({len(seen)} events)")
    return {"rate": len(seen) / elapsed, "events": len(seen), "seconds": elapsed}


async def run_raw(server: Server, cookie: str, run_id: str) -> dict[str, Any]:
    """The same run's events pushed by RawPushConsumer."""
    raw = await _connect(server, "/ws/bench/raw/", cookie)
    await raw.send(json.dumps({"cmd": "load", "run": run_id}))
    loaded = json.loads(await asyncio.wait_for(raw.recv(), 60))
    received: list[int] = []
    cpu = cpu_window(server)
    start = time.perf_counter()
    await raw.send(json.dumps({"cmd": "go"}))
    while True:
        message = json.loads(await asyncio.wait_for(raw.recv(), 120))
        if message["type"] == "done":
            break
        received.extend(e["seq"] for e in message["events"])
        last = time.perf_counter()
    used = cpu_used(cpu, server)
    await raw.close()
    if received != list(range(loaded["events"])):
        raise SystemExit("raw push lost or reordered events")
    return {"rate": len(received) / (last - start), "events": len(received),
            "frames": loaded["frames"], "batch": loaded["batch"], "cpu": used}


async def runtime_alone(branches: int) -> float:
    """Events per second of the same turn with no store and no socket (in this process)."""
    from runtime import FlowEngine
    from runtime.events import MemorySink

    sink = MemorySink()
    engine = FlowEngine(flows=[_flow_class()], sinks=[sink])
    start = time.perf_counter()
    reply = await engine.run("StreamBenchFlow", "go", config={"branches": branches})
    elapsed = time.perf_counter() - start
    assert reply.success, reply.message
    return len(sink.events) / elapsed


_TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (``/proc/stat``): what all
    the processes of a measurement used together, whichever they are (PostgreSQL and Redis
    included)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _TICK


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system, every thread) process ``pid`` used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_window(server: Server) -> dict[str, float]:
    """The CPU counters a timed window is measured between."""
    return {"machine": busy_seconds(), "daphne": cpu_of(server.process.pid),
            "worker": cpu_of(server.worker.pid), "client": time.process_time()}


def cpu_used(before: dict[str, float], server: Server) -> dict[str, float]:
    after = cpu_window(server)
    return {name: after[name] - before[name] for name in before}


def _spread(values: list[float]) -> str:
    return (f"{statistics.median(values):>10,.0f}/s  [{min(values):,.0f}-{max(values):,.0f}]")


async def events_per_branch() -> tuple[int, int]:
    """How many events a no-op branch adds, and how many the turn has around them."""
    from runtime import FlowEngine
    from runtime.events import MemorySink

    counts = []
    for branches in (10, 20):
        sink = MemorySink()
        engine = FlowEngine(flows=[_flow_class()], sinks=[sink])
        await engine.run("StreamBenchFlow", "go", config={"branches": branches})
        counts.append(len(sink.events))
    per = (counts[1] - counts[0]) // 10
    return per, counts[0] - 10 * per


async def bench(args: argparse.Namespace, server: Server, cookie: str, token: str) -> None:
    per, fixed = await events_per_branch()
    branches = max(1, (args.events - fixed) // per)
    ours, raw, alone, fed = [], [], [], []
    for rep in range(args.reps + 1):  # the first round warms up and is not counted
        o = await run_ours(server, cookie, token, branches, rep)
        r = await run_raw(server, cookie, o["run"])
        f = await run_alone(server, cookie, branches, rep)
        a = await runtime_alone(branches)
        if rep:
            ours.append(o)
            raw.append(r)
            fed.append(f)
            alone.append(a)
            print(f"  rep {rep}: raw {r['rate']:,.0f}/s, bridge alone {f['rate']:,.0f}/s, "
                  f"worker run {o['rate']:,.0f}/s "
                  f"({o['events']} events in {o['seconds']:.2f}s, {len(o['frames'])} frames), "
                  f"runtime alone {a:,.0f}/s", flush=True)
    raw_rates = [r["rate"] for r in raw]
    our_rates = [o["rate"] for o in ours]
    fed_rates = [f["rate"] for f in fed]
    ratios = [o / r for o, r in zip(our_rates, raw_rates, strict=True)]
    fed_ratios = [f / r for f, r in zip(fed_rates, raw_rates, strict=True)]
    frames = [f for o in ours for f in o["frames"]]
    layer = "RedisPubSubChannelLayer" if args.redis_url else "InMemoryChannelLayer"
    database = "PostgreSQL" if args.database_url else "SQLite"
    print()
    print(f"stream benchmark: {ours[0]['total']} events per turn ({branches} no-op branches), "
          f"one client, {args.reps} reps (median [min-max]); {database}, {layer}")
    print(f"  raw Daphne push (send_json, {raw[0]['batch']}/frame)    {_spread(raw_rates)}")
    print(f"  bridge alone: fed recorded events          {_spread(fed_rates)}")
    print(f"  worker run: runtime + bridge               {_spread(our_rates)}")
    print(f"  runtime alone (no store, no socket)        {_spread(alone)}")
    print(f"ratio bridge alone / raw push: {statistics.median(fed_ratios):.3f} "
          f"[{min(fed_ratios):.3f}-{max(fed_ratios):.3f}]  (stored + delivered, apart from "
          "the runtime)")
    print(f"ratio worker run / raw push:   {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}-{max(ratios):.3f}]  (a real run, the runtime included)")
    largest = max(o["largest"] for o in ours)
    cores = os.cpu_count() or 1

    def per_event(runs: list[dict[str, Any]], name: str) -> float:
        return statistics.median(r["cpu"][name] / r["events"] * 1e6 for r in runs)

    ours_cpu, raw_cpu = per_event(ours, "machine"), per_event(raw, "machine")
    print(f"CPU per event, every process of the machine: worker run {ours_cpu:.1f} µs "
          f"(worker {per_event(ours, 'worker'):.1f}, Daphne {per_event(ours, 'daphne'):.1f}, "
          f"client {per_event(ours, 'client'):.1f}), raw push {raw_cpu:.1f} µs "
          f"(Daphne {per_event(raw, 'daphne'):.1f}, client {per_event(raw, 'client'):.1f})")
    bound = cores / (ours_cpu * 1e-6)
    print(f"  on {cores} cores the worker run's work allows at most {bound:,.0f}/s = "
          f"{bound / statistics.median(raw_rates):.2f}x the raw push, were its processes never "
          "to wait on each other")
    print(f"bridge frames: {len(frames) // len(ours)} per turn, mean "
          f"{statistics.mean(frames):.0f} and max {max(frames)} events per frame; "
          f"largest {largest / 1e6:.2f} MB")


@contextmanager
def served(args: argparse.Namespace, credentials_script: str, prefix: str,
           overrides: dict[str, str] | None = None) -> Iterator[tuple[Server, dict[str, Any]]]:
    """A migrated data folder, the credentials ``credentials_script`` prints, and Daphne
    on it; the server's log tail is printed if the benchmark fails."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    server = None
    try:
        env = {**_env(data_dir, args), **(overrides or {})}
        _manage(env, "migrate", "--noinput")
        credentials = json.loads(
            _manage(env, "shell", "-c", credentials_script).strip().splitlines()[-1])
        server = Server(env, data_dir / "daphne.log")
        yield server, credentials
    except BaseException:
        if server is not None:
            tail = server.log.read_text(errors="replace").splitlines()[-80:]
            print("--- Daphne log (last lines) ---", *tail, sep="\n", file=sys.stderr)
        raise
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000,
                        help="events per turn (the branch count is derived from it)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--database-url", default="",
                        help="DATABASE_URL of the server (default: a fresh SQLite file)")
    parser.add_argument("--redis-url", default="",
                        help="REDIS_URL: use the Redis channel layer (default: in-memory)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))

    with served(args, CREDENTIALS, "pf-bench-stream-") as (server, credentials):
        asyncio.run(bench(args, server, credentials["cookie"], credentials["token"]))

if __name__ == "__main__":
    main()
