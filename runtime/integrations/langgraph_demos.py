"""Three real LangGraph graphs, traced into the debugger by :class:`LangGraphTracer`.

    python -m runtime.integrations.langgraph_demos ab [--unit 0.05]
    python -m runtime.integrations.langgraph_demos send [--unit 0.05] [--tasks 200]
    python -m runtime.integrations.langgraph_demos conflict [--unit 0.05]

Each command runs one graph once (``graph.ainvoke``), traced by ``LangGraphTracer(graph)``,
which ships the run to the dashboard named by ``PICOFLOW_DASHBOARD_URL`` and
``PICOFLOW_DASHBOARD_TOKEN``; it prints the run id and the run page's address. ``--jsonl
FILE`` also writes the events to a file (``python -m runtime trace FILE`` draws it).

* ``ab``: the seed's flat graph. Two sequences, A1 (1 unit) -> A2 (1 unit) and B1 (10
  units) -> B2 (1 unit), as four nodes: A1 and B1 run in superstep 1, A2 and B2 in
  superstep 2, so A2 waits for B1 (it starts at 10 units, not 1) and both sequences end at
  11 units.
* ``send``: a conditional edge returns one ``Send`` per task; task ``i`` appends ``[i]`` to
  an ``Annotated[list, operator.add]`` channel. Later tasks sleep less, so tasks finish
  out of index order while the reducer still combines them in task order.
* ``conflict``: two nodes of one superstep both write the ``LastValue`` key ``winner``;
  LangGraph raises ``InvalidUpdateError`` ("Can receive only one value per step") and the
  invocation fails. The command exits 0 when it failed that way.

The graphs are built by :func:`ab_graph`, :func:`send_graph` and :func:`conflict_graph`,
which tests and benchmarks use too. Nodes sleep with :func:`anyio.sleep` (LangGraph's async
runner is asyncio's; the demos run on anyio's asyncio backend).
"""

from __future__ import annotations

import argparse
import operator
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypedDict

import anyio
from langgraph.errors import InvalidUpdateError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from .langgraph import SOURCE, LangGraphTracer

DEFAULT_UNIT = 0.05
"""Seconds per time unit of the demos (the seed's example is in whole seconds)."""

AB_DURATIONS = {"A1": 1, "A2": 1, "B1": 10, "B2": 1}
"""The seed's durations, in units: A1 -> A2 and B1 -> B2."""


class ABState(TypedDict):
    """The A/B graph's state: each node appends its name when it finishes."""

    done: Annotated[list[str], operator.add]


class SendState(TypedDict):
    """The fan-out's state: every task contributes one item."""

    items: Annotated[list[int], operator.add]


class ConflictState(TypedDict):
    """``winner`` has no reducer: a ``LastValue`` channel, one write per superstep."""

    winner: str


def ab_graph(unit: float = DEFAULT_UNIT) -> Any:
    """The seed's flat A/B graph, compiled: START -> A1, B1; A1 -> A2; B1 -> B2."""

    def node(name: str) -> Any:
        async def run(state: ABState) -> dict[str, Any]:
            await anyio.sleep(AB_DURATIONS[name] * unit)
            return {"done": [name]}

        run.__name__ = name
        return run

    builder = StateGraph(ABState)
    for name in AB_DURATIONS:
        builder.add_node(name, node(name))
    builder.add_edge(START, "A1")
    builder.add_edge(START, "B1")
    builder.add_edge("A1", "A2")
    builder.add_edge("B1", "B2")
    builder.add_edge("A2", END)
    builder.add_edge("B2", END)
    return builder.compile()


def send_graph(tasks: int = 200, unit: float = DEFAULT_UNIT) -> Any:
    """A ``Send`` fan-out of ``tasks`` tasks into an ``operator.add`` list, compiled.

    Task ``i`` sleeps ``unit * (tasks - i) / tasks`` (none when ``unit`` is 0), so with a
    unit well above the scheduling noise the last task finishes first.
    """

    def fan_out(state: SendState) -> list[Send]:
        return [Send("work", {"items": [i]}) for i in range(tasks)]

    async def work(state: SendState) -> dict[str, Any]:
        # A Send's payload is the task's whole input: its index, as a one-item list.
        (index,) = state["items"]
        if unit:
            await anyio.sleep(unit * (tasks - index) / tasks)
        return {"items": [index]}

    builder = StateGraph(SendState)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, fan_out, ["work"])
    builder.add_edge("work", END)
    return builder.compile()


def conflict_graph(unit: float = DEFAULT_UNIT) -> Any:
    """Two nodes of one superstep, ``left`` and ``right``, both write ``winner``."""

    async def left(state: ConflictState) -> dict[str, Any]:
        await anyio.sleep(unit)
        return {"winner": "left"}

    async def right(state: ConflictState) -> dict[str, Any]:
        await anyio.sleep(2 * unit)
        return {"winner": "right"}

    builder = StateGraph(ConflictState)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge("left", END)
    builder.add_edge("right", END)
    return builder.compile()


DEMOS = ("ab", "send", "conflict")


def build(demo: str, unit: float = DEFAULT_UNIT, tasks: int = 200) -> tuple[Any, dict[str, Any]]:
    """The compiled graph of ``demo`` and the input it is invoked with."""
    if demo == "ab":
        return ab_graph(unit), {"done": []}
    if demo == "send":
        return send_graph(tasks, unit), {"items": []}
    if demo == "conflict":
        return conflict_graph(unit), {"winner": "nobody"}
    raise ValueError(f"unknown demo {demo!r}; expected one of {', '.join(DEMOS)}")


async def run_demo(demo: str, unit: float = DEFAULT_UNIT, tasks: int = 200,
                   sinks: Sequence[Any] | None = None) -> tuple[LangGraphTracer, Any]:
    """Invoke ``demo``'s graph once under a tracer; returns the tracer and the output, or
    the :class:`InvalidUpdateError` the conflict demo ends with (anything else raises)."""
    graph, inputs = build(demo, unit, tasks)
    tracer = LangGraphTracer(graph, sinks=sinks)
    try:
        output: Any = await graph.ainvoke(inputs, config={"callbacks": [tracer]})
    except InvalidUpdateError as exc:
        if demo != "conflict":
            raise
        output = exc
    return tracer, output


def run_page(run_id: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """The dashboard's page of ``run_id``, when a dashboard is configured."""
    url = environ.get("PICOFLOW_DASHBOARD_URL", "").strip().rstrip("/")
    token = environ.get("PICOFLOW_DASHBOARD_TOKEN", "").strip()
    return f"{url}/runs/{run_id}/" if url and token else None


def summary(demo: str, output: Any) -> str:
    """One line saying what the graph did."""
    if isinstance(output, BaseException):
        return f"failed as LangGraph does: {type(output).__name__}: {output}".splitlines()[0]
    if demo == "ab":
        return "finished in order: " + ", ".join(output["done"])
    if demo == "send":
        items = output["items"]
        in_order = items == sorted(items)
        return f"{len(items)} items reduced, {'in' if in_order else 'NOT in'} task order"
    return f"finished: {output!r}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m runtime.integrations.langgraph_demos",
        description="Run a LangGraph demo graph traced into the PicoFlow debugger.")
    parser.add_argument("demo", choices=DEMOS)
    parser.add_argument("--unit", type=float, default=DEFAULT_UNIT,
                        help=f"seconds per time unit (default {DEFAULT_UNIT})")
    parser.add_argument("--tasks", type=int, default=200,
                        help="Send tasks of the send demo (default 200)")
    parser.add_argument("--jsonl", metavar="FILE",
                        help="also append the events to this JSON Lines file")
    args = parser.parse_args(argv)
    if args.unit < 0 or args.tasks < 1:
        parser.error("--unit must be >= 0 and --tasks >= 1")

    sinks: list[Any] | None = None  # None: the tracer's own dashboard sink, from the env
    jsonl = None
    if args.jsonl:
        from ..engine import dashboard_from_env
        from ..events.sinks import JsonlSink

        jsonl = JsonlSink(args.jsonl)
        dashboard = dashboard_from_env(source=SOURCE)
        sinks = [jsonl] if dashboard is None else [jsonl, dashboard]
    try:
        tracer, output = anyio.run(run_demo, args.demo, args.unit, args.tasks, sinks)
    finally:
        if jsonl is not None:
            jsonl.close()
    run_id = tracer.last_run_id
    if run_id is None:
        print("the tracer recorded no run", file=sys.stderr)
        return 1
    print(f"{args.demo}: {summary(args.demo, output)}")
    print(f"run: {run_id}")
    page = run_page(run_id)
    if page:
        print(f"page: {page}")
    elif not args.jsonl:
        print("no dashboard: set PICOFLOW_DASHBOARD_URL and PICOFLOW_DASHBOARD_TOKEN, "
              "or pass --jsonl FILE", file=sys.stderr)
    if args.jsonl:
        print(f"events: {args.jsonl} (python -m runtime trace {args.jsonl})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
