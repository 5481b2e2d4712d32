"""LangGraph tracer benchmark: what tracing a 1,000-task ``Send`` fan-out costs.

One compiled graph (the ``send`` demo of :mod:`runtime.integrations.langgraph_demos`, no
sleeps: each async task appends its index to an ``operator.add`` list), invoked with
``graph.ainvoke`` and no checkpointer, in six variants measured in the same run:

  * ``untraced``: no callbacks — the baseline every ratio is against;
  * ``noop_inline``: one LangChain callback handler that does nothing, called on the loop
    (``run_inline``, as the tracer is), so the cost LangChain's callback machinery adds to
    every task (run ids, callback managers) is told apart from the tracer's own;
  * ``noop_thread``: the same handler called as LangChain calls a synchronous handler
    under ``ainvoke`` by default, through the loop's thread pool, once per callback (what
    ``RunCollectorCallbackHandler`` pays too);
  * ``picoflow``: ``LangGraphTracer(graph, sinks=[MemorySink()])`` — every event built and
    kept in memory (no dashboard: that is bench/ingest_sink.py's subject);
  * ``langchain``: LangChain's own offline tracer,
    ``langchain_core.tracers.run_collector.RunCollectorCallbackHandler`` (every run kept
    in a list), as it comes (called in a thread);
  * ``langchain_inline``: the same tracer called on the loop, like for like with ours.

Variants run interleaved, ``gc.collect()`` before each, two warm-up rounds; each ratio is
the median of the per-round ratios with their quartiles, so drift on a shared machine hits
both sides of a ratio alike. ``PICOFLOW_DASHBOARD_URL``/``_TOKEN`` are ignored (unset for
the run), so nothing leaves the process.

    .venv/bin/python bench/langgraph_tracer.py [--n 1000] [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.run_collector import RunCollectorCallbackHandler
from ratios import interleaved, ratio, spread

from runtime.events.sinks import MemorySink
from runtime.integrations.langgraph import LangGraphTracer
from runtime.integrations.langgraph_demos import send_graph


class NoopHandler(BaseCallbackHandler):
    """A callback handler with no callbacks, called in a thread as LangChain calls any
    synchronous handler under ``ainvoke`` by default (``RunCollectorCallbackHandler``
    too)."""


class InlineNoopHandler(NoopHandler):
    """The same, called on the event loop (``run_inline``, as ``LangGraphTracer`` is):
    LangChain's callback machinery alone."""

    run_inline = True


class InlineRunCollector(RunCollectorCallbackHandler):
    """LangChain's tracer called on the loop: its own work, like for like with ours."""

    run_inline = True


def variants(n: int) -> dict[str, Callable[[], Awaitable[float]]]:
    graph = send_graph(n, unit=0)

    def timed(make_callbacks: Callable[[], list[Any]],
              check: Callable[[list[Any]], None] = lambda _: None,
              ) -> Callable[[], Awaitable[float]]:
        async def run() -> float:
            callbacks = make_callbacks()
            config = {"callbacks": callbacks} if callbacks else {}
            start = time.perf_counter()
            out = await graph.ainvoke({"items": []}, config=config)
            elapsed = time.perf_counter() - start
            assert out["items"] == list(range(n))
            check(callbacks)
            return elapsed
        return run

    sinks: list[MemorySink] = []

    def picoflow() -> list[Any]:
        sinks[:] = [MemorySink()]
        return [LangGraphTracer(graph, sinks=sinks)]

    def picoflow_check(callbacks: list[Any]) -> None:
        assert callbacks[0].last_run_id and sinks[0].events

    def collector_check(callbacks: list[Any]) -> None:
        assert callbacks[0].traced_runs

    return {
        "untraced": timed(list),
        "noop_inline": timed(lambda: [InlineNoopHandler()]),
        "noop_thread": timed(lambda: [NoopHandler()]),
        "picoflow": timed(picoflow, picoflow_check),
        "langchain": timed(lambda: [RunCollectorCallbackHandler()], collector_check),
        "langchain_inline": timed(lambda: [InlineRunCollector()], collector_check),
    }



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    for name in ("PICOFLOW_DASHBOARD_URL", "PICOFLOW_DASHBOARD_TOKEN"):
        os.environ.pop(name, None)

    samples = interleaved(args.reps, variants(args.n))
    labels = {
        "untraced": "untraced",
        "noop_inline": "no-op handler, run_inline",
        "noop_thread": "no-op handler, in a thread (default)",
        "picoflow": "LangGraphTracer -> MemorySink",
        "langchain": "RunCollectorCallbackHandler (default)",
        "langchain_inline": "RunCollectorCallbackHandler, run_inline",
    }
    print(f"LangGraph Send fan-out of N={args.n} async tasks (ainvoke, no checkpointer), "
          f"median of {args.reps} interleaved rounds")
    for name, label in labels.items():
        total = statistics.median(samples[name])
        print(f"  {label:40s} {total * 1e3:8.1f} ms  {total / args.n * 1e6:7.1f} µs/task")
    for name in ("noop_inline", "noop_thread", "picoflow", "langchain", "langchain_inline"):
        print(f"ratio {labels[name]:40s} / untraced  {ratio(samples, name, 'untraced'):5.2f}x  "
              f"{spread(samples, name, 'untraced')}")
    for name in ("langchain", "langchain_inline"):
        print(f"ratio LangGraphTracer / {labels[name]:40s}  "
              f"{ratio(samples, 'picoflow', name):5.2f}x  {spread(samples, 'picoflow', name)}")


if __name__ == "__main__":
    main()
