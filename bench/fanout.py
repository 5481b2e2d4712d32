"""Fan-out benchmark: per-branch cost of one run_steps() barrier over N no-op branches.

Measured in the same run against like-for-like baselines:
  * a bare ``asyncio.TaskGroup`` of N no-op coroutines (the floor: asyncio's own
    structured concurrency, which the branches run in on asyncio), against our no-op
    branches, with no sink and with a ``MemorySink`` (every branch's events built);
  * the seed's per-branch skeleton: a view, the execution frame, a fresh step instance and
    a result per branch in an ``asyncio.TaskGroup`` (what no run_steps() can do without);
    and the barrier floor: the skeleton plus the least the barrier's other duties cost
    (the plan, the running set, the completion order, a join pass);
  * a bare anyio task group of N no-op tasks (what anyio users would write);
  * LangGraph's Send fan-out of N *async* nodes (``graph.ainvoke``, no checkpointer): nodes
    that return nothing, against our no-op branches, and nodes that append one item to an
    ``operator.add`` list, against our branches that contribute one item to an ``append``
    channel — needs ``pip install langgraph`` (benchmark only).

Variants run interleaved, ``gc.collect()`` before each; every ratio is the median of the
per-round ratios, so drift on a shared machine hits both sides of a ratio alike.

Also reports peak memory (tracemalloc) for N branches forked off a ~10 MB state.

Several ``--n`` measure each width in its own interleaved block.

    PICOFLOW_DEBUG=0 .venv/bin/python bench/fanout.py [--n 1000 10000] [--reps 15] \
        [--no-langgraph]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import json
import operator
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratios import interleaved, ratio, spread

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelSelection,
    RunStepRequest,
    StepChannels,
)
from runtime.events import EventSink, MemorySink

TIMINGS: list[float] = []


class State(TypedDict):
    """LangGraph state of the baseline: one list channel reduced with operator.add."""

    items: Annotated[list[int], operator.add]


class Noop(LogicStep):
    """A branch that does nothing."""

    async def run_logic(self) -> Any:
        return None


class Adder(LogicStep):
    """A branch that contributes one item (to compare with LangGraph's reducer)."""

    def parallel_state_channels(self) -> dict[str, Any]:
        return {"items": StepChannels.append()}

    async def run_logic(self) -> Any:
        self.contribute_state("items", self.parallel_invocation().index)
        return None


class Big(LogicStep):
    """Holds the large state the memory benchmark forks off."""

    async def run_logic(self) -> Any:
        return None


class Fan(LogicStep):
    """The caller: one barrier over N branches of the configured step, timed."""

    async def run_logic(self) -> Any:
        n = self.get_context("config.n")
        step = {"noop": Noop, "add": Adder, "big": Noop}[self.get_context("config.kind")]
        requests = [RunStepRequest(step, key=str(i)) for i in range(n)]
        if self.get_context("config.kind") == "big":
            self.flow.save_step_state(Big, {"blob": make_big_state()})
            gc.collect()
            tracemalloc.start()
            base, _ = tracemalloc.get_traced_memory()
            await self.run_steps(requests)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            TIMINGS.append(peak - base)
            return "ok"
        start = time.perf_counter()
        batch = await self.run_steps(requests)
        TIMINGS.append(time.perf_counter() - start)
        assert len(batch.fulfilled) == n
        return "ok"


class FanFlow(Flow):
    """Only logic steps: no model is ever called."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [Fan(self), Noop(self), Adder(self), Big(self)]

    def config_parallel_execution(self) -> Any:
        from runtime import ParallelConfig

        return ParallelConfig(max_invocations=1_000_000)


def make_big_state(size_mb: int = 10) -> dict[str, Any]:
    """About ``size_mb`` MB of JSON in many small records."""
    record = {"name": "hotel", "amenities": ["wifi", "parking"], "price": 123.45, "note": "x" * 64}
    count = size_mb * 1_000_000 // len(json.dumps(record))
    return {f"r{i}": dict(record) for i in range(count)}


async def picoflow_fanout(n: int, kind: str, sinks: list[EventSink] | None = None) -> float:
    TIMINGS.clear()
    engine = FlowEngine(flows=[FanFlow], sinks=sinks or [])
    reply = await engine.run("FanFlow", "go", config={"n": n, "kind": kind})
    assert reply.success, reply.message
    return TIMINGS[0]


async def asyncio_task_group(n: int) -> float:
    """N no-op coroutines in one ``asyncio.TaskGroup``: what a barrier's branches cannot
    cost less than, as they run in one."""
    async def noop() -> None:
        return None

    start = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for _ in range(n):
            tg.create_task(noop())
    return time.perf_counter() - start


_VIEW: contextvars.ContextVar[Any] = contextvars.ContextVar("bench_view")
_FRAMES: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar(
    "bench_frames", default=())


class _SkeletonView:
    """As many fields as a branch view, slotted, made field by field as fork_views does."""

    __slots__ = ("barrier_id", "barriers", "base", "cancel", "channels_of", "closed",
                 "contributions", "depth", "direct", "folding", "index", "key", "memory",
                 "outer", "overridden", "params", "path", "path_str", "private", "seq", "step",
                 "tokens", "usages", "violations", "writes")
    barrier_id: Any
    barriers: Any
    base: Any
    cancel: Any
    channels_of: Any
    closed: Any
    contributions: Any
    depth: Any
    direct: Any
    folding: Any
    index: Any
    key: Any
    memory: Any
    outer: Any
    overridden: Any
    params: Any
    path: Any
    path_str: Any
    private: Any
    seq: Any
    step: Any
    tokens: Any
    usages: Any
    violations: Any
    writes: Any


class _SkeletonStep:
    async def run_logic(self) -> Any:
        return None


def _skeleton_views(plan: Iterable[tuple[str, str]]) -> list[_SkeletonView]:
    """A view per ``(step, key)`` of ``plan``, in order, made field by field as fork_views
    makes them."""
    views = []
    for index, (name, key) in enumerate(plan):
        view = object.__new__(_SkeletonView)
        view.base, view.step, view.index, view.key = None, name, index, key
        view.path, view.params, view.cancel, view.channels_of = ((0, index),), {}, None, None
        view.usages, view.depth, view.barrier_id, view.writes = (), 1, "b0", None
        view.contributions, view.private, view.violations, view.memory = None, None, (), None
        view.direct, view.overridden, view.barriers, view.closed = None, (), 0, False
        view.outer, view.tokens, view.seq, view.folding = None, None, 0, None
        view.path_str = str(index)
        views.append(view)
    return views


async def skeleton(n: int) -> float:
    """What the seed's rules need per branch and nothing more, in an asyncio.TaskGroup: a
    view per branch (over a shared fork snapshot), the branch's execution frame in two
    context variables, a fresh step instance whose run_logic() is awaited, and a result
    record per branch. The floor an honest run_steps() could reach without the plan, the
    start loop's pacing, cancellation bookkeeping, the trail and the join."""
    outcomes: list[Any] = [None] * n
    start = time.perf_counter()
    views = _skeleton_views(("Noop", str(index)) for index in range(n))

    async def branch(index: int) -> None:
        view = views[index]
        view_token = _VIEW.set(view)
        frame_token = _FRAMES.set((*_FRAMES.get(), index))
        try:
            worker = object.__new__(_SkeletonStep)
            output: Any = await worker.run_logic()
        finally:
            _FRAMES.reset(frame_token)
            _VIEW.reset(view_token)
        outcomes[index] = {"index": index, "key": view.key, "step": view.step,
                           "path": view.path, "status": "fulfilled", "output": output}

    async with asyncio.TaskGroup() as group:
        for index in range(n):
            group.create_task(branch(index))
    return time.perf_counter() - start


async def barrier_floor(n: int) -> float:
    """The skeleton plus the least each of the seed's other duties of a barrier costs per
    branch, each done the cheapest way Python has: the plan (every request's step looked up
    and its key checked unique before any branch starts, as a bad barrier must start none),
    the set of running branches that cancellation reads, the completion order the join
    reports beside request order, and the join's one pass over the results in request
    order. What is left to run_steps() above it: the trail, the start loop's pacing, the
    limits, the events' checks and the join's rules."""
    requests = [RunStepRequest(_SkeletonStep, key=str(i)) for i in range(n)]
    registered = {_SkeletonStep: "Noop"}
    outcomes: list[Any] = [None] * n
    running: set[int] = set()
    finished: list[str] = []
    start = time.perf_counter()
    seen: dict[str, int] = {}
    plan = []
    for index, request in enumerate(requests):
        name, key = registered[request.step], request.key
        if key in seen:
            raise ValueError(f"requests {seen[key]} and {index} share the key {key!r}")
        seen[key] = index
        plan.append((name, key))
    views = _skeleton_views(plan)

    async def branch(index: int) -> None:
        view = views[index]
        running.add(index)
        view_token = _VIEW.set(view)
        frame_token = _FRAMES.set((*_FRAMES.get(), index))
        try:
            worker = object.__new__(_SkeletonStep)
            output: Any = await worker.run_logic()
        finally:
            _FRAMES.reset(frame_token)
            _VIEW.reset(view_token)
            running.discard(index)
        outcomes[index] = {"index": index, "key": view.key, "step": view.step,
                           "path": view.path, "status": "fulfilled", "output": output}
        finished.append(view.path_str)

    async with asyncio.TaskGroup() as group:
        for index in range(n):
            group.create_task(branch(index))
    fulfilled = [outcome for outcome in outcomes if outcome["status"] == "fulfilled"]
    elapsed = time.perf_counter() - start
    assert len(fulfilled) == n and len(finished) == n
    return elapsed


async def bare_task_group(n: int) -> float:
    async def noop() -> None:
        return None

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(noop)
    return time.perf_counter() - start


def langgraph_fanout(n: int, kind: str) -> Any:
    """LangGraph's Send fan-out with async nodes (the faster way to write a LangGraph node:
    a sync node runs in a thread pool): ``noop`` nodes return no update, ``add`` nodes
    append their item through the ``operator.add`` reducer."""
    try:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send
    except ImportError:
        return None
    def fan(state: State) -> list[Any]:
        return [Send("work", {"items": [i]}) for i in range(n)]

    async def add(state: State) -> dict[str, Any]:
        return {"items": state["items"]}

    async def noop(state: State) -> dict[str, Any]:
        return {}

    work = {"add": add, "noop": noop}[kind]
    expected = n if kind == "add" else 0

    graph = StateGraph(State)
    graph.add_node("work", work)
    graph.add_conditional_edges(START, fan, ["work"])
    graph.add_edge("work", END)
    compiled = graph.compile()

    async def run() -> float:
        start = time.perf_counter()
        out = await compiled.ainvoke({"items": []})
        elapsed = time.perf_counter() - start
        assert len(out["items"]) == expected
        return elapsed

    return run



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--no-langgraph", action="store_true",
                        help="skip LangGraph (at 100,000 branches it takes minutes per round)")
    args = parser.parse_args()
    for n in args.n:
        measure(n, args.reps, not args.no_langgraph)


def measure(n: int, reps: int, with_langgraph: bool) -> None:
    """One width's interleaved rounds, printed."""
    variants: dict[str, Any] = {
        "noop": lambda: picoflow_fanout(n, "noop"),
        "noop_events": lambda: picoflow_fanout(n, "noop", [MemorySink()]),
        "add": lambda: picoflow_fanout(n, "add"),
        "taskgroup": lambda: asyncio_task_group(n),
        "skeleton": lambda: skeleton(n),
        "floor": lambda: barrier_floor(n),
        "bare": lambda: bare_task_group(n),
    }
    lg = langgraph_fanout(n, "noop") if with_langgraph else None
    if lg:
        variants["langgraph"] = lg
        variants["langgraph_add"] = langgraph_fanout(n, "add")
    samples = interleaved(reps, variants)
    per = {name: statistics.median(xs) / n * 1e6 for name, xs in samples.items()}

    print(f"fan-out of N={n} branches, median of {reps} interleaved rounds (µs per branch)")
    print(f"  run_steps, no-op branches         {per['noop']:8.2f}")
    print(f"  run_steps, no-op, MemorySink      {per['noop_events']:8.2f}")
    print(f"  run_steps, append contribution    {per['add']:8.2f}")
    print(f"  bare asyncio.TaskGroup            {per['taskgroup']:8.2f}")
    print(f"  the seed's per-branch skeleton    {per['skeleton']:8.2f}")
    print(f"  skeleton + the barrier's duties   {per['floor']:8.2f}")
    print(f"  bare anyio task group             {per['bare']:8.2f}")
    if lg:
        print(f"  LangGraph Send, async no-op node  {per['langgraph']:8.2f}")
        print(f"  LangGraph Send + operator.add     {per['langgraph_add']:8.2f}")
    print(f"ratio run_steps(no-op) / asyncio.TaskGroup     "
          f"{ratio(samples, 'noop', 'taskgroup'):6.2f}x  "
          f"{spread(samples, 'noop', 'taskgroup')}  (target <= 2)")
    print(f"ratio skeleton / asyncio.TaskGroup             "
          f"{ratio(samples, 'skeleton', 'taskgroup'):6.2f}x  "
          f"{spread(samples, 'skeleton', 'taskgroup')}  (the per-branch state alone)")
    print(f"ratio barrier floor / asyncio.TaskGroup        "
          f"{ratio(samples, 'floor', 'taskgroup'):6.2f}x  "
          f"{spread(samples, 'floor', 'taskgroup')}  (skeleton + plan, running set, "
          "completion order, join pass)")
    print(f"ratio run_steps(no-op, MemorySink) / TaskGroup "
          f"{ratio(samples, 'noop_events', 'taskgroup'):6.2f}x  "
          f"{spread(samples, 'noop_events', 'taskgroup')}")
    print(f"ratio run_steps(no-op) / anyio task group      "
          f"{ratio(samples, 'noop', 'bare'):6.2f}x  {spread(samples, 'noop', 'bare')}")
    if lg:
        print(f"ratio run_steps(no-op) / LangGraph no-op       "
              f"{ratio(samples, 'noop', 'langgraph'):6.3f}")
        print(f"ratio run_steps(append) / LangGraph append     "
              f"{ratio(samples, 'add', 'langgraph_add'):6.3f}  "
              f"{spread(samples, 'add', 'langgraph_add', 3)}  (target <= 0.1; both reduce "
              "one list)")
    elif with_langgraph:
        print("LangGraph not installed: pip install langgraph to measure the ratio")
    TIMINGS.clear()
    anyio.run(picoflow_fanout, n, "big")
    print(f"peak extra memory, {n} branches forked off a 10 MB state: "
          f"{TIMINGS[0] / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
