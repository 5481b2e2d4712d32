"""What-if benchmark: the three schedules of a 10,000-branch run, against folding its events.

The run is recorded once, through the runtime into a ``MemorySink``, in one of two shapes:

  * ``fanout``: the dashboard's ``FanOutFlow`` demo, one barrier of N branches (no model
    calls) at most ``--concurrency`` at a time, each sleeping a millisecond;
  * ``nested``: ``--outer`` coordinator branches of ``N / outer`` model-calling leaves each
    (a scripted model that answers at once): every leaf is a model call of the flat graph.

Then, interleaved round by round with ``gc.collect()`` before each variant (``ratios.py``):

  * ``what_if``: ``runtime.whatif.what_if(events).as_dict()``, the whole report (the three
    schedules, waits, idle times, critical paths) that ``GET /api/runs/<id>/whatif`` answers;
  * ``what_if, limit``: the same with ``max_concurrency`` (the flat graph's slots);
  * ``fold`` (the baseline): ``runtime.events.fold.fold(events)``, the Python fold of the same
    events, what every reader of a stored run pays at least once.

Prints each variant's median seconds and its ratio to the fold (median of the per-round
ratios, with their quartiles).

    PICOFLOW_DEBUG=0 .venv/bin/python bench/whatif.py [--n 10000] [--shape fanout|nested|both]
                                                      [--reps 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from ratios import interleaved, ratio, spread  # noqa: E402

from picoflow_web.demos.scale import FanOutFlow  # noqa: E402
from runtime import (  # noqa: E402
    Flow,
    FlowEngine,
    LogicStep,
    ModelSelection,
    ParallelConfig,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    Step,
)
from runtime.events import Event, MemorySink  # noqa: E402
from runtime.events.fold import fold  # noqa: E402
from runtime.whatif import what_if  # noqa: E402


class Leaf(Step):
    """One model call."""

    def get_prompt(self) -> str:
        return "Answer in one word."

    async def on_response(self, result: Any) -> Routable:
        return str(result)


class Lead(LogicStep):
    """A coordinator branch: one barrier of its leaves."""

    async def run_logic(self) -> Any:
        invocation = self.parallel_invocation()
        await self.run_steps([RunStepRequest(Leaf, key=f"{invocation.key}.{i}",
                                             user_message="go")
                              for i in range(invocation.params["leaves"])])
        return None


class Top(LogicStep):
    """Forks the coordinators."""

    async def run_logic(self) -> Routable:
        outer, leaves = self.get_context("config.outer"), self.get_context("config.leaves")
        await self.run_steps([RunStepRequest(Lead, key=f"c{i}", params={"leaves": leaves})
                              for i in range(outer)])
        return "done"


class NestedFlow(Flow):
    """Coordinators of model-calling leaves."""

    max_model_calls_per_turn = 10_000_000

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="bench")

    def define_steps(self) -> list[Step]:
        return [Top(self), Lead(self), Leaf(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=1_000_000)


async def record(shape: str, n: int, concurrency: int, outer: int) -> list[Event]:
    """One run of ``shape``'s flow, its events."""
    sink = MemorySink()
    if shape == "fanout":
        engine = FlowEngine(flows=[FanOutFlow], sinks=[sink])
        reply = await engine.run("FanOutFlow", "go", config={
            "branches": n, "concurrency": concurrency, "rate": concurrency * 1000})
    else:
        engine = FlowEngine(flows=[NestedFlow], sinks=[sink], providers={
            "scripted": ScriptedModel([Rule(text="ok")])})
        reply = await engine.run("NestedFlow", "go",
                                 config={"outer": outer, "leaves": n // outer})
    assert reply.success, reply.message
    return sink.events


def timed(fn: Callable[[], Any]) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return run


def bench(shape: str, args: argparse.Namespace) -> None:
    events = anyio.run(record, shape, args.n, args.concurrency, args.outer)
    branches = sum(1 for e in events if e.type == "branch.started")
    report = what_if(events).as_dict()
    totals = {name: s["total"] for name, s in report["schedules"].items()}
    variants = {
        "what_if": timed(lambda: what_if(events).as_dict()),
        "what_if_limit": timed(lambda: what_if(events, max_concurrency=args.concurrency)
                               .as_dict()),
        "fold": timed(lambda: fold(events)),
    }
    samples = interleaved(args.reps, variants)
    median = {name: statistics.median(xs) for name, xs in samples.items()}
    print(f"{shape}: {branches} branches, {len(events)} events; schedule totals (s): "
          + ", ".join(f"{name} {total:.3f}" for name, total in totals.items()))
    print(f"  median of {args.reps} interleaved rounds      seconds   / fold")
    print(f"  what_if(events).as_dict()             {median['what_if']:8.3f}   "
          f"{ratio(samples, 'what_if', 'fold'):5.2f}x {spread(samples, 'what_if', 'fold')}")
    print(f"  ... max_concurrency={args.concurrency:<6}           {median['what_if_limit']:8.3f}"
          f"   {ratio(samples, 'what_if_limit', 'fold'):5.2f}x "
          f"{spread(samples, 'what_if_limit', 'fold')}")
    print(f"  fold(events) (baseline)               {median['fold']:8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="branches (leaves when nested)")
    parser.add_argument("--shape", choices=("fanout", "nested", "both"), default="both")
    parser.add_argument("--concurrency", type=int, default=100,
                        help="fanout: branches at once; also the what-if's max_concurrency")
    parser.add_argument("--outer", type=int, default=100, help="nested: coordinators")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    for shape in ("fanout", "nested") if args.shape == "both" else (args.shape,):
        bench(shape, args)


if __name__ == "__main__":
    main()
