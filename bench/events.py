"""Event emission cost: per-branch cost of one run_steps() barrier with and without sinks.

Reuses the fan-out of ``bench/fanout.py`` (``FanFlow``: ``Fan`` forks N ``Adder`` branches,
each contributing one item to an append channel) and measures, in the same run and
interleaved rep by rep, the barrier's wall time with:

  * no sinks (the bus builds no events at all);
  * a ``MemorySink`` (events are built and kept in a list);
  * a ``JsonlSink`` writing to a temporary file (events are also serialised).

Against what users would otherwise write to see a fan-out: **one OpenTelemetry span per
task** (the real SDK: a ``TracerProvider`` with a ``BatchSpanProcessor`` into an in-memory
exporter; the span holds what our events say of a branch, a contribution as a span event),
measured in the same rounds as an ``asyncio.TaskGroup`` of N no-op tasks with and
without a span each. The target: our events cost at most 0.3x of a span per branch, as
``(MemorySink - no sink) / (span - no span)`` per branch, on no-op branches and on branches
contributing once.

Prints µs per branch (median of ``--reps`` runs after two warm-up rounds, ``gc.collect()``
before each run) and each ratio as the median of the per-round ratios. When the target is
missed (or with ``--profile``), profiles one MemorySink run with cProfile and prints the
top functions by own time, per branch.

    .venv/bin/python bench/events.py [--n 1000] [--reps 15] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from fanout import TIMINGS, FanFlow  # noqa: E402
from ratios import ratio, spread  # noqa: E402

from runtime import FlowEngine  # noqa: E402
from runtime.events import EventSink, JsonlSink, MemorySink  # noqa: E402

TARGET = 0.3
"""Allowed cost of our events per branch against one OpenTelemetry span per task."""

Variant = Callable[[int, Path], float]


KIND = {"kind": "noop"}
"""Which branches the variants run: ``noop`` (the barrier benchmark's) or ``add``."""


async def fanout_with(n: int, sinks: list[EventSink]) -> float:
    """Seconds spent in one barrier of ``n`` branches of ``KIND`` with ``sinks`` attached."""
    TIMINGS.clear()
    engine = FlowEngine(flows=[FanFlow], sinks=sinks)
    reply = await engine.run("FanFlow", "go", config={"n": n, "kind": KIND["kind"]})
    assert reply.success, reply.message
    return TIMINGS[0]


def no_sink(n: int, tmp: Path) -> float:
    return anyio.run(fanout_with, n, [])


def memory_sink(n: int, tmp: Path) -> float:
    sink = MemorySink()
    elapsed = anyio.run(fanout_with, n, [sink])
    assert sink.events, "the memory sink saw no events"
    return elapsed


def jsonl_sink(n: int, tmp: Path) -> float:
    path = tmp / "events.jsonl"
    path.unlink(missing_ok=True)
    sink = JsonlSink(path)
    try:
        return anyio.run(fanout_with, n, [sink])
    finally:
        sink.close()


_SPANS: dict[str, Any] = {}


def _tracer() -> Any:
    """A tracer of the real SDK, spans batched to an in-memory exporter (made once)."""
    if not _SPANS:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        _SPANS.update(exporter=exporter, provider=provider,
                      tracer=provider.get_tracer("bench.events"))
    return _SPANS["tracer"]


async def _tasks(n: int, traced: bool) -> float:
    """N tasks in a TaskGroup; traced, each in a span that records what our events say of
    a branch (barrier, index, key, step, path, and the contribution as a span event when
    the branches contribute)."""
    tracer = _tracer()
    contributes = KIND["kind"] == "add"

    async def plain(index: int) -> None:
        return None

    async def spanned(index: int) -> None:
        key = str(index)
        with tracer.start_as_current_span("branch", attributes={
                "barrier": "b0", "index": index, "key": key, "step": "Noop",
                "path": key}) as span:
            if contributes:
                span.add_event("contributed", {"field": "items", "value": index})
            return None

    body = spanned if traced else plain
    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        for index in range(n):
            group.create_task(body(index))
    return time.perf_counter() - start


def bare_tasks(n: int, tmp: Path) -> float:
    return asyncio.run(_tasks(n, False))


def span_tasks(n: int, tmp: Path) -> float:
    elapsed = asyncio.run(_tasks(n, True))
    _SPANS["provider"].force_flush()
    _SPANS["exporter"].clear()
    return elapsed


VARIANTS: dict[str, Variant] = {"no sink": no_sink, "MemorySink": memory_sink,
                                "JsonlSink": jsonl_sink, "TaskGroup": bare_tasks,
                                "TaskGroup+span": span_tasks}


def measure(n: int, reps: int, tmp: Path) -> dict[str, list[float]]:
    """Seconds per variant and round; rounds interleave the variants so drift hits all
    alike."""
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(reps + 2):
        for name, variant in VARIANTS.items():
            gc.collect()
            elapsed = variant(n, tmp)
            if round_ >= 2:  # two warm-up rounds
                samples[name].append(elapsed)
    return samples


def events_per_branch(n: int) -> tuple[float, int]:
    """Events from ``barrier.forked`` to ``join.published`` per branch, and in the turn."""
    sink = MemorySink()
    anyio.run(fanout_with, n, [sink])
    types = [e.type for e in sink.events]
    inside = types.index("join.published") - types.index("barrier.forked") + 1
    return inside / n, len(types)


def own_times(n: int, sinks: list[EventSink]) -> dict[str, tuple[float, int]]:
    """cProfile one barrier: own seconds and calls per function."""
    profiler = cProfile.Profile()
    profiler.enable()
    anyio.run(fanout_with, n, sinks)
    profiler.disable()
    stats = pstats.Stats(profiler)
    out: dict[str, tuple[float, int]] = {}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (file, line, name), (_, calls, own, _, _) in raw.items():
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}({name})" if line else name
        seconds, count = out.get(where, (0.0, 0))
        out[where] = (seconds + own, count + calls)
    return out


def profile(n: int, top: int = 20) -> None:
    """Profile a no-sink and a MemorySink barrier; print the functions whose own time
    grows most with the sink, per branch (profiler overhead inflates every figure)."""
    own_times(n, [])  # warm-up
    bare = own_times(n, [])
    observed = own_times(n, [MemorySink()])
    total_bare = sum(seconds for seconds, _ in bare.values())
    total_observed = sum(seconds for seconds, _ in observed.values())
    rows = sorted(
        ((seconds - bare.get(where, (0.0, 0))[0], calls - bare.get(where, (0.0, 0))[1], where)
         for where, (seconds, calls) in observed.items()),
        reverse=True,
    )
    print(f"\ncProfile, N={n}: profiled own time per branch {total_bare / n * 1e6:.1f} µs "
          f"without sinks, {total_observed / n * 1e6:.1f} µs with a MemorySink")
    print("functions whose own time grows most with the sink (per branch):")
    print(f"  {'+own µs':>8}  {'+calls':>6}  function")
    for extra, calls, where in rows[:top]:
        print(f"  {extra / n * 1e6:8.2f}  {calls / n:6.2f}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--profile", action="store_true", help="profile even under target")
    args = parser.parse_args()
    n, reps = args.n, max(args.reps, 9)

    def per(seconds: float) -> float:
        return seconds / n * 1e6

    verdicts: dict[str, float] = {}
    for kind, label in (("noop", "no-op branches (the barrier benchmark's workload)"),
                        ("add", "branches contributing to an append channel")):
        KIND["kind"] = kind
        with tempfile.TemporaryDirectory() as tmp:
            samples = measure(n, reps, Path(tmp))
        per_branch, total = events_per_branch(n)
        print(f"event emission: run_steps() over N={n} {label}, median of {reps} "
              f"interleaved rounds (µs per branch)")
        for name, base_name in (("no sink", None), ("MemorySink", "no sink"),
                                ("JsonlSink", "no sink"), ("TaskGroup", None),
                                ("TaskGroup+span", "TaskGroup")):
            seconds = statistics.median(samples[name])
            extra = "" if base_name is None else (
                f"   +{per(seconds - statistics.median(samples[base_name])):6.1f} µs  "
                f"ratio {ratio(samples, name, base_name):5.2f}x "
                f"{spread(samples, name, base_name)}")
            print(f"  {name:<15} {per(seconds):8.1f}{extra}")
        # Per round: what the events add to a branch against what a span adds to a task.
        rounds = [(m - b) / (s - t) for m, b, s, t in zip(
            samples["MemorySink"], samples["no sink"], samples["TaskGroup+span"],
            samples["TaskGroup"], strict=True)]
        verdicts[kind] = statistics.median(rounds)
        print(f"  events per branch inside the barrier: {per_branch:.2f} ({total} in the turn)")
        print(f"  our events per branch / one OTel span per task: {verdicts[kind]:.2f}x "
              f"[{min(rounds):.2f}-{max(rounds):.2f}]")
    missed = False
    for kind, what in (("noop", "no-op branches"), ("add", "one contribution per branch")):
        met = verdicts[kind] <= TARGET
        missed |= not met
        print(f"events / OTel span, {what}: {verdicts[kind]:.2f}x (target <= {TARGET}x): "
              f"{'met' if met else 'NOT MET'}")
    if args.profile or missed:
        KIND["kind"] = "add"
        profile(n)


if __name__ == "__main__":
    main()
