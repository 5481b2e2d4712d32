"""What-if endpoint benchmark: ``GET /api/runs/<id>/whatif`` of a stored 10,000-branch run,
against reading the same run's stored events as the run page does.

The run is recorded once through the runtime (``bench/whatif.py``'s ``fanout`` or ``nested``
shape), stored with ``picoflow_web.data.eventlog`` in a migrated database in a temporary
data folder (unless ``PICOFLOW_DATA_DIR`` names one: never a user's data by default), and
read by a viewer of its project with a read-only bearer token, through Django's
``AsyncClient`` over HTTPS (the whole middleware stack; no socket). Interleaved round by
round with ``gc.collect()`` before each variant (``ratios.py``):

  * ``whatif``: ``GET /api/runs/<id>/whatif``, the events read, the three schedules
    computed, checked and serialised;
  * ``compare``: ``GET /api/runs/<id>/compare/<id>``, the run against itself (both runs'
    events read, folded and matched, each one's recorded schedule);
  * ``events`` (the baseline): ``GET /api/runs/<id>/events?after=-1&compact=1`` with
    ``Accept: application/x-ndjson``, every stored event streamed as JSONL and the body
    read to its end: what the run page loads.

Prints each variant's median seconds and its ratio to the events stream (median of the
per-round ratios, with their quartiles).

    PICOFLOW_DEBUG=0 .venv/bin/python bench/whatif_endpoint.py [--n 10000]
                                                               [--shape fanout|nested|both]
                                                               [--reps 7]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

if not os.environ.get("PICOFLOW_DATA_DIR"):
    _DATA = tempfile.mkdtemp(prefix="picoflow-bench-")
    atexit.register(shutil.rmtree, _DATA, ignore_errors=True)
    # No collected static files (nothing here asks for one): an empty folder, so the
    # static file server finds one.
    os.mkdir(os.path.join(_DATA, "staticfiles"))
    os.environ["PICOFLOW_DATA_DIR"] = _DATA
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picoflow_web.config.settings")
# Django's test client always names the host "testserver"; a site answering a name that is
# not loopback has its HTTPS hardening on, so the requests say they came over HTTPS.
os.environ.setdefault("PICOFLOW_ALLOWED_HOSTS", "testserver")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import AsyncClient  # noqa: E402
from ratios import interleaved, ratio, spread  # noqa: E402
from whatif import record  # noqa: E402

from picoflow_web.data import eventlog  # noqa: E402
from picoflow_web.models import ApiToken, Membership, Project, Run  # noqa: E402
from runtime.events import Event  # noqa: E402


def store(events: list[Event], flow: str) -> tuple[str, str]:
    """Store ``events`` as a run of ``flow`` (replacing an earlier copy); its id and a read
    token of a viewer of its project."""
    run_id = events[0].run_id
    project, _ = Project.objects.get_or_create(name="default")
    Run.objects.filter(id=run_id).delete()
    Run.objects.create(id=run_id, flow=flow, project=project)
    eventlog.insert_events(run_id, events, [e.model_dump_json() for e in events])
    user, _ = get_user_model().objects.get_or_create(username="bench")
    Membership.objects.get_or_create(project=project, user=user, defaults={"role": "viewer"})
    _, token = ApiToken.issue(user, f"bench-{run_id}", ("read",), project=project)
    return run_id, token


def getter(token: str, path: str, accept: str = "application/json",
           ) -> Callable[[], Awaitable[float]]:
    """An async function that asks for ``path`` and reads the whole body; its seconds."""
    headers = {"Authorization": f"Bearer {token}", "Accept": accept}

    async def get() -> float:
        client = AsyncClient()
        start = time.perf_counter()
        response: Any = await client.get(path, headers=headers, secure=True)
        if response.streaming:
            size = sum([len(chunk) async for chunk in response.streaming_content])
        else:
            size = len(response.content)
        elapsed = time.perf_counter() - start
        assert response.status_code == 200 and size, (path, response.status_code)
        return elapsed

    return get


async def streamed_lines(token: str, path: str) -> int:
    """The lines of ``path``'s JSONL answer."""
    response: Any = await AsyncClient().get(path, secure=True, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/x-ndjson"})
    body = b"".join([chunk async for chunk in response.streaming_content])
    return body.count(b"\n")


def bench(shape: str, args: argparse.Namespace) -> None:
    events = anyio.run(record, shape, args.n, args.concurrency, args.outer)
    branches = sum(1 for e in events if e.type == "branch.started")
    run_id, token = store(events, "FanOutFlow" if shape == "fanout" else "NestedFlow")
    events_path = f"/api/runs/{run_id}/events?after=-1&compact=1"
    # The baseline reads the run whole.
    assert anyio.run(streamed_lines, token, events_path) == len(events)
    variants = {
        "whatif": getter(token, f"/api/runs/{run_id}/whatif"),
        "compare": getter(token, f"/api/runs/{run_id}/compare/{run_id}"),
        "events": getter(token, events_path, "application/x-ndjson"),
    }
    samples = interleaved(args.reps, variants)
    median = {name: statistics.median(xs) for name, xs in samples.items()}
    print(f"{shape}: {branches} branches, {len(events)} events stored")
    print(f"  median of {args.reps} interleaved rounds                 seconds   / events")
    for name, label in (("whatif", "GET /api/runs/<id>/whatif"),
                        ("compare", "GET /api/runs/<id>/compare/<id>")):
        print(f"  {label:<40} {median[name]:8.3f}   {ratio(samples, name, 'events'):5.2f}x "
              f"{spread(samples, name, 'events')}")
    print(f"  {'GET .../events, JSONL (baseline)':<40} {median['events']:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="branches (leaves when nested)")
    parser.add_argument("--shape", choices=("fanout", "nested", "both"), default="both")
    parser.add_argument("--concurrency", type=int, default=100,
                        help="fanout: branches at once")
    parser.add_argument("--outer", type=int, default=100, help="nested: coordinators")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    print(f"data folder: {os.environ['PICOFLOW_DATA_DIR']}")
    for shape in ("fanout", "nested") if args.shape == "both" else (args.shape,):
        bench(shape, args)


if __name__ == "__main__":
    main()
