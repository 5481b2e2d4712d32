"""Contributions and channels: request-path order, every built-in channel, reducer failures.

Every ordering test forces completion in the opposite order of the request path (with
:class:`Chain`), so a reduction that followed completion order would fail.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import pytest

from runtime import (
    Channel,
    ContributionMeta,
    ParallelBatchResult,
    ParallelConfigurationError,
    ParallelReducerError,
    ParallelStateConflictError,
    Step,
    StepChannels,
)
from runtime.barrier import format_path
from tests.runtime.barrier_helpers import (
    Chain,
    Meeting,
    branch_step,
    run_body,
    saving,
    user_state,
)

pytestmark = pytest.mark.anyio


def _leaf(chain: Chain) -> type[Step]:
    """A step that contributes its branch key to ``Leaf.log`` when its turn comes."""

    async def leaf(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        await chain.turn(key)
        step.contribute_state("log", key)
        chain.done(key)
        return key

    return branch_step("Leaf", leaf, channels={"log": StepChannels.append()})


async def test_contributions_reduce_in_request_path_order_not_completion_order() -> None:
    chain = Chain(["k3", "k2", "k1", "k0"])

    async def two_each(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        await chain.turn(key)
        step.contribute_state("log", f"{key}-1")
        step.contribute_state("log", f"{key}-2")
        chain.done(key)
        return user_state(step.get_state())

    Acc = branch_step("Acc", two_each, channels={"log": StepChannels.append()})

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Acc, "key": f"k{i}"} for i in range(4)])

    out = await run_body(body, [Acc])
    assert chain.finished == ["k3", "k2", "k1", "k0"]
    assert out.state("Acc") == {"log": [f"k{i}-{n}" for i in range(4) for n in (1, 2)]}
    # Inside a branch the view reduces only its own contributions.
    assert out.value.branches[1].output == {"log": ["k1-1", "k1-2"]}


async def test_contributions_bubbled_from_inner_joins_keep_their_request_path_place() -> None:
    chain = Chain(["d", "c", "b", "a"])  # paths: a 0.0, b 0.1, c 1, d 2.0
    Leaf = _leaf(chain)
    seen: dict[str, Any] = {}

    async def mid(step: Step, message: str | None) -> Any:
        keys = step.parallel_invocation().params["leaves"]
        await step.run_steps([{"step": Leaf, "key": k} for k in keys])
        seen[step.parallel_invocation().key] = user_state(step.flow.get_step_state("Leaf"))
        return None

    Mid = branch_step("Mid", mid)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([
            {"step": Mid, "key": "m0", "params": {"leaves": ["a", "b"]}},
            {"step": Leaf, "key": "c"},
            {"step": Mid, "key": "m2", "params": {"leaves": ["d"]}},
        ])

    out = await run_body(body, [Mid, Leaf])
    assert chain.finished == ["d", "c", "b", "a"]
    assert seen == {"m0": {"log": ["a", "b"]}, "m2": {"log": ["d"]}}
    assert out.state("Leaf") == {"log": ["a", "b", "c", "d"]}


async def test_a_callers_own_contributions_precede_its_descendants_even_after_its_join(
) -> None:
    chain = Chain(["r1.1", "r1.0", "r1", "r0.1", "r0.0", "r0"])

    async def node(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        if "." in key:  # a leaf
            await chain.turn(key)
            step.contribute_state("trail", key)
            chain.done(key)
            return None
        step.contribute_state("trail", f"{key}:before")
        await step.run_steps([{"step": Node, "key": f"{key}.{i}"} for i in range(2)])
        step.contribute_state("trail", f"{key}:after")
        await chain.turn(key)
        chain.done(key)
        return user_state(step.get_state())

    Node = branch_step("Node", node, channels={"trail": StepChannels.append()})

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Node, "key": "r0"}, {"step": Node, "key": "r1"}])

    out = await run_body(body, [Node])
    expected = [f"{r}{suffix}" for r in ("r0", "r1")
                for suffix in (":before", ":after", ".0", ".1")]
    assert out.state("Node") == {"trail": expected}
    assert out.value.branches[0].output == {"trail": expected[:4]}


async def test_two_sequential_inner_barriers_of_one_branch_reduce_in_barrier_order() -> None:
    chain = Chain(["s", "q", "p", "r"])
    Leaf = _leaf(chain)
    paths: list[str] = []

    async def mid(step: Step, message: str | None) -> Any:
        first = await step.run_steps([{"step": Leaf, "key": "p"}, {"step": Leaf, "key": "q"}])
        second = await step.run_steps([{"step": Leaf, "key": "r"}])
        paths.extend(b.path_str for b in (*first.branches, *second.branches))
        return None

    Mid = branch_step("Mid", mid)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Mid}, {"step": Leaf, "key": "s"}])

    out = await run_body(body, [Mid, Leaf])
    assert paths == ["0.0", "0.1", "0.1:0"]
    assert chain.finished == ["s", "q", "p", "r"]
    assert out.state("Leaf") == {"log": ["p", "q", "r", "s"]}


def _trace(acc: Any, value: Any, meta: ContributionMeta) -> Any:
    return [*acc, f"{meta.key}@{format_path(meta.path)}#{meta.seq}:{value}"]


ABSENT = object()

CHANNEL_CASES = [
    pytest.param(StepChannels.sum(), 10, [[1], [2, 3]], 16, id="sum"),
    pytest.param(StepChannels.sum(), ABSENT, [[1], [2.5]], 3.5, id="sum-from-empty"),
    pytest.param(StepChannels.append(), ["seed"], [["a"], ["b", "c"]], ["seed", "a", "b", "c"],
                 id="append"),
    pytest.param(StepChannels.append(), ABSENT, [["a"], ["b"]], ["a", "b"],
                 id="append-from-empty"),
    pytest.param(
        StepChannels.append_unique_by(lambda v: v["id"]), [{"id": 1, "by": "seed"}],
        [[{"id": 2, "by": "k0"}],
         [{"id": 1, "by": "k1"}, {"id": 2, "by": "k1"}, {"id": 3, "by": "k1"}]],
        [{"id": 1, "by": "seed"}, {"id": 2, "by": "k0"}, {"id": 3, "by": "k1"}],
        id="append_unique_by"),
    pytest.param(StepChannels.keyed_by_branch(), {"old": 0}, [[1], [2, 3]],
                 {"old": 0, "k0": 1, "k1": 3}, id="keyed_by_branch"),
    pytest.param(StepChannels.keyed_by_branch(), ABSENT, [[1], [2]], {"k0": 1, "k1": 2},
                 id="keyed_by_branch-from-empty"),
    pytest.param(StepChannels.merge_record(), {"a": 0, "keep": True},
                 [[{"a": 1, "b": 1}], [{"b": 2}]], {"a": 1, "keep": True, "b": 2},
                 id="merge_record"),
    pytest.param(StepChannels.reduced(_trace, ["init"]), ABSENT, [["x"], ["y", "z"]],
                 ["init", "k0@0#1:x", "k1@1#1:y", "k1@1#2:z"], id="reduced-from-initial"),
    pytest.param(StepChannels.reduced(_trace, ["init"]), ["seen"], [["x"]],
                 ["seen", "k0@0#1:x"], id="reduced-from-caller-value"),
    pytest.param(StepChannels.single_writer(), "old", [["first", "last"], []], "last",
                 id="single_writer"),
]


@pytest.mark.parametrize(("channel", "initial", "contributions", "expected"), CHANNEL_CASES)
async def test_each_built_in_channel_reduces_from_the_caller_visible_value(
    channel: Channel, initial: Any, contributions: list[list[Any]], expected: Any,
) -> None:
    chain = Chain([f"k{i}" for i in reversed(range(len(contributions)))])

    async def contribute(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        await chain.turn(key)
        for value in contributions[step.parallel_invocation().index]:
            step.contribute_state("field", value)
        chain.done(key)

    Acc = branch_step("Acc", contribute, channels={"field": channel})

    async def body(coord: Step) -> ParallelBatchResult:
        if initial is not ABSENT:
            coord.flow.save_step_state("Acc", {"field": initial})
        return await coord.run_steps(
            [{"step": Acc, "key": f"k{i}"} for i in range(len(contributions))])

    out = await run_body(body, [Acc])
    assert out.state("Acc") == {"field": expected}
    assert out.value.publication.fields == (("Acc", "field"),)


async def test_repeated_barriers_accumulate_into_the_same_channel_across_turns() -> None:
    async def add(step: Step, message: str | None) -> Any:
        step.contribute_state("total", step.parallel_invocation().index + 1)

    Acc = branch_step("Acc", add, channels={"total": StepChannels.sum()})

    async def body(coord: Step) -> Any:
        totals = []
        for _ in range(2):
            await coord.run_steps([{"step": Acc, "key": "a"}, {"step": Acc, "key": "b"}])
            totals.append(coord.flow.get_step_state("Acc", "total"))
        return totals

    first = await run_body(body, [Acc])
    assert first.value == [3, 6]
    second = await run_body(body, [Acc], engine=first.engine, session_id=first.reply.session_id)
    assert second.value == [9, 12]
    assert second.state("Acc") == {"total": 12}


async def test_concurrent_nested_barriers_of_one_branch_keep_every_contribution() -> None:
    meeting = Meeting(3)  # both barriers are open before any branch contributes

    async def add(step: Step, message: str | None) -> Any:
        await meeting.arrive()
        step.contribute_state("total", 1)

    Acc = branch_step("Acc", add, channels={"total": StepChannels.sum()})

    async def mid(step: Step, message: str | None) -> Any:
        async with anyio.create_task_group() as tg:
            tg.start_soon(step.run_steps, [{"step": Acc}])
            tg.start_soon(step.run_steps, [{"step": Acc, "key": "x"}, {"step": Acc, "key": "y"}])
        return step.flow.get_step_state("Acc", "total")

    Mid = branch_step("Mid", mid)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Mid}])

    out = await run_body(body, [Acc, Mid])
    assert out.value.branches[0].output == 3
    assert out.state("Acc") == {"total": 3}


async def test_concurrent_root_barriers_of_one_caller_keep_every_contribution() -> None:
    meeting = Meeting(3)  # both barriers are open before any branch contributes

    async def add(step: Step, message: str | None) -> Any:
        await meeting.arrive()
        step.contribute_state("total", 1)

    Acc = branch_step("Acc", add, channels={"total": StepChannels.sum()})

    async def body(coord: Step) -> Any:
        async with anyio.create_task_group() as tg:
            tg.start_soon(coord.run_steps, [{"step": Acc}])
            tg.start_soon(coord.run_steps, [{"step": Acc, "key": "x"}, {"step": Acc, "key": "y"}])
        return coord.flow.get_step_state("Acc", "total")

    out = await run_body(body, [Acc])
    assert out.value == 3


async def test_a_contribution_outside_a_branch_applies_the_reducer_at_once() -> None:
    Acc = branch_step("Acc", saving({}), channels={"total": StepChannels.sum()})

    async def body(coord: Step) -> Any:
        acc = coord.flow.require_step("Acc")
        acc.contribute_state("total", 5)
        acc.contribute_state("total", 5)
        return acc.get_state("total")

    out = await run_body(body, [Acc])
    assert out.value == 10
    assert out.state("Acc") == {"total": 10}


async def test_a_single_writer_channel_written_by_two_branches_conflicts() -> None:
    async def claim(step: Step, message: str | None) -> Any:
        step.contribute_state("owner", step.parallel_invocation().key)

    Claim = branch_step("Claim", claim, channels={"owner": StepChannels.single_writer()})

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Claim, "key": "a"}, {"step": Claim, "key": "b"}])

    out = await run_body(body, [Claim])
    error = out.raised(ParallelStateConflictError)
    assert [(p["key"], p["kind"], p["value"]) for p in error.extra["provenance"]] == [
        ("a", "contribute", "a"), ("b", "contribute", "b")]
    assert out.state("Claim") == {}


def _picky(acc: Any, value: Any, meta: ContributionMeta) -> Any:
    if value == "poison":
        raise KeyError("poison is not allowed")
    return [*acc, value]


async def _reducer_barrier(*, read_back: bool) -> Any:
    async def add(step: Step, message: str | None) -> Any:
        step.contribute_state("items", step.parallel_invocation().key)
        if read_back:
            step.save_state({"touched": True})  # reads the branch's own view

    Adder = branch_step("Adder", add, channels={"items": StepChannels.reduced(_picky, [])})
    Other = branch_step("Other", saving({"o": 1}))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Adder, "key": "fine"},
                                      {"step": Adder, "key": "poison"}, {"step": Other}])

    return await run_body(body, [Adder, Other])


async def test_a_raising_reducer_invalidates_the_barrier_with_the_cause_chained() -> None:
    out = await _reducer_barrier(read_back=False)
    error = out.raised(ParallelReducerError)
    assert isinstance(error.__cause__, KeyError)
    assert [(p["key"], p["value"]) for p in error.extra["provenance"]] == [
        ("fine", "fine"), ("poison", "poison")]
    assert error.extra["initial"] == []
    assert (out.state("Adder"), out.state("Other")) == ({}, {})


async def test_a_raising_reducer_invalidates_the_barrier_even_when_the_branch_reads_its_view(
) -> None:
    out = await _reducer_barrier(read_back=True)
    assert isinstance(out.error, ParallelReducerError)
    assert (out.state("Adder"), out.state("Other")) == ({}, {})


async def test_contributing_to_an_undeclared_channel_invalidates_the_barrier_even_if_caught(
) -> None:
    async def stray(step: Step, message: str | None) -> Any:
        with contextlib.suppress(ParallelConfigurationError):
            step.contribute_state("nowhere", 1)
        return "fine"

    Stray = branch_step("Stray", stray, channels={"somewhere": StepChannels.sum()})
    Good = branch_step("Good", saving({"g": 1}))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Good}, {"step": Stray}])

    out = await run_body(body, [Stray, Good])
    error = out.raised(ParallelConfigurationError)
    assert "nowhere" in error.message
    assert [(p["path"], p["field"]) for p in error.extra["provenance"]] == [("1", "nowhere")]
    assert out.state("Good") == {}


def test_an_invocation_path_has_one_string_form_at_every_depth() -> None:
    """A level is its request index, with ``<ordinal>:`` from its caller's second barrier
    on; one level is the short way through, and must read the same."""
    assert format_path(((0, 3),)) == "3"
    assert format_path(((1, 0),)) == "1:0"
    assert format_path(((0, 0), (0, 2), (0, 1))) == "0.2.1"
    assert format_path(((0, 1), (1, 0))) == "1.1:0"
    assert format_path(()) == ""
