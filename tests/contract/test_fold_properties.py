"""Property tests: the event fold agrees with the runtime on random nested barrier programs.

A *program* is plain JSON (so Hypothesis can shrink it): canonical seed values, then one
or two root barriers. Each barrier lists branches; a branch names one of a few worker
step classes, a branch key (required when a class repeats in one barrier) and a script:

=========================  ===============================================================
``["save", f, v]``         ``save_state({f: v})`` — a replacement of an own field
``["remove", f]``          ``remove_state(f)``
``["contribute", f, v]``   ``contribute_state(f, v)`` to a declared channel
``["read", step]``         read another step's state (and record the whole view)
``["sleep", ms]``          sleep, to shuffle completion order
``["fork", policy, bs]``   a nested ``run_steps()`` over the branches ``bs``
``["raise"]``              an ordinary error (always the last action)
=========================  ===============================================================

One turn runs the program with a :class:`MemorySink`; then:

(a) the fold's final state equals the saved session document's step states;
(b) every branch's own view — recorded just before it returned, and at each ``read`` —
    equals ``view_at`` of the fold at that moment;
(c) every event validates strictly and round-trips through its JSON line.

And the browser's fold (``static/picoflow_web/js/fold.js``, run through node) folds a
share of the generated runs to exactly the Python fold's export.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from runtime import (
    BarrierInvalidError,
    Channel,
    Flow,
    FlowEngine,
    LogicStep,
    ModelSelection,
    Routable,
    SessionDocument,
    StepChannels,
)
from runtime.current import turn_of
from runtime.events import (
    BranchFulfilled,
    Event,
    MemorySink,
    comparable,
    dump_event,
    fold,
    parse_event,
    view_at,
)
from tests.contract.node_fold import first_difference, node_exports, python_export

State = dict[str, dict[str, Any]]
Program = dict[str, Any]

STEP_NAMES = ("B", "C", "D", "E")
FIELDS = ("x", "y")
CHANNEL_FIELDS = ("total", "items", "by_key", "rec")
POLICIES = ("retain-successes", "atomic")
MAX_DEPTH = 3
MAX_FANOUT = 4
MAX_BRANCHES = 20
MAX_ACTIONS = 5

VIEWS: dict[str, State] = {}
"""Each branch's view just before it returned, by invocation path."""
READS: list[tuple[str, int, State]] = []
"""Each ``read`` action: the branch's path, the last emitted seq and the whole view."""


class ScriptedFailure(RuntimeError):
    """The ordinary error a ``["raise"]`` action throws."""


# -- the interpreter ------------------------------------------------------------------------


def thaw(value: Any) -> Any:
    """Frozen params (mapping proxies and tuples) back to plain JSON."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [thaw(v) for v in value]
    return value


def whole_view(step: LogicStep) -> State:
    """Every registered step's state as ``step`` reads it now."""
    return {name: step.flow.read_step_state(name) for name in step.flow.steps}


async def fork(caller: LogicStep, policy: str, branches: list[dict[str, Any]]) -> None:
    """One barrier over ``branches``; an invalid join is caught so the turn goes on."""
    requests = [
        {"step": b["step"], "params": {"script": b["script"]},
         **({"key": b["key"]} if b["key"] else {})}
        for b in branches
    ]
    with contextlib.suppress(BarrierInvalidError):
        await caller.run_steps(requests, failure_policy=policy)  # type: ignore[arg-type]


class Worker(LogicStep):
    """Runs the script in its params; the concrete classes differ only by name."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"total": StepChannels.sum(), "items": StepChannels.append(),
                "by_key": StepChannels.keyed_by_branch(), "rec": StepChannels.merge_record()}

    async def run_logic(self) -> Routable:
        invocation = self.parallel_invocation()
        path = invocation.path_str
        for action in thaw(invocation.params["script"]):
            await self.perform(path, action)
        VIEWS[path] = whole_view(self)
        return path

    async def perform(self, path: str, action: list[Any]) -> None:
        match action:
            case ["save", str(name), value]:
                self.save_state({name: value})
            case ["remove", str(name)]:
                self.remove_state(name)
            case ["contribute", str(name), value]:
                self.contribute_state(name, value)
            case ["read", str(other)]:
                self.flow.read_step_state(other)
                bus = turn_of(self.flow).bus
                assert bus is not None
                READS.append((path, bus.seq - 1, whole_view(self)))
            case ["sleep", int(ms)]:
                await anyio.sleep(ms / 1000)
            case ["fork", str(policy), list(branches)]:
                await fork(self, policy, branches)
            case ["raise"]:
                raise ScriptedFailure(f"scripted failure in {path}")
            case _:
                raise AssertionError(f"unknown action {action!r}")


class B(Worker):
    """Worker class B."""


class C(Worker):
    """Worker class C."""


class D(Worker):
    """Worker class D."""


class E(Worker):
    """Worker class E."""


class Root(LogicStep):
    """The top-level step: seeds canonical state, then runs the program's root barriers."""

    async def run_logic(self) -> Routable:
        program: Program = self.get_context("config.program")
        for name, fields in program["seed"].items():
            self.flow.save_step_state(name, fields)
        for barrier in program["forks"]:
            await fork(self, barrier["policy"], barrier["branches"])
        return "done"


class FoldPropertyFlow(Flow):
    """Logic steps only: no model is ever called."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [Root, B, C, D, E]


# -- programs ------------------------------------------------------------------------------

SMALL = st.integers(0, 9)
JSON_VALUES = st.one_of(SMALL, st.lists(SMALL, max_size=2), st.sampled_from(["s", None]))
RECORDS = st.dictionaries(st.sampled_from("pqr"), SMALL, max_size=2)
CONTRIBUTIONS: dict[str, st.SearchStrategy[Any]] = {
    "total": st.integers(-3, 3), "items": SMALL, "by_key": SMALL, "rec": RECORDS,
}
SEED_FIELDS = st.fixed_dictionaries({}, optional={
    "x": JSON_VALUES, "total": st.integers(-5, 5), "items": st.lists(SMALL, max_size=2),
    "by_key": st.dictionaries(st.sampled_from(["k0", "k9"]), SMALL, max_size=1),
    "rec": RECORDS,
})


def draw_script(draw: st.DrawFn, depth: int, budget: list[int]) -> list[list[Any]]:
    script: list[list[Any]] = []
    for _ in range(draw(st.integers(0, MAX_ACTIONS))):
        kinds = ["read", "save", "contribute", "remove", "sleep", "raise"]
        if depth < MAX_DEPTH and budget[0] > 0:
            kinds.append("fork")
        kind = draw(st.sampled_from(kinds))
        if kind == "read":
            script.append(["read", draw(st.sampled_from(("Root", *STEP_NAMES)))])
        elif kind == "save":
            script.append(["save", draw(st.sampled_from(FIELDS)), draw(JSON_VALUES)])
        elif kind == "remove":
            script.append(["remove", draw(st.sampled_from(FIELDS))])
        elif kind == "contribute":
            name = draw(st.sampled_from(CHANNEL_FIELDS))
            script.append(["contribute", name, draw(CONTRIBUTIONS[name])])
        elif kind == "sleep":
            script.append(["sleep", draw(st.integers(0, 3))])
        elif kind == "fork":
            policy = draw(st.sampled_from(POLICIES))
            script.append(["fork", policy, draw_branches(draw, depth + 1, budget)])
        else:
            script.append(["raise"])
            break
    return script


def draw_branches(draw: st.DrawFn, depth: int, budget: list[int]) -> list[dict[str, Any]]:
    count = draw(st.integers(1, min(MAX_FANOUT, budget[0])))
    budget[0] -= count
    # Drawing from a small pool of classes makes repeated classes (and conflicts) common.
    pool = STEP_NAMES[: draw(st.integers(1, len(STEP_NAMES)))]
    steps = [draw(st.sampled_from(pool)) for _ in range(count)]
    branches = []
    for index, step in enumerate(steps):
        keyed = steps.count(step) > 1 or draw(st.booleans())
        branches.append({"step": step, "key": f"k{index}" if keyed else None,
                         "script": draw_script(draw, depth, budget)})
    return branches


@st.composite
def programs(draw: st.DrawFn) -> Program:
    """A random program: seeds, then one or two root barriers (≤ 20 branches in all)."""
    budget = [MAX_BRANCHES]
    seed = draw(st.dictionaries(st.sampled_from(STEP_NAMES), SEED_FIELDS, max_size=2))
    forks = []
    for _ in range(draw(st.integers(1, 2))):
        if budget[0] == 0:
            break
        policy = draw(st.sampled_from(POLICIES))
        forks.append({"policy": policy, "branches": draw_branches(draw, 1, budget)})
    return {"seed": {k: v for k, v in seed.items() if v}, "forks": forks}


def branch(step: str, script: list[list[Any]], key: str | None = None) -> dict[str, Any]:
    return {"step": step, "key": key, "script": script}


def _b_and_c(*, b_fails_after_join: bool) -> Program:
    """The seed's example: the root runs B and C; B saves, forks D and E, reads, saves."""
    d = branch("D", [["read", "B"], ["save", "x", 2], ["sleep", 2], ["contribute", "total", 1]])
    e = branch("E", [["save", "y", 3], ["read", "D"], ["contribute", "by_key", 7]])
    b_script: list[list[Any]] = [
        ["save", "x", 1], ["contribute", "items", 1], ["fork", "retain-successes", [d, e]],
        ["read", "D"], ["save", "y", 4], ["contribute", "items", 2],
    ]
    if b_fails_after_join:
        b_script.append(["raise"])
    c = branch("C", [["sleep", 3], ["read", "B"], ["read", "D"], ["save", "x", 5]])
    return {"seed": {"B": {"x": 0, "items": [0]}},
            "forks": [{"policy": "retain-successes", "branches": [branch("B", b_script), c]}]}


SEED_B_C = _b_and_c(b_fails_after_join=False)
SEED_B_FAILS = _b_and_c(b_fails_after_join=True)
CONFLICTS: Program = {"seed": {}, "forks": [
    {"policy": "retain-successes", "branches": [
        branch("B", [["save", "x", 1]], "k0"),
        branch("B", [["contribute", "total", 1], ["save", "x", 2]], "k1"),
    ]},
    {"policy": "retain-successes", "branches": [
        branch("C", [["fork", "retain-successes", [
            branch("D", [["save", "y", 1]], "k0"),
            branch("D", [["sleep", 1], ["save", "y", 2]], "k1"),
        ]], ["read", "D"], ["save", "x", 9]]),
        branch("D", [["contribute", "rec", {"p": 1}]]),
    ]},
]}
ATOMIC_FAILURE: Program = {"seed": {"D": {"total": 10}}, "forks": [
    {"policy": "atomic", "branches": [
        branch("B", [["save", "x", 1], ["contribute", "total", 2]]),
        branch("C", [["contribute", "items", 3], ["raise"]]),
    ]},
    {"policy": "retain-successes", "branches": [
        branch("D", [["fork", "atomic", [
            branch("E", [["save", "x", 1], ["contribute", "total", 4]], "k0"),
            branch("E", [["sleep", 1], ["raise"]], "k1"),
        ]], ["contribute", "total", 5], ["read", "E"]]),
    ]},
]}


# -- running and checking ------------------------------------------------------------------


async def run_program(program: Program) -> tuple[list[Event], SessionDocument]:
    """One turn of ``program``; returns its events and the saved session document."""
    VIEWS.clear()
    READS.clear()
    sink = MemorySink()
    engine = FlowEngine(flows=[FoldPropertyFlow], sinks=[sink])
    reply = await engine.run("FoldPropertyFlow", "go", config={"program": program})
    assert reply.success, reply.message
    doc = await engine.store.load(reply.session_id)
    assert doc is not None
    return sink.events, doc


def present(state: Mapping[str, Mapping[str, Any]]) -> State:
    """``comparable`` state with empty steps dropped (a missing step reads as ``{}``)."""
    plain = {step: dict(fields) for step, fields in state.items()}
    return {step: fields for step, fields in comparable(plain).items() if fields}


def check_run(events: list[Event], doc: SessionDocument) -> None:
    # (c) strict validation, round trip, gap-free sequence numbers
    assert [e.seq for e in events] == list(range(len(events)))
    for event in events:
        line = dump_event(event)
        assert dump_event(parse_event(line)) == line

    run = fold(events)
    assert run.status == "finished", run.error
    assert run.anomalies == []

    # (a) the fold's final state is what the turn saved
    saved = {record.name: {k: v for k, v in record.state.items() if k != "_saveOn"}
             for record in doc.flow.steps}
    assert comparable(run.state) == saved

    # (b) every recorded view is the fold's view of that branch at that moment
    fulfilled = {e.path: e.seq for e in events if isinstance(e, BranchFulfilled)}
    assert set(VIEWS) <= set(fulfilled)
    for path, seen in VIEWS.items():
        assert present(view_at(run, path, fulfilled[path])["state"]) == present(seen), path
    for path, seq, seen in READS:
        assert present(view_at(run, path, seq)["state"]) == present(seen), (path, seq)


EXAMPLES = {"asyncio": 80, "trio": 30}
"""Generated programs per backend (plus the four explicit examples), ~10 s in all."""


def test_the_fold_agrees_with_the_runtime(anyio_backend: str) -> None:
    @settings(max_examples=EXAMPLES[anyio_backend], deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(program=programs())
    @example(program=SEED_B_C)
    @example(program=SEED_B_FAILS)
    @example(program=CONFLICTS)
    @example(program=ATOMIC_FAILURE)
    def check(program: Program) -> None:
        events, doc = anyio.run(run_program, program, backend=anyio_backend)
        check_run(events, doc)

    check()


BROWSER_EXAMPLES = 60
"""Generated programs whose traces the browser's fold also folds (asyncio only; with the
explicit examples and the regression programs, one node process: ~1.5 s in all)."""


def test_the_browser_fold_agrees_with_the_python_fold_on_generated_runs() -> None:
    """``static/picoflow_web/js/fold.js`` exports every generated run as the Python fold does.

    The runs are collected first and folded by node all at once (one process for every
    trace), then compared; a mismatch names the program and the first differing part.
    """
    collected: list[tuple[Program, list[Event]]] = []

    @settings(max_examples=BROWSER_EXAMPLES, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(program=programs())
    @example(program=SEED_B_C)
    @example(program=SEED_B_FAILS)
    @example(program=CONFLICTS)
    @example(program=ATOMIC_FAILURE)
    def collect(program: Program) -> None:
        events, _ = anyio.run(run_program, program, backend="asyncio")
        collected.append((program, events))

    collect()
    for program in REPLACE_AFTER_CONTRIBUTE.values():
        collected.append((program, anyio.run(run_program, program, backend="asyncio")[0]))
    python = [python_export(events) for _, events in collected]
    browser = node_exports([(events, stops) for (_, events), (_, stops)
                            in zip(collected, python, strict=True)])
    for (program, _), (expected, _), got in zip(collected, python, browser, strict=True):
        assert got == expected, (
            f"{first_difference(expected, got)} folding program {json.dumps(program)}")


@pytest.mark.parametrize("program", [SEED_B_C, SEED_B_FAILS, CONFLICTS, ATOMIC_FAILURE],
                         ids=["b-c-fork-d-e", "b-fails-after-join", "conflicts", "atomic"])
def test_the_regression_programs_do_what_they_say(anyio_backend: str, program: Program) -> None:
    """The hand-written programs really publish, discard and conflict as intended."""
    events, _ = anyio.run(run_program, program, backend=anyio_backend)
    run = fold(events)
    outcomes = [barrier.outcome for barrier in run.barriers.values()]
    state = present(run.state)
    if program is SEED_B_C:
        assert outcomes == ["published", "published"]
        assert state["B"] == {"x": 1, "y": 4, "items": [0, 1, 2]}
        assert state["D"] == {"x": 2, "total": 1}
        assert state["E"] == {"y": 3, "by_key": {"E": 7}}
        assert state["C"] == {"x": 5}
    elif program is SEED_B_FAILS:
        assert outcomes == ["published", "published"]
        assert state == {"B": {"x": 0, "items": [0]}, "C": {"x": 5}}
    elif program is CONFLICTS:
        assert outcomes == ["invalidated", "published", "invalidated"]
        assert state == {"C": {"x": 9}, "D": {"rec": {"p": 1}}}
    else:
        assert outcomes == ["published", "published", "published"]
        assert run.barriers["b0"].published == []
        assert state == {"D": {"total": 15}}


# -- runtime bugs the properties found ------------------------------------------------------

REPLACE_AFTER_CONTRIBUTE: dict[str, Program] = {
    "save-after-contribute": {"seed": {}, "forks": [{"policy": "retain-successes", "branches": [
        branch("B", [["contribute", "items", 1], ["save", "items", [5]], ["read", "C"]]),
    ]}]},
    "remove-after-contribute": {"seed": {}, "forks": [{"policy": "retain-successes", "branches": [
        branch("B", [["contribute", "total", 1], ["remove", "total"], ["read", "C"]]),
    ]}]},
    "child-replaces-after-contribute": {"seed": {}, "forks": [{"policy": "retain-successes",
                                                              "branches": [
        branch("B", [["contribute", "total", 1],
                     ["fork", "retain-successes", [branch("B", [["save", "total", 7]])]],
                     ["read", "C"]]),
    ]}]},
}


@pytest.mark.parametrize("name", list(REPLACE_AFTER_CONTRIBUTE))
def test_a_replacement_after_a_contribution_reads_back_as_the_events_say(
    anyio_backend: str, name: str
) -> None:
    events, doc = anyio.run(run_program, REPLACE_AFTER_CONTRIBUTE[name], backend=anyio_backend)
    check_run(events, doc)


class Appender(LogicStep):
    """Contributes to an append channel whose canonical value is not a list."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"items": StepChannels.append()}

    async def run_logic(self) -> Routable:
        self.contribute_state("items", 1)
        return "appended"


class Saver(LogicStep):
    """A well-behaved sibling."""

    async def run_logic(self) -> Routable:
        self.save_state({"x": 1})
        return "saved"


class BadChannelRoot(LogicStep):
    """Seeds ``Appender.items`` with a string, then forks Appender and Saver."""

    async def run_logic(self) -> Routable:
        self.flow.save_step_state("Appender", {"items": "not a list"})
        try:
            batch = await self.run_steps([{"step": "Appender"}, {"step": "Saver"}])
        except BarrierInvalidError as exc:
            return f"invalid: {type(exc).__name__}"
        return "published: " + ", ".join(b.status for b in batch.branches)


class BadChannelFlow(Flow):
    """Logic steps only."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [BadChannelRoot, Appender, Saver]


async def _bad_channel_turn(observed: bool) -> tuple[str, State]:
    engine = FlowEngine(flows=[BadChannelFlow], sinks=[MemorySink()] if observed else [])
    reply = await engine.run("BadChannelFlow", "go")
    doc = await engine.store.load(reply.session_id)
    assert doc is not None
    return reply.message, {r.name: {k: v for k, v in r.state.items() if k != "_saveOn"}
                           for r in doc.flow.steps}


def test_attaching_a_sink_does_not_change_a_reducer_failure(anyio_backend: str) -> None:
    unobserved = anyio.run(_bad_channel_turn, False, backend=anyio_backend)
    observed = anyio.run(_bad_channel_turn, True, backend=anyio_backend)
    assert unobserved == ("invalid: ParallelReducerError", {"Appender": {"items": "not a list"}})
    assert observed == unobserved
