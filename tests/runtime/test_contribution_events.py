"""What a contribution's event carries: the contribution, whatever the field's size.

A built-in channel's ``state.contributed`` names the channel and carries the contributed
value only; the folds reduce it onto the contributor's view themselves. Every test checks
the fold against the runtime: the branch returns the view it read after contributing, and
the fold's view of that branch at its last contribution must be the same. Where a fold
could not reduce it alike (a custom reducer, a contribution after an inner join's, a
reducer that fails), the event carries the reduced value as before.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime import Channel, FlowEngine, MemorySessionStore, ScriptedModel, Step, StepChannels
from runtime import events as ev
from runtime.events import MemorySink, fold, view_at
from tests.runtime.barrier_helpers import Outcome, branch_step, run_body, user_state
from tests.runtime.helpers import PROVIDER

pytestmark = pytest.mark.anyio


async def observed(body: Any, steps: list[type[Step]], *, engine: FlowEngine | None = None,
                   session_id: str | None = None) -> tuple[Outcome, list[ev.Event]]:
    """Run one turn with a memory sink; the outcome and the turn's events."""
    if engine is None:
        engine = FlowEngine(flows=[], providers={PROVIDER: ScriptedModel([])},
                            store=MemorySessionStore(), sinks=[MemorySink()])
    sink = next(s for s in engine.sinks if isinstance(s, MemorySink))
    first = len(sink.events)
    out = await run_body(body, steps, engine=engine, session_id=session_id)
    return out, sink.events[first:]


def contributed(events: list[ev.Event]) -> list[ev.StateContributed]:
    return [e for e in events if isinstance(e, ev.StateContributed)]


def folded_view(events: list[ev.Event], path: str, step: str) -> dict[str, Any]:
    """The fold's view of ``step`` in branch ``path`` as of its last contribution."""
    last = max(e.seq for e in contributed(events) if e.path == path)
    return user_state(view_at(fold(events), path, last)["state"].get(step, {}))


def acc_step(channel: Channel, values: list[Any]) -> type[Step]:
    """``Acc``: contributes ``values`` one by one and returns the view it then reads."""

    async def contribute(step: Step, message: str | None) -> Any:
        for value in values:
            step.contribute_state("field", value)
        return user_state(step.get_state())

    return branch_step("Acc", contribute, channels={"field": channel})


@pytest.mark.parametrize(("channel", "initial", "values"), [
    (StepChannels.sum(), 10, [1, 2.5]),
    (StepChannels.append(), ["old"], ["a", {"b": 1}]),
    (StepChannels.keyed_by_branch(), {"other": 0}, [1, 2]),
    (StepChannels.merge_record(), {"a": 1}, [{"b": 2}, {"a": 3}]),
], ids=["sum", "append", "keyed_by_branch", "merge_record"])
async def test_a_built_in_channel_s_event_names_it_and_the_fold_reduces_alike(
    channel: Channel, initial: Any, values: list[Any],
) -> None:
    Acc = acc_step(channel, values)

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("Acc", {"field": initial})
        return await coord.run_steps([{"step": Acc, "key": "k0"}, {"step": Acc, "key": "k1"}])

    out, events = await observed(body, [Acc])
    events_ = contributed(events)
    assert [(e.channel, e.result, e.value) for e in events_] == \
        [(channel.kind, None, v) for _ in range(2) for v in values]
    for branch in out.value.branches:
        assert folded_view(events, branch.path_str, "Acc") == branch.output


async def test_a_contribution_s_event_does_not_grow_with_the_field() -> None:
    Acc = acc_step(StepChannels.append(), ["new"])

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Acc, "key": "k0"}])

    async def seeded(size: int) -> tuple[Outcome, list[ev.Event]]:
        async def seed(coord: Step) -> Any:
            coord.flow.save_step_state("Acc", {"field": list(range(size))})
            return await body(coord)
        return await observed(seed, [Acc])

    small_out, small = await seeded(0)
    big_out, big = await seeded(3000)
    (small_event,), (big_event,) = contributed(small), contributed(big)
    # The same event but for its envelope: the 3,000 items are not in it.
    envelope = {"run_id", "session_id", "seq", "time", "offset"}
    assert big_event.model_dump(exclude=envelope) == small_event.model_dump(exclude=envelope)
    assert big_out.value.branches[0].output == {"field": [*range(3000), "new"]}
    assert folded_view(big, "0", "Acc") == big_out.value.branches[0].output
    assert folded_view(small, "0", "Acc") == small_out.value.branches[0].output == \
        {"field": ["new"]}


async def test_a_contribution_too_large_to_carry_carries_the_field_instead() -> None:
    # Its event holds a truncated marker: a fold merging that marker would invent keys.
    big = {f"k{i}": "x" * 100 for i in range(1000)}
    Acc = acc_step(StepChannels.merge_record(), [{"a": 1}, big])

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Acc, "key": "k0"}])

    out, events = await observed(body, [Acc])
    small, large = contributed(events)
    assert (small.channel, large.channel) == ("merge_record", None)
    assert large.value["truncated"] is True
    assert large.result["truncated"] is True  # the field, as large: truncated too
    # The fold shows the field as the event could carry it; merged one event at a time, the
    # marker's keys would have joined the record's as if they were fields of it.
    assert folded_view(events, "0", "Acc")["field"] == large.result
    # The join's record truncates the large value, never the input naming its branch.
    (reduced,) = [e for e in events if isinstance(e, ev.JoinReduced)]
    assert [(i["path"], i["key"]) for i in reduced.inputs] == [("0", "k0"), ("0", "k0")]
    assert reduced.inputs[1]["value"]["truncated"] is True
    assert out.value.branches[0].output["field"]["a"] == 1


async def test_a_custom_reducer_s_event_carries_the_reduced_value() -> None:
    def longest(acc: Any, value: Any, meta: Any) -> Any:
        return value if len(value) > len(acc) else acc

    for channel in (StepChannels.reduced(longest, ""),
                    StepChannels.append_unique_by(lambda v: v["id"])):
        values = ["ab", "abc"] if channel.kind == "reduced" else [{"id": 1}, {"id": 1}]
        Acc = acc_step(channel, values)

        async def body(coord: Step, Acc: type[Step] = Acc) -> Any:
            return await coord.run_steps([{"step": Acc, "key": "k0"}])

        out, events = await observed(body, [Acc])
        view = out.value.branches[0].output
        assert [e.channel for e in contributed(events)] == [None, None]
        assert contributed(events)[-1].result == view["field"]
        assert folded_view(events, "0", "Acc") == view


async def test_a_failing_built_in_reducer_s_event_says_it_failed() -> None:
    async def contribute(step: Step, message: str | None) -> Any:
        step.contribute_state("field", "not a number")

    Acc = branch_step("Acc", contribute, channels={"field": StepChannels.sum()})

    async def body(coord: Step) -> Any:
        try:
            await coord.run_steps([{"step": Acc, "key": "k0"}])
        except Exception as exc:  # the join is invalid: the reducer cannot take a string
            return type(exc).__name__
        return None

    out, events = await observed(body, [Acc])
    (event,) = contributed(events)
    assert out.value == "ParallelReducerError"
    assert event.channel is None
    assert "sum() channel needs numbers" in event.result["reducer_failed"]


async def test_a_contribution_after_an_inner_join_s_carries_its_value_in_path_order() -> None:
    # The caller's own contributions reduce before its inner branches' (request-path
    # order) even when made after their join: one event at a time, a fold would append
    # "own-2" last, so that event carries the value.
    async def tree(step: Step, message: str | None) -> Any:
        invocation = step.parallel_invocation()
        if invocation.params.get("leaf"):
            step.contribute_state("log", invocation.key)
            return None
        step.contribute_state("log", "own-1")
        await step.run_steps([{"step": "Tree", "key": k, "params": {"leaf": True}}
                              for k in ("a", "b")])
        step.contribute_state("log", "own-2")
        return user_state(step.get_state())

    Tree = branch_step("Tree", tree, channels={"log": StepChannels.append()})

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Tree, "key": "root"}])

    out, events = await observed(body, [Tree])
    view = out.value.branches[0].output
    assert view == {"log": ["own-1", "own-2", "a", "b"]}
    marks = [(e.path, e.channel) for e in contributed(events)]
    assert (marks[0], sorted(marks[1:3]), marks[3]) == (  # a and b finish in either order
        ("0", "append"), [("0.0", "append"), ("0.1", "append")], ("0", None))
    assert contributed(events)[-1].result == view["log"]
    assert folded_view(events, "0", "Tree") == view
    for path, key in (("0.0", "a"), ("0.1", "b")):
        assert folded_view(events, path, "Tree") == {"log": ["own-1", key]}


async def test_the_fold_reduces_each_turn_onto_what_the_session_held() -> None:
    Acc = acc_step(StepChannels.append(), ["x"])

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Acc, "key": "k0"}, {"step": Acc, "key": "k1"}])

    first, _ = await observed(body, [Acc])
    second, events2 = await observed(body, [Acc], engine=first.engine,
                                     session_id=first.reply.session_id)
    assert second.state("Acc") == {"field": ["x", "x", "x", "x"]}
    for branch in second.value.branches:
        assert branch.output == {"field": ["x", "x", "x"]}
        assert folded_view(events2, branch.path_str, "Acc") == branch.output
    assert user_state(fold(events2).state["Acc"]) == {"field": ["x", "x", "x", "x"]}


@pytest.mark.parametrize(("middle", "folded", "error"), [
    # Replaced by a number: the next one still reduces (and the join sees a conflict).
    (5, ["sum", "sum"], "ParallelStateConflictError"),
    # Replaced by text: sum() cannot take it; the event says so, and the join fails on it.
    ("x", ["sum", None], "ParallelReducerError"),
], ids=["number", "text"])
async def test_a_replacement_between_contributions_is_what_the_next_one_reduces_onto(
    middle: Any, folded: list[str | None], error: str,
) -> None:
    seen: list[Any] = []

    async def contribute(step: Step, message: str | None) -> Any:
        step.contribute_state("field", 1)
        step.save_state({"field": middle})
        step.contribute_state("field", 2)
        if isinstance(middle, int):
            seen.append(user_state(step.get_state()))

    Acc = branch_step("Acc", contribute, channels={"field": StepChannels.sum()})

    async def body(coord: Step) -> Any:
        try:
            await coord.run_steps([{"step": Acc, "key": "k0"}])
        except Exception as exc:
            return type(exc).__name__
        return None

    out, events = await observed(body, [Acc])
    assert out.value == error
    assert [e.channel for e in contributed(events)] == folded
    if folded[-1] is not None:
        assert seen == [{"field": 7}]
        assert folded_view(events, "0", "Acc") == seen[0]
    else:
        assert "sum() channel needs numbers" in contributed(events)[-1].result["reducer_failed"]


async def test_a_branch_s_many_contributions_are_each_checked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Whether a contribution's event can leave the reducing to the folds depends on every
    # contribution before it; checked anew each time, k contributions cost O(k²) (16,000
    # contributions: 300 µs each, against 5 unobserved). Each is checked once.
    import runtime.barrier.views as views
    from runtime.events.channels import takes_value

    checked: list[Any] = []

    def counting(kind: str, value: Any) -> bool:
        checked.append(value)
        return takes_value(kind, value)

    monkeypatch.setattr(views, "takes_value", counting)
    values = list(range(300))
    Acc = acc_step(StepChannels.sum(), values)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Acc, "key": "k0"}])

    out, events = await observed(body, [Acc])
    assert [e.channel for e in contributed(events)] == ["sum"] * len(values)
    assert out.value.branches[0].output == {"field": sum(values)}
    assert folded_view(events, "0", "Acc") == out.value.branches[0].output
    assert 0 < len(checked) <= 2 * len(values)
