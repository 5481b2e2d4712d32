"""Ingest benchmark: events shipped from another process, stored and delivered per second.

Measured in the same run, against the same Daphne process, on turns of the same size:

* **bridge** (the baseline): a turn the dashboard executes itself (``POST /ai/run`` of
  ``StreamBenchFlow``), its events stored by the bridge and delivered to one websocket
  client — ``bench/stream.py``'s "ours".
* **ingest**: the events of the same turn, recorded in this process beforehand (so the
  runtime's own cost is not counted), sent to ``POST /api/ingest`` as NDJSON in batches
  of ``--batch`` events, one request after another, as ``DashboardSink`` sends them; the
  clock runs from the first batch to the client receiving ``turn.finished``.

Prints events/s of both and the median of per-round ratios (ingest / bridge). Daphne runs
with ``PICOFLOW_DEBUG=0``. The turn time of a remote process with the sink on vs off is
``bench/ingest_sink.py``.

    .venv/bin/python bench/ingest.py [--events 10000] [--reps 3] [--batch 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.stream import (  # noqa: E402
    Server,
    _connect,
    _flow_class,
    events_per_branch,
    receive_turn,
    run_ours,
    served,
)

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
                  "token": ApiToken.issue(user, "bench")[1],
                  "ingest": ApiToken.issue(user, "bench-ingest", ("ingest",))[1]}))
"""


async def recorded_lines(branches: int) -> list[bytes]:
    """One StreamBenchFlow turn recorded here, as the lines a remote process would send."""
    from runtime import FlowEngine
    from runtime.events import MemorySink, dump_event

    sink = MemorySink()
    engine = FlowEngine(flows=[_flow_class()], sinks=[sink])
    reply = await engine.run("StreamBenchFlow", "go", config={"branches": branches},
                             run_id=uuid.uuid4().hex)
    assert reply.success, reply.message
    return [dump_event(event).encode() for event in sink.events]


def _ingest(base: str, token: str, lines: list[bytes]) -> dict[str, Any]:
    request = urllib.request.Request(
        base + "/api/ingest", data=b"\n".join(lines) + b"\n", method="POST",
        headers={"Content-Type": "application/x-ndjson", "Authorization": f"Bearer {token}",
                 "PicoFlow-Origin-Host": "bench", "PicoFlow-Origin-Pid": "0"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


async def run_ingest(server: Server, cookie: str, token: str, lines: list[bytes],
                     batch: int) -> dict[str, Any]:
    """Ship ``lines`` in batches and time them until the client has every event."""
    run_id = json.loads(lines[0])["run_id"]
    await asyncio.to_thread(_ingest, server.base, token, lines[:1])  # the run exists now
    feed = await _connect(server, f"/ws/runs/{run_id}/", cookie)
    seen: list[int] = []
    receiving = asyncio.create_task(receive_turn(feed, seen))
    start = time.perf_counter()
    for first in range(1, len(lines), batch):
        await asyncio.to_thread(_ingest, server.base, token, lines[first:first + batch])
    await receiving
    elapsed = time.perf_counter() - start
    await feed.close()
    if seen != list(range(len(lines))):
        raise SystemExit(f"ingested stream had a gap or duplicate ({len(seen)} events)")
    return {"rate": (len(lines) - 1) / elapsed, "events": len(lines) - 1, "seconds": elapsed}


async def bench(args: argparse.Namespace, server: Server, credentials: dict[str, str]) -> None:
    per, fixed = await events_per_branch()
    branches = max(1, (args.events - fixed) // per)
    bridge, shipped = [], []
    for rep in range(args.reps + 1):  # the first round warms up and is not counted
        lines = await recorded_lines(branches)
        b = await run_ours(server, credentials["cookie"], credentials["token"], branches, rep)
        i = await run_ingest(server, credentials["cookie"], credentials["ingest"], lines,
                             args.batch)
        if rep:
            bridge.append(b["rate"])
            shipped.append(i["rate"])
            print(f"  rep {rep}: bridge {b['rate']:,.0f}/s, ingest {i['rate']:,.0f}/s "
                  f"({i['events']} events in {i['seconds']:.2f}s)", flush=True)
    ratios = [i / b for i, b in zip(shipped, bridge, strict=True)]
    print()
    print(f"ingest benchmark: {branches} no-op branches per turn, batches of {args.batch}, "
          f"one client, {args.reps} reps (median [min-max]); SQLite, InMemoryChannelLayer")
    print(f"  bridge (server run): store + group_send + RunConsumer  "
          f"{statistics.median(bridge):>10,.0f}/s  [{min(bridge):,.0f}-{max(bridge):,.0f}]")
    print(f"  ingest (remote run): parse + check + store + broadcast  "
          f"{statistics.median(shipped):>10,.0f}/s  [{min(shipped):,.0f}-{max(shipped):,.0f}]")
    print(f"ratio ingest / bridge: {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}-{max(ratios):.3f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=500, help="events per ingest request")
    args = parser.parse_args()
    args.database_url = args.redis_url = ""

    overrides = {"PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "127.0.0.1,localhost",
                 "PICOFLOW_SECURE_SSL_REDIRECT": "0"}
    with served(args, CREDENTIALS, "pf-bench-ingest-", overrides) as (server, credentials):
        asyncio.run(bench(args, server, credentials))

if __name__ == "__main__":
    main()
