"""Keys, params, invocation context and limits: concurrency, depth, invocations, timeouts,
the model-call quota and token budgets. Cancellation lives in ``test_barrier_cancel.py``.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Any, Literal

import anyio
import anyio.lowlevel
import pytest
from pydantic import BaseModel, ConfigDict

from runtime import (
    BranchBudgetError,
    BranchResult,
    BranchTimeoutError,
    CancelToken,
    ContributionMeta,
    ExecutionFrameError,
    ParallelConfig,
    ParallelConfigurationError,
    ParallelDuplicateKeyError,
    ParallelInvocation,
    ParallelLimitError,
    Rule,
    Step,
    StepChannels,
)
from tests.runtime.barrier_helpers import (
    InFlightModel,
    U,
    branch_step,
    returning,
    run_body,
    saving,
    wait,
)
from tests.runtime.helpers import usage

pytestmark = pytest.mark.anyio


def _recorder(started: list[str]) -> Any:
    async def record(step: Step, message: str | None) -> Any:
        started.append(step.parallel_invocation().key)
        return step.parallel_invocation().key

    return record


@pytest.mark.parametrize("missing", [None, "", "   "])
async def test_a_repeated_step_class_without_a_key_is_rejected_before_anything_starts(
    missing: str | None,
) -> None:
    started: list[str] = []
    W = branch_step("W", _recorder(started))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": W, "key": "a"}, {"step": W, "key": missing}])

    out = await run_body(body, [W])
    error = out.raised(ParallelConfigurationError)
    assert "needs a non-empty key" in error.message
    assert started == []


@pytest.mark.parametrize("second", [{"key": "x"}, {"key": " x "}], ids=["same", "padded"])
async def test_two_requests_with_one_key_raise_a_duplicate_key_error(
    second: dict[str, str],
) -> None:
    started: list[str] = []
    A, B = branch_step("A", _recorder(started)), branch_step("B", _recorder(started))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A, "key": "x"}, {"step": B, **second}])

    out = await run_body(body, [A, B])
    error = out.raised(ParallelDuplicateKeyError)
    assert isinstance(error, ParallelConfigurationError)
    assert error.extra == {"key": "x", "indices": [0, 1]}
    assert started == []


async def test_the_default_key_is_the_step_name_and_collides_like_any_key() -> None:
    started: list[str] = []
    A, B = branch_step("A", _recorder(started)), branch_step("B", _recorder(started))

    async def body(coord: Step) -> Any:
        batch = await coord.run_steps([{"step": A}, {"step": "B", "key": "custom"}])
        try:
            await coord.run_steps([{"step": A}, {"step": B, "key": "A"}])
        except ParallelDuplicateKeyError as exc:
            return batch, exc
        raise AssertionError("no duplicate key")

    out = await run_body(body, [A, B])
    batch, error = out.value
    assert [(b.key, b.output) for b in batch.branches] == [("A", "A"), ("custom", "custom")]
    assert error.extra["key"] == "A"


async def test_a_non_string_key_is_a_configuration_error() -> None:
    A = branch_step("A", returning(None))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A, "key": 7}])

    out = await run_body(body, [A])
    out.raised(ParallelConfigurationError)


@pytest.mark.parametrize(("target", "said"), [
    ("Nowhere", "Step 'Nowhere' is not defined in flow"),
    (["A"], "go() requires a Step class with a non-empty id."),
], ids=["unknown", "unhashable"])
async def test_a_request_for_no_registered_step_is_a_configuration_error(
    target: Any, said: str,
) -> None:
    # Steps are looked up once per distinct target; a target that cannot be a dict key
    # still gets the lookup's own message.
    started: list[str] = []
    A = branch_step("A", _recorder(started))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A, "key": "a"}, {"step": target, "key": "b"}])

    out = await run_body(body, [A])
    assert said in out.raised(ParallelConfigurationError).message
    assert started == []


async def test_a_step_named_by_class_and_by_name_in_one_fork_is_one_repeated_step() -> None:
    started: list[str] = []
    A = branch_step("A", _recorder(started))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A}, {"step": "A"}])

    out = await run_body(body, [A])
    assert "Step 'A' appears 2 times in one barrier" in out.raised(
        ParallelConfigurationError).message
    assert started == []


@pytest.mark.parametrize(("request_", "said"), [
    ({"key": "a\ud800"}, "The key of request 1 has text with a lone surrogate (U+D800 after 'a')"),
    ({"key": "b", "user_message": "hi \udce9"},
     "The user_message of branch 'b' has text with a lone surrogate (U+DCE9 after 'hi ')"),
], ids=["key", "user_message"])
async def test_a_lone_surrogate_in_a_key_or_message_is_a_configuration_error(
    request_: dict[str, str], said: str,
) -> None:
    # Keys "a\ud800" and "a\udfff" were two branches that every event and page showed as
    # one key, "a\ufffd"; a message with one is text no session can store.
    started: list[str] = []
    A = branch_step("A", _recorder(started))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A, "key": "ok"}, {"step": A, **request_}])

    out = await run_body(body, [A])
    assert out.raised(ParallelConfigurationError).message.startswith(said)
    assert started == []


async def test_params_are_frozen_inside_the_branch() -> None:
    async def mutate(step: Step, message: str | None) -> Any:
        params = step.parallel_invocation().params
        attempts = {
            "top": lambda: operator.setitem(params, "x", 1),
            "object": lambda: operator.setitem(params["opts"], "k", 1),
            "list": lambda: operator.setitem(params["items"], 0, 9),
        }
        results = {}
        for name, attempt in attempts.items():
            try:
                attempt()
                results[name] = "mutated"
            except TypeError:
                results[name] = "TypeError"
        results["after"] = f"{params['opts']['k']} {list(params['items'])} {'x' in params}"
        return results

    Frozen = branch_step("Frozen", mutate)

    async def body(coord: Step) -> Any:
        params = {"opts": {"k": 0}, "items": [1, 2]}
        batch = await coord.run_steps([{"step": Frozen, "params": params}])
        return batch, params

    out = await run_body(body, [Frozen])
    batch, callers_params = out.value
    assert batch.branches[0].output == {"top": "TypeError", "object": "TypeError",
                                        "list": "TypeError", "after": "0 [1, 2] False"}
    assert callers_params == {"opts": {"k": 0}, "items": [1, 2]}


async def test_flat_params_are_a_frozen_copy_and_the_rest_still_meet_the_json_rules() -> None:
    # A fan-out's usual params (a few texts, numbers, booleans) skip the JSON round trip:
    # the branch must still get a read-only copy the caller cannot change, and anything
    # else (non-ASCII text, NaN, a tuple, an int key) the JSON check's answer.
    seen: dict[str, Any] = {}

    async def read(step: Step, message: str | None) -> Any:
        invocation = step.parallel_invocation()
        seen[invocation.key] = invocation.params
        return dict(invocation.params)

    R = branch_step("R", read)
    flat = {"n": 1, "x": 0.5, "on": True, "s": "a", "none": None}

    async def body(coord: Step) -> Any:
        batch = await coord.run_steps([
            {"step": R, "key": "flat", "params": flat},
            {"step": R, "key": "text", "params": {"s": "caf\u00e9"}},
            {"step": R, "key": "tuple", "params": {"t": (1, 2), 3: "int key"}},
        ])
        flat["n"] = 2  # after the fork: the branch's copy does not change
        return batch

    out = await run_body(body, [R])
    assert [b.output for b in out.value.branches] == [
        {"n": 1, "x": 0.5, "on": True, "s": "a", "none": None}, {"s": "caf\u00e9"},
        {"t": [1, 2], "3": "int key"}]
    assert seen["flat"]["n"] == 1
    with pytest.raises(TypeError):
        operator.setitem(seen["flat"], "n", 3)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"x": float("nan")}, "Out of range float values"), ({"s": "a\ud800"}, "lone surrogate"),
        ({"x": float("inf")}, "Out of range float values")]
    for bad, said in cases:

        async def refused(coord: Step, params: dict[str, Any] = bad) -> Any:
            return await coord.run_steps([{"step": R, "key": "bad", "params": params}])

        failed = await run_body(refused, [R])
        assert said in failed.raised(ParallelConfigurationError).message


async def test_a_params_object_can_be_saved_and_returned_as_plain_json() -> None:
    async def echo(step: Step, message: str | None) -> Any:
        opts = step.parallel_invocation().params["opts"]
        step.save_state({"opts": opts})
        return opts

    Echo = branch_step("Echo", echo)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Echo, "params": {"opts": {"a": [1, 2]}}}])

    out = await run_body(body, [Echo])
    assert out.error is None
    assert out.value.branches[0].output == {"a": [1, 2]}
    assert out.state("Echo") == {"opts": {"a": [1, 2]}}


class QuoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan: Literal["basic", "premium"]
    seats: int = 1


async def test_params_are_validated_by_the_steps_schema_before_anything_starts() -> None:
    started: list[str] = []

    async def quote(step: Step, message: str | None) -> Any:
        started.append(step.parallel_invocation().key)
        return dict(step.parallel_invocation().params)

    Q = branch_step("Q", quote, params_schema=QuoteParams)

    async def body(coord: Step) -> Any:
        batch = await coord.run_steps([
            {"step": Q, "key": "a", "params": {"plan": "basic", "seats": "3"}},
            {"step": Q, "key": "b", "params": {"plan": "premium"}},
        ])
        started.clear()
        try:
            await coord.run_steps([{"step": Q, "key": "ok", "params": {"plan": "basic"}},
                                   {"step": Q, "key": "bad", "params": {"plan": "gold"}}])
        except ParallelConfigurationError as exc:
            return batch, exc
        raise AssertionError("invalid params were accepted")

    out = await run_body(body, [Q])
    batch, error = out.value
    assert [b.output for b in batch.branches] == [{"plan": "basic", "seats": 3},
                                                  {"plan": "premium", "seats": 1}]
    assert error.extra["key"] == "bad" and "plan" in error.message
    assert started == []


async def test_parallel_invocation_describes_the_branch() -> None:
    seen: dict[str, Any] = {}

    async def describe(step: Step, message: str | None) -> Any:
        inv = step.parallel_invocation()
        seen[inv.key] = inv
        if inv.key == "two":
            await step.run_steps([{"step": Inner}])
        return None

    async def inner(step: Step, message: str | None) -> Any:
        seen["inner"] = step.parallel_invocation()

    P, Inner = branch_step("P", describe), branch_step("Inner", inner)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": P, "key": "one", "params": {"n": 1}},
                                      {"step": P, "key": "two"}])

    out = await run_body(body, [P, Inner])
    one, two, nested = seen["one"], seen["two"], seen["inner"]
    assert (dict(one.params), one.key, one.index, one.path, one.path_str) == (
        {"n": 1}, "one", 0, ((0, 0),), "0")
    assert (dict(two.params), two.index, two.path_str) == ({}, 1, "1")
    assert (nested.key, nested.index, nested.path, nested.path_str) == (
        "Inner", 0, ((0, 1), (0, 0)), "1.0")
    assert {inv.session_id for inv in (one, two, nested)} == {out.reply.session_id}
    assert isinstance(one.cancel, CancelToken) and not one.cancel.cancelled
    assert len(one.idempotency_key) == 32 and int(one.idempotency_key, 16) >= 0


async def test_the_records_a_barrier_makes_per_branch_are_whole_frozen_dataclasses() -> None:
    """They are made without their ``__init__`` (a frozen one costs a setattr per field):
    each must still hold every field, compare equal to one made the usual way, and refuse
    changes."""
    made: list[Any] = []

    def keep(acc: Any, value: Any, meta: ContributionMeta) -> Any:
        made.append(meta)
        return [*acc, value]

    async def work(step: Step, message: str | None) -> Any:
        made.append(step.parallel_invocation())
        step.contribute_state("items", 1)
        return "out"

    W = branch_step("W", work, channels={"items": StepChannels.reduced(keep, [])})

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": W, "key": "a", "params": {"n": 1}}])

    out = await run_body(body, [W])
    made.extend(out.value.branches)
    assert [type(m) for m in made] == [ParallelInvocation, ContributionMeta, BranchResult]
    for record in made:
        names = [f.name for f in dataclasses.fields(record)]
        assert sorted(vars(record)) == sorted(names)
        assert record == type(record)(**{name: getattr(record, name) for name in names})
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.key = "changed"


async def test_the_idempotency_key_is_stable_per_session_path_and_key() -> None:
    keys: list[dict[str, str]] = []

    async def remember(step: Step, message: str | None) -> Any:
        inv = step.parallel_invocation()
        keys[-1][inv.key] = inv.idempotency_key

    W = branch_step("W", remember)

    async def body(coord: Step) -> Any:
        keys.append({})
        return await coord.run_steps([{"step": W, "key": "a"}, {"step": W, "key": "b"}])

    first = await run_body(body, [W])
    await run_body(body, [W], engine=first.engine, session_id=first.reply.session_id)
    await run_body(body, [W])  # another session
    same_session, retried, other_session = keys
    assert same_session == retried
    assert same_session["a"] != same_session["b"]
    assert other_session["a"] != same_session["a"]


async def test_parallel_invocation_outside_its_own_branch_raises() -> None:
    errors: list[BaseException] = []

    async def peek(step: Step, message: str | None) -> Any:
        try:
            step.flow.require_step("Idle").parallel_invocation()
        except ExecutionFrameError as exc:
            errors.append(exc)

    D, Idle = branch_step("D", peek), branch_step("Idle", returning(None))

    async def body(coord: Step) -> Any:
        try:
            coord.parallel_invocation()
        except ExecutionFrameError as exc:
            errors.append(exc)
        return await coord.run_steps([{"step": D}])

    await run_body(body, [D, Idle])
    assert len(errors) == 2


async def test_max_concurrency_bounds_running_branches_and_starts_queued_ones_in_order(
) -> None:
    running, peak, starts = 0, 0, []
    durations = [3 * U, U, 2 * U, U, U]

    async def limited(step: Step, message: str | None) -> Any:
        nonlocal running, peak
        index = step.parallel_invocation().index
        starts.append(index)
        running += 1
        peak = max(peak, running)
        await anyio.sleep(durations[index])
        running -= 1

    W = branch_step("W", limited)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": W, "key": f"k{i}"} for i in range(5)],
                                     max_concurrency=2)

    out = await run_body(body, [W])
    assert peak == 2
    assert starts == [0, 1, 2, 3, 4]
    assert all(b.status == "fulfilled" for b in out.value.branches)


async def test_a_wide_unlimited_fork_lets_its_first_branches_run_on_while_it_starts_the_rest(
) -> None:
    # Each branch records its start, yields once (where a model call would wait for its
    # connection), and records that it went on. Started all in one go, every start came
    # before any branch went on; started in batches, the first branches go on before the
    # last one starts.
    seen: list[tuple[str, int]] = []

    async def hop(step: Step, message: str | None) -> Any:
        index = step.parallel_invocation().index
        seen.append(("start", index))
        await anyio.lowlevel.checkpoint()
        seen.append(("on", index))
        return index

    H = branch_step("H", hop)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": H, "key": f"k{i}"} for i in range(64)])

    out = await run_body(body, [H])
    assert [b.output for b in out.value.branches] == list(range(64))
    assert seen.index(("on", 0)) < seen.index(("start", 63))
    assert sorted(seen) == sorted([(kind, i) for i in range(64) for kind in ("start", "on")])


async def _start_batches(waits: bool, n: int = 200) -> list[int]:
    """How many branches of one unlimited fork first ran in each turn of the event loop.

    A ticker task counts the loop's turns (it yields once per turn); each branch notes
    the count when it first runs, so branches started together share a count."""
    turns = 0
    first_turn = [-1] * n

    async def ticker() -> None:
        nonlocal turns
        while True:
            await anyio.lowlevel.checkpoint()
            turns += 1

    async def branch(step: Step, message: str | None) -> Any:
        index = step.parallel_invocation().index
        first_turn[index] = turns
        if waits:  # where a model call would wait for its reply
            await anyio.lowlevel.checkpoint()
        return index

    B = branch_step("B", branch)

    async def body(coord: Step) -> Any:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            batch = await coord.run_steps([{"step": B, "key": f"k{i}"} for i in range(n)])
            tg.cancel_scope.cancel()
        return batch

    out = await run_body(body, [B])
    assert [b.output for b in out.value.branches] == list(range(n))
    return [len(list(group)) for _, group in itertools.groupby(first_turn)]


# Counting the loop's turns needs asyncio's first-in, first-out ready queue: trio runs a
# turn's tasks in either order, so one turn's count could merge with the next.
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_unlimited_fork_starts_more_branches_per_turn_while_none_waits() -> None:
    # Each turn of the loop costs about as much as a no-op branch: branches that all end
    # within their turn (CPU-only) are started in doubling batches, up to 64 a turn.
    assert await _start_batches(waits=False) == [8, 16, 32, 64, 64, 16]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_an_unlimited_fork_starts_eight_branches_per_turn_while_some_wait() -> None:
    assert await _start_batches(waits=True) == [8] * 25


async def test_a_barrier_nested_deeper_than_max_depth_raises_a_limit_error() -> None:
    seen: dict[str, Any] = {}
    E = branch_step("E", _recorder(started := []))

    async def d(step: Step, message: str | None) -> Any:
        try:
            await step.run_steps([{"step": E}])
        except ParallelLimitError as exc:
            seen["error"] = exc
        return "D done"

    D = branch_step("D", d)

    async def b(step: Step, message: str | None) -> Any:
        return (await step.run_steps([{"step": D}])).branches[0].output  # depth 2: allowed

    B = branch_step("B", b)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": B}])

    out = await run_body(body, [B, D, E], config=ParallelConfig(max_depth=2))
    assert out.value.branches[0].output == "D done"
    assert "depth 3" in seen["error"].message and "limit of 2" in seen["error"].message
    assert started == []


async def test_the_invocation_limit_counts_every_branch_of_the_turn() -> None:
    started: list[str] = []
    D, C = branch_step("D", _recorder(started)), branch_step("C", _recorder(started))

    async def b(step: Step, message: str | None) -> Any:
        await step.run_steps([{"step": D, "key": "d1"}, {"step": D, "key": "d2"}])

    B = branch_step("B", b)

    async def body(coord: Step) -> Any:
        await coord.run_steps([{"step": B}])  # 1 + 2 nested = 3 invocations
        started.clear()
        return await coord.run_steps([{"step": C}])

    out = await run_body(body, [B, C, D], config=ParallelConfig(max_invocations=3))
    error = out.raised(ParallelLimitError)
    assert "limit of 3" in error.message and "(3 used)" in error.message
    assert started == []


@pytest.mark.parametrize("policy", ["retain-successes", "atomic"])
async def test_a_branch_past_its_timeout_is_rejected_and_its_siblings_follow_the_policy(
    policy: str,
) -> None:
    async def slow(step: Step, message: str | None) -> Any:
        step.save_state({"slow": 1})
        await anyio.sleep(100 * U)
        return "late"

    Slow, Fast = branch_step("Slow", slow), branch_step("Fast", saving({"fast": 1}, "fast"))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Fast}, {"step": Slow}], branch_timeout=3 * U,
                                     failure_policy=policy)  # type: ignore[arg-type]

    out = await run_body(body, [Slow, Fast])
    assert [b.status for b in out.value.branches] == ["fulfilled", "rejected"]
    assert isinstance(out.value.rejected[0].error, BranchTimeoutError)
    assert out.state("Slow") == {}
    assert out.state("Fast") == ({"fast": 1} if policy == "retain-successes" else {})


@pytest.mark.parametrize(("limit", "peak"), [(1, 1), (None, 3)])
async def test_the_model_call_limit_is_shared_by_every_branch_of_the_turn(
    limit: int | None, peak: int,
) -> None:
    ready = {"x": anyio.Event(), "y": anyio.Event()}

    async def busy(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        ready[key].set()
        await wait(ready["y" if key == "x" else "x"])  # both tool-only branches run at once
        return key

    async def mid(step: Step, message: str | None) -> Any:
        return (await step.run_steps([{"step": Talker}])).branches[0].output

    Talker, Busy, Mid = branch_step("Talker"), branch_step("Busy", busy), branch_step("Mid", mid)
    model = InFlightModel([Rule(step="Talker", text="hi", latency=2 * U)])

    async def body(coord: Step) -> Any:
        return await coord.run_steps([
            {"step": Talker, "key": "t0"}, {"step": Talker, "key": "t1"},
            {"step": Busy, "key": "x"}, {"step": Busy, "key": "y"}, {"step": Mid},
        ])

    out = await run_body(body, [Talker, Busy, Mid], model=model,
                         config=ParallelConfig(model_call_limit=limit))
    assert [b.output for b in out.value.branches] == ["hi", "hi", "x", "y", "hi"]
    assert (model.peak, len(model.requests)) == (peak, 3)


async def _budget_barrier() -> Any:
    started: list[str] = []

    async def spend(step: Step, message: str | None) -> Any:
        answer = await Step.run(step, message)
        step.save_state({"spent": True})
        return answer

    async def sleeper(step: Step, message: str | None) -> Any:
        started.append("sleeper")
        await anyio.sleep(100 * U)

    Spender = branch_step("Spender", spend)
    Sleeper, W = branch_step("Sleeper", sleeper), branch_step("W", _recorder(started))

    async def body(coord: Step) -> Any:
        return await coord.run_steps(
            [{"step": Spender}, {"step": Sleeper}, {"step": W, "key": "q0"},
             {"step": W, "key": "q1"}],
            token_budget=10, max_concurrency=2)

    rules = [Rule(step="Spender", text="spent", usage=usage(15), latency=2 * U)]
    return await run_body(body, [Spender, Sleeper, W], rules=rules), started


async def test_a_token_budget_cancels_running_branches_and_queued_ones_never_start() -> None:
    out, started = await _budget_barrier()
    batch = out.value
    assert started == ["sleeper"]
    assert [type(b.error) for b in batch.branches[1:]] == [BranchBudgetError] * 3
    assert all("before this branch started" in str(b.error) for b in batch.branches[2:])
    assert batch.cancelled
    assert out.doc.tokens.total_tokens == 15


async def test_the_branch_whose_model_call_crosses_the_budget_is_rejected_too() -> None:
    out, _ = await _budget_barrier()
    spender = out.value.branches[0]
    assert spender.status == "rejected" and isinstance(spender.error, BranchBudgetError)
