"""The bridge alone: a recorded turn's events fed to a ``RunRecorder`` as fast as it takes them.

``bench/stream.py`` starts this in a process of its own, configured as a worker is (same
database, ``PICOFLOW_RELAY_URL`` pointing at the benchmark's Daphne), so what it times is
the bridge a worker runs — serialising, storing, relaying — without the runtime that
feeds it in a real run (which ``bench/stream.py``'s "ours" includes).

    python bench/stream_feed.py RUN_ID BRANCHES GATE_FILE

With ``PICOFLOW_BENCH_PROFILE=FILE`` the feeding runs under cProfile, its stats written to
``FILE`` (``bench/stream.py`` passes the variable on).

1. Plays one StreamBenchFlow turn of ``BRANCHES`` branches under ``RUN_ID`` into a memory
   sink (not timed), and creates the run's row as a worker's claimed run (``running``).
2. Opens the database connection and the relay socket as a worker's run begins, prints
   ``ready``; waits until ``GATE_FILE`` exists (the client is connected by then).
3. Hands the events to the recorder, yielding to the loop after every batch's worth (as a
   run yields at its awaits) and waiting while the recorder says it is congested; then
   closes the recorder and drains the relay. Prints ``done``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


async def _record(run_id: str, branches: int) -> list[object]:
    from bench.stream_flow import StreamBenchFlow
    from runtime import FlowEngine
    from runtime.events import MemorySink

    sink = MemorySink()
    engine = FlowEngine(flows=[StreamBenchFlow], sinks=[sink])
    reply = await engine.run("StreamBenchFlow", "go", config={"branches": branches},
                             run_id=run_id)
    assert reply.success, reply.message
    return list(sink.events)


async def _feed(run_id: str, events: list[object], gate: Path) -> None:
    from asgiref.sync import sync_to_async

    from picoflow_web.live import groups, relay
    from picoflow_web.models import Run
    from picoflow_web.record.recorder import RunRecorder

    # As a worker's run begins: its database connection is open (the worker claimed the
    # run through it) and the run's summary went to the runs list (which opens the relay
    # socket). Neither is the bridge's per-event cost, so neither is timed.
    run = await Run.objects.aget(id=run_id)  # in the thread the recorder stores from
    await groups.runs_send(run.summary())
    recorder = RunRecorder(run_id)
    print("ready", flush=True)
    while not gate.exists():
        await asyncio.sleep(0.002)
    recorder.start()
    step = recorder.batch_events
    for start in range(0, len(events), step):
        for event in events[start:start + step]:
            recorder.receive(event)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        while recorder.congested():
            await asyncio.sleep(0.001)
    await recorder.close()
    await sync_to_async(relay.drain, thread_sensitive=False)(60.0)


def main() -> None:
    run_id, branches, gate = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    import django

    django.setup()
    from picoflow_web.models import Run

    events = asyncio.run(_record(run_id, branches))
    Run.objects.create(id=run_id, flow="StreamBenchFlow", status=Run.Status.RUNNING,
                       origin={"kind": "worker"}, worker="bench-feed")
    profile = os.environ.get("PICOFLOW_BENCH_PROFILE")
    if profile:  # where the bridge's time goes: cProfile stats of the feeding, to a file
        import cProfile

        cProfile.runctx("asyncio.run(_feed(run_id, events, gate))", globals(), locals(),
                        profile)
    else:
        asyncio.run(_feed(run_id, events, gate))
    print("done", len(events), flush=True)


if __name__ == "__main__":
    main()
