"""Cooperative cancellation of barriers through a :class:`CancelToken`.

Queued branches never start; running ones are told and get the flow's grace period; after
it they lose their publication rights. In-flight model calls stop at once, and cancelling
an outer barrier reaches every nested one.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from runtime import (
    BranchCancelledError,
    CancelToken,
    ParallelBatchResult,
    ParallelConfig,
    Rule,
    Step,
)
from runtime import events as ev
from runtime.events import MemorySink
from tests.runtime.barrier_helpers import (
    U,
    branch_step,
    returning,
    run_body,
    saving,
    swallowing_once,
    wait,
)
from tests.runtime.helpers import make_engine

pytestmark = pytest.mark.anyio


async def _cancel_when(token: CancelToken, reason: str, *ready: anyio.Event) -> None:
    for event in ready:
        await wait(event)
    token.cancel(reason)


async def _cooperative(step: Step, message: str | None) -> Any:
    """Wait to be told, then save and finish within the grace period."""
    inv = step.parallel_invocation()
    with anyio.fail_after(5):
        await inv.cancel.wait()
    step.save_state({"stopped": inv.cancel.reason})
    return f"stopped: {inv.cancel.reason}"


async def test_cancelling_a_barrier_means_its_queued_branches_never_start() -> None:
    token = CancelToken()
    started: list[str] = []

    async def first(step: Step, message: str | None) -> Any:
        started.append("first")
        step.save_state({"first": True})
        token.cancel("enough")
        return "first"

    async def queued(step: Step, message: str | None) -> Any:
        started.append(step.parallel_invocation().key)

    First, W = branch_step("First", first), branch_step("W", queued)

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": First}, {"step": W, "key": "q1"},
                                      {"step": W, "key": "q2"}],
                                     max_concurrency=1, cancel=token)

    out = await run_body(body, [First, W])
    batch: ParallelBatchResult = out.value
    assert started == ["first"]
    assert batch.cancelled
    assert [b.status for b in batch.branches] == ["fulfilled", "rejected", "rejected"]
    assert [type(b.error) for b in batch.rejected] == [BranchCancelledError] * 2
    assert all(str(b.error) == "Cancelled before it started: enough." for b in batch.rejected)
    assert out.state("First") == {"first": True}  # it finished within the grace period


async def test_a_token_cancelled_before_the_fork_starts_nothing() -> None:
    token = CancelToken()
    token.cancel("too late")
    started: list[str] = []

    async def record(step: Step, message: str | None) -> Any:
        started.append(step.name)

    W = branch_step("W", record)

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": W}], cancel=token)

    out = await run_body(body, [W])
    assert started == []
    assert out.value.cancelled
    assert isinstance(out.value.branches[0].error, BranchCancelledError)


async def test_running_cooperative_branches_see_the_cancellation_and_finish_within_grace(
) -> None:
    token = CancelToken()
    entered = [anyio.Event(), anyio.Event()]

    async def coop(step: Step, message: str | None) -> Any:
        inv = step.parallel_invocation()
        entered[inv.index].set()
        while not inv.cancel.cancelled:  # polling works as well as awaiting the token
            await anyio.sleep(U / 4)
        step.save_state({inv.key: inv.cancel.reason})
        return f"stopped: {inv.cancel.reason}"

    Coop = branch_step("Coop", coop)

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "user left", *entered)
            return await coord.run_steps([{"step": Coop, "key": "a"}, {"step": Coop, "key": "b"}],
                                         cancel=token)

    out = await run_body(body, [Coop])
    batch: ParallelBatchResult = out.value
    assert batch.cancelled
    assert [b.output for b in batch.fulfilled] == ["stopped: user left"] * 2
    assert not batch.rejected
    assert out.state("Coop") == {"a": "user left", "b": "user left"}


async def test_a_non_cooperative_branch_past_the_grace_is_rejected_and_publishes_nothing(
) -> None:
    token = CancelToken()
    entered = {"stubborn": anyio.Event(), "polite": anyio.Event()}

    async def stubborn(step: Step, message: str | None) -> Any:
        step.save_state({"early": 1})
        entered["stubborn"].set()
        await anyio.sleep(100 * U)  # ignores the token
        step.save_state({"late": 1})
        return "never"

    async def polite(step: Step, message: str | None) -> Any:
        entered["polite"].set()
        return await _cooperative(step, message)

    Stubborn, Polite = branch_step("Stubborn", stubborn), branch_step("Polite", polite)

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "stop", *entered.values())
            return await coord.run_steps([{"step": Stubborn}, {"step": Polite}], cancel=token)

    out = await run_body(body, [Stubborn, Polite],
                         config=ParallelConfig(cancellation_grace=2 * U))
    batch: ParallelBatchResult = out.value
    assert [b.status for b in batch.branches] == ["rejected", "fulfilled"]
    error = batch.branches[0].error
    assert isinstance(error, BranchCancelledError) and "grace period" in str(error)
    assert (out.state("Stubborn"), out.state("Polite")) == ({}, {"stopped": "stop"})


async def test_a_branch_that_finishes_past_the_grace_without_a_checkpoint_is_rejected() -> None:
    token = CancelToken()
    entered = anyio.Event()

    async def blocking(step: Step, message: str | None) -> Any:
        step.save_state({"early": 1})
        entered.set()
        await anyio.to_thread.run_sync(time.sleep, 6 * U)  # not cancellable
        step.save_state({"late": 1})  # past the grace: dropped
        return "thread done"

    Blocking = branch_step("Blocking", blocking)

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "stop", entered)
            return await coord.run_steps([{"step": Blocking}], cancel=token)

    out = await run_body(body, [Blocking], config=ParallelConfig(cancellation_grace=U))
    branch = out.value.branches[0]
    assert out.state("Blocking") == {}
    assert branch.status == "rejected" and isinstance(branch.error, BranchCancelledError)


@pytest.mark.parametrize("timeout", [None, 30.0])
async def test_an_in_flight_model_call_stops_at_once_when_its_branch_is_cancelled(
    timeout: float | None,
) -> None:
    # With a timeout, the call's one cancel scope serves the timeout and the token: the
    # token's cancellation must still read as cancellation.
    token = CancelToken()
    entered = anyio.Event()
    recovered: list[str] = []

    async def on_enter(self: Step) -> None:
        entered.set()

    async def on_model_error(self: Step, error: Exception) -> str | None:
        recovered.append(repr(error))
        return "recovered"

    def call_timeout(self: Step) -> float | None:
        return timeout

    Talker = branch_step("Talker", attrs={"on_enter": on_enter, "call_timeout": call_timeout,
                                          "on_model_error": on_model_error})

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "stop", entered)
            return await coord.run_steps([{"step": Talker}], cancel=token)

    out = await run_body(body, [Talker], rules=[Rule(step="Talker", text="slow", latency=1.0)])
    branch = out.value.branches[0]
    assert branch.status == "rejected" and isinstance(branch.error, BranchCancelledError)
    assert "during a model call" in str(branch.error)
    assert recovered == []  # recovery hooks are bypassed when cancellation is the cause
    assert (out.model.requests, out.doc.tokens.total_tokens) == ([], 0)


async def test_cancelling_an_outer_token_reaches_nested_barriers() -> None:
    token = CancelToken()
    entered = anyio.Event()
    seen: dict[str, Any] = {}

    async def leaf(step: Step, message: str | None) -> Any:
        entered.set()
        return await _cooperative(step, message)

    async def mid(step: Step, message: str | None) -> Any:
        inner = await step.run_steps([{"step": Leaf}])  # no token of its own
        seen["inner"] = inner
        return inner.branches[0].output

    Leaf, Mid = branch_step("Leaf", leaf), branch_step("Mid", mid)

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "shutdown", entered)
            return await coord.run_steps([{"step": Mid}], cancel=token)

    out = await run_body(body, [Mid, Leaf])
    assert seen["inner"].cancelled and out.value.cancelled
    assert out.value.branches[0].output == "stopped: shutdown"
    assert out.state("Leaf") == {"stopped": "shutdown"}


async def test_a_branch_past_the_grace_loses_its_writes_and_cannot_fork() -> None:
    token = CancelToken()
    entered = anyio.Event()
    seen: dict[str, Any] = {}
    Leaf = branch_step("Leaf", saving({"leaf": 1}))

    async def late(step: Step, message: str | None) -> Any:
        step.save_state({"early": 1})
        entered.set()
        try:  # a branch that ignores its cancellation runs on past the grace period
            await anyio.sleep_forever()  # until the stop past the grace cancels it
        except anyio.get_cancelled_exc_class():
            seen["cancelled"] = True
        step.save_state({"late": 1})
        seen["own view"] = {k: v for k, v in step.get_state().items() if k != "_saveOn"}
        try:
            await step.run_steps([{"step": Leaf}])
        except BranchCancelledError as exc:
            seen["fork error"] = exc
        # On trio the cancellation holds and ends the branch here; on asyncio it was
        # delivered once, and the branch returns, unpublished.
        await anyio.lowlevel.checkpoint()
        return "ignored its cancellation"

    Late = branch_step("Late", late)

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "stop", entered)
            return await coord.run_steps([{"step": Late}], cancel=token)

    with anyio.fail_after(5):  # not a timing bound: a branch never stopped would hang
        out = await run_body(body, [Late, Leaf], config=ParallelConfig(cancellation_grace=U))
    assert seen["cancelled"] and seen["own view"] == {"early": 1}  # the late write dropped
    assert "lost its publication rights" in str(seen["fork error"])
    branch = out.value.branches[0]
    assert branch.status == "rejected" and isinstance(branch.error, BranchCancelledError)
    assert (out.state("Late"), out.state("Leaf")) == ({}, {})


async def test_a_branch_that_swallows_its_cancellation_is_cancelled_again_until_it_ends(
) -> None:
    """A stopped turn waits for its barriers to close: a branch that swallows the
    cancellation once (asyncio delivers it once) must not keep its barrier open."""
    token = CancelToken()
    entered = anyio.Event()
    swallowed: list[str] = []
    Stubborn = branch_step("Stubborn", swallowing_once(entered, swallowed))

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_when, token, "stop", entered)
            with anyio.fail_after(5):  # not a timing bound: without the fix it never ends
                return await coord.run_steps([{"step": Stubborn}], cancel=token)

    out = await run_body(body, [Stubborn], config=ParallelConfig(cancellation_grace=U))
    assert out.error is None and swallowed == ["once"]
    branch = out.value.branches[0]
    assert branch.status == "rejected" and isinstance(branch.error, BranchCancelledError)


async def test_cancelling_the_caller_ends_every_branch_before_run_steps_returns() -> None:
    """A cancel scope around ``run_steps`` reaches every running branch, nested barriers'
    too, and ``run_steps`` returns only once all of them have ended (on asyncio the branches
    are asyncio's own tasks, not anyio's)."""
    entered = {key: anyio.Event() for key in ("a", "inner")}  # the sleeping branches
    ended: list[str] = []

    async def sleeper(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        entered[key].set()
        try:
            await anyio.sleep_forever()
        finally:
            ended.append(key)

    Sleeper = branch_step("Sleeper", sleeper)

    async def outer_branch(step: Step, message: str | None) -> Any:
        try:
            await step.run_steps([{"step": Sleeper, "key": "inner"}])
        finally:
            ended.append("b")

    Nester = branch_step("Nester", outer_branch)

    async def body(coord: Step) -> Any:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                async def cancel_when_all_entered() -> None:
                    for event in entered.values():
                        await wait(event)
                    scope.cancel()

                tg.start_soon(cancel_when_all_entered)
                try:
                    await coord.run_steps([{"step": Sleeper, "key": "a"},
                                           {"step": Nester, "key": "b"}])
                finally:
                    ended.append("run_steps left")
        return scope.cancelled_caught

    out = await run_body(body, [Sleeper, Nester])
    assert out.value is True
    assert sorted(ended[:3]) == ["a", "b", "inner"] and ended[3:] == ["run_steps left"]
    assert ended.index("inner") < ended.index("b")  # the nested barrier ended first


def test_on_cancel_calls_back_once_and_forgets_what_was_taken_back() -> None:
    """What stops an in-flight model call: a callback per call on the barrier's shared
    token, not a task waiting for it."""
    parent = CancelToken()
    token = CancelToken(parent)
    called: list[str] = []
    token.on_cancel(lambda: called.append("first"))
    take_back = token.on_cancel(lambda: called.append("taken back"))
    token.on_cancel(lambda: called.append("third"))
    take_back()
    take_back()  # twice is harmless
    parent.cancel("stop")  # reaches the linked token
    token.cancel("again")  # idempotent: nobody is called twice
    assert called == ["first", "third"]
    assert token.reason == "stop"
    # Asked after the cancellation, it calls back at once.
    token.on_cancel(lambda: called.append("late"))
    assert called == ["first", "third", "late"]


def test_a_callback_that_raises_keeps_nobody_else_from_being_told() -> None:
    parent = CancelToken()
    child = CancelToken(parent)
    told: list[str] = []

    def broken() -> None:
        raise RuntimeError("callback broke")

    parent.on_cancel(broken)
    parent.on_cancel(lambda: told.append("parent's second"))
    child.on_cancel(lambda: told.append("child"))
    with pytest.raises(RuntimeError, match="callback broke"):
        parent.cancel("stop")
    assert told == ["parent's second", "child"]
    assert parent.cancelled and child.cancelled and child.reason == "stop"



def _order(events: list[ev.Event], barrier: str) -> list[str]:
    """``type path`` of one barrier's fork, cancel and branch-end events, in ``seq`` order."""
    kinds = ("barrier.forked", "cancel.requested", "cancel.propagated", "branch.fulfilled",
             "branch.rejected")
    return [f"{e.type} {e.path}" for e in events
            if e.type in kinds and getattr(e, "barrier", None) == barrier]


async def test_a_branch_that_obeys_the_token_ends_after_the_recorded_request() -> None:
    # The stop and the branch's wake-up land in one turn of the loop, the branch's first:
    # it reads the token and returns at once. Its end must still follow the request.
    token = CancelToken()
    entered, gate = anyio.Event(), anyio.Event()

    async def obeys(step: Step, message: str | None) -> Any:
        entered.set()
        await gate.wait()
        inv = step.parallel_invocation()
        return "stopped early" if inv.cancel.cancelled else "done"

    async def stop() -> None:
        await wait(entered)
        gate.set()
        token.cancel("user left")

    Obeys = branch_step("Obeys", obeys)
    sink = MemorySink()

    async def body(coord: Step) -> ParallelBatchResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop)
            return await coord.run_steps([{"step": Obeys}], cancel=token)

    engine, _ = make_engine()
    engine.sinks.append(sink)
    out = await run_body(body, [Obeys], engine=engine)
    assert out.value.branches[0].output == "stopped early"
    assert _order(sink.events, "b0") == [
        "barrier.forked ", "cancel.requested ", "cancel.propagated ", "branch.fulfilled 0"]
    (told,) = [e for e in sink.events if isinstance(e, ev.CancelPropagated)]
    assert (told.running, told.queued) == (["0"], [])


async def test_a_barrier_forked_under_a_fired_token_records_the_request_before_its_branches(
) -> None:
    token = CancelToken()
    token.cancel("too late")
    W = branch_step("W", returning("never"))
    sink = MemorySink()

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": W, "key": "a"}, {"step": W, "key": "b"}],
                                     cancel=token)

    engine, _ = make_engine()
    engine.sinks.append(sink)
    out = await run_body(body, [W], engine=engine)
    assert [b.status for b in out.value.branches] == ["rejected", "rejected"]
    assert _order(sink.events, "b0") == [
        "barrier.forked ", "cancel.requested ", "cancel.propagated ", "branch.rejected 0",
        "branch.rejected 1"]
    rejected = [e for e in sink.events if isinstance(e, ev.BranchRejected)]
    assert all(e.cancelled and not e.started for e in rejected)


async def test_a_token_cancelled_after_the_barrier_ended_records_nothing_for_it() -> None:
    token = CancelToken()
    W = branch_step("W", returning("ok"))
    sink = MemorySink()

    async def body(coord: Step) -> ParallelBatchResult:
        batch = await coord.run_steps([{"step": W}], cancel=token)
        token.cancel("afterwards")
        return batch

    engine, _ = make_engine()
    engine.sinks.append(sink)
    out = await run_body(body, [W], engine=engine)
    assert not out.value.cancelled
    assert not [e for e in sink.events if e.type.startswith("cancel.")]
