"""The join: request order, policies, conflicts, reducers, invalid mutations, checkpoints.

Rows of the seed's "Join and failure semantics" table for ``run_steps()`` and its "a failed
branch and a process crash are different" section. Channel semantics and contribution
order live in ``test_barrier_channels.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import anyio
import pytest

from runtime import (
    BranchResult,
    LogicStep,
    ParallelBatchResult,
    ParallelCheckpointError,
    ParallelMutationError,
    ParallelOutputError,
    ParallelStateConflictError,
    Rule,
    SessionDocument,
    SessionStoreError,
    Step,
    StepChannels,
    direct,
    go,
    stay,
    tool,
)
from tests.runtime.barrier_helpers import (
    branch_step,
    failing,
    run_body,
    saving,
    user_state,
    wait,
)
from tests.runtime.helpers import RecordingStore, usage

pytestmark = pytest.mark.anyio


async def test_results_come_back_in_request_order_whatever_the_completion_order() -> None:
    done = [anyio.Event() for _ in range(4)]
    completed: list[int] = []

    async def ordered(step: Step, message: str | None) -> Any:
        index = step.parallel_invocation().index
        try:
            if index < 3:
                await wait(done[index + 1])  # the last request finishes first
            completed.append(index)
            if index % 2:
                raise ValueError(f"branch {index} failed")
            return {"i": index}
        finally:
            done[index].set()

    W = branch_step("W", ordered)

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": W, "key": f"k{i}"} for i in range(4)])

    out = await run_body(body, [W])
    batch: ParallelBatchResult = out.value
    assert completed == [3, 2, 1, 0]
    assert [(b.index, b.key, b.step, b.path, b.path_str, b.status) for b in batch.branches] == [
        (0, "k0", "W", ((0, 0),), "0", "fulfilled"),
        (1, "k1", "W", ((0, 1),), "1", "rejected"),
        (2, "k2", "W", ((0, 2),), "2", "fulfilled"),
        (3, "k3", "W", ((0, 3),), "3", "rejected"),
    ]
    assert [(b.index, b.output, b.error) for b in batch.fulfilled] == [
        (0, {"i": 0}, None), (2, {"i": 2}, None)]
    assert [(b.index, b.output, type(b.error), str(b.error)) for b in batch.rejected] == [
        (1, None, ValueError, "branch 1 failed"), (3, None, ValueError, "branch 3 failed")]
    # The driver builds results its own way: they are what the constructor makes, frozen.
    assert batch.fulfilled[0] == BranchResult(0, "k0", "W", ((0, 0),), "fulfilled",
                                              output={"i": 0})
    assert repr(batch.rejected[0]).startswith("BranchResult(index=1, key='k1'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.branches[0].status = "rejected"  # type: ignore[misc]
    assert all(isinstance(b, BranchResult) for b in batch.branches)
    assert not batch.cancelled


async def test_an_ordinary_branch_error_is_rejected_and_the_fulfilled_siblings_publish() -> None:
    Good = branch_step("Good", saving({"a": 1}, "good"))
    Bad = branch_step("Bad", failing("bad branch", {"bad": 1}))

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": Good}, {"step": Bad}])

    out = await run_body(body, [Good, Bad])
    batch: ParallelBatchResult = out.value
    assert [b.status for b in batch.branches] == ["fulfilled", "rejected"]
    assert str(batch.rejected[0].error) == "bad branch"
    publication = batch.publication
    assert (publication.policy, publication.published, publication.target) == (
        "retain-successes", True, "canonical")
    assert publication.fields == (("Good", "a"),)
    assert [(d.index, d.key, d.reason) for d in publication.discarded] == [(1, "Bad", "rejected")]
    assert (out.state("Good"), out.state("Bad")) == ({"a": 1}, {})


async def test_atomic_publishes_nothing_when_one_branch_rejects_and_still_returns_the_batch(
) -> None:
    Good = branch_step("Good", saving({"a": 1}, "good"))
    Bad = branch_step("Bad", failing("bad branch", {"bad": 1}))

    async def body(coord: Step) -> Any:
        failed = await coord.run_steps([{"step": Good}, {"step": Bad}], failure_policy="atomic")
        state_after = user_state(coord.flow.get_step_state("Good"))
        passed = await coord.run_steps([{"step": Good}], failure_policy="atomic")
        return failed, state_after, passed

    out = await run_body(body, [Good, Bad])
    failed, state_after, passed = out.value
    assert [b.status for b in failed.branches] == ["fulfilled", "rejected"]
    assert failed.fulfilled[0].output == "good"
    assert (failed.publication.policy, failed.publication.published) == ("atomic", False)
    assert failed.publication.fields == ()
    assert [(d.index, d.reason) for d in failed.publication.discarded] == [
        (1, "rejected"), (0, "atomic: branch 1 (Bad) was rejected")]
    assert state_after == {}
    assert passed.publication.published  # atomic with no rejection publishes
    assert (out.state("Good"), out.state("Bad")) == ({"a": 1}, {})


async def test_two_replacements_of_one_field_conflict_with_provenance_and_publish_nothing(
) -> None:
    async def quote(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        step.save_state({"quote": {"basic": 10, "premium": 25}[key], f"{key}_only": True})
        return key

    # A declared reducer does not turn replacements into contributions.
    Q = branch_step("Q", quote, channels={"quote": StepChannels.sum()})
    Other = branch_step("Other", saving({"other": 1}))

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("Q", {"quote": 0})
        try:
            await coord.run_steps([{"step": Q, "key": "basic"}, {"step": Q, "key": "premium"},
                                   {"step": Other}])
        except ParallelStateConflictError as exc:
            return exc, user_state(coord.flow.get_step_state("Q"))
        raise AssertionError("no conflict")

    out = await run_body(body, [Q, Other])
    error, q_after = out.value
    assert (error.extra["step"], error.extra["field"]) == ("Q", "quote")
    assert [(p["path"], p["key"], p["kind"], p["value"], p["base"])
            for p in error.extra["provenance"]] == [
        ("0", "basic", "replace", 10, 0), ("1", "premium", "replace", 25, 0)]
    assert "Q.quote" in error.message and "contribute_state()" in error.message
    assert q_after == {"quote": 0}
    assert (out.state("Q"), out.state("Other")) == ({"quote": 0}, {})


async def test_replacements_from_two_nested_subtrees_conflict_at_the_outer_join() -> None:
    async def leaf(step: Step, message: str | None) -> Any:
        step.save_state({"x": step.parallel_invocation().path_str})
        return None

    Leaf = branch_step("Leaf", leaf)

    async def mid(step: Step, message: str | None) -> Any:
        await step.run_steps([{"step": Leaf}])  # each inner join alone is fine
        return None

    Mid = branch_step("Mid", mid)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Mid, "key": "m0"}, {"step": Mid, "key": "m1"}])

    out = await run_body(body, [Mid, Leaf])
    error = out.raised(ParallelStateConflictError)
    assert [(p["path"], p["value"]) for p in error.extra["provenance"]] == [
        ("0.0", "0.0"), ("1.0", "1.0")]
    assert out.state("Leaf") == {}


async def test_a_replacement_and_a_contribution_to_one_field_conflict() -> None:
    async def replace_or_contribute(step: Step, message: str | None) -> Any:
        if step.parallel_invocation().key == "replace":
            step.save_state({"total": 5})
        else:
            step.contribute_state("total", 1)

    Both = branch_step("Both", replace_or_contribute, channels={"total": StepChannels.sum()})

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Both, "key": "replace"},
                                      {"step": Both, "key": "contribute"}])

    out = await run_body(body, [Both])
    error = out.raised(ParallelStateConflictError)
    assert [(p["key"], p["kind"], p["value"]) for p in error.extra["provenance"]] == [
        ("replace", "replace", 5), ("contribute", "contribute", 1)]
    assert out.state("Both") == {}


async def _another_steps_state(step: Step) -> None:
    step.flow.save_step_state("Other", {"x": "hijacked"})


async def _another_steps_transient_state(step: Step) -> None:
    step.flow.save_transient_step_state("Other", {"x": "hijacked"})


async def _flow_context(step: Step) -> None:
    step.flow.add_context({"config": {"x": "hijacked"}})


async def _complete_the_session(step: Step) -> None:
    step.session_completed()


async def _save_the_session(step: Step) -> None:
    await step.flow.save_session()


async def _move_the_cursor(step: Step) -> None:
    await step.flow.goto("Other")


@pytest.mark.parametrize("mutate", [
    _another_steps_state, _another_steps_transient_state, _flow_context,
    _complete_the_session, _save_the_session, _move_the_cursor,
], ids=lambda f: f.__name__.strip("_"))
async def test_an_invalid_shared_mutation_invalidates_the_barrier_even_when_caught(
    mutate: Any,
) -> None:
    caught: list[BaseException] = []

    async def sneaky(step: Step, message: str | None) -> Any:
        step.save_state({"own": 1})
        try:
            await mutate(step)
        except ParallelMutationError as exc:
            caught.append(exc)
        return "looks fine"

    Sneaky = branch_step("Sneaky", sneaky)
    Good = branch_step("Good", saving({"g": 1}))
    Other = branch_step("Other", saving({}))

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("Other", {"x": "original"})
        store: RecordingStore = coord.flow.require_engine().store  # type: ignore[assignment]
        saves = len(store.saved)
        try:
            await coord.run_steps([{"step": Good}, {"step": Sneaky}])
        except ParallelMutationError as exc:
            return exc, len(store.saved) - saves
        raise AssertionError("the barrier was not invalidated")

    out = await run_body(body, [Sneaky, Good, Other], context={"x": "original"})
    error, saves_during_barrier = out.value
    assert saves_during_barrier == 0
    assert len(caught) == 1 and error.__cause__ is caught[0]
    provenance = error.extra["provenance"]
    assert [(p["path"], p["key"], p["step"], p["kind"]) for p in provenance] == [
        ("1", "Sneaky", "Sneaky", "mutation")]
    assert (out.state("Good"), out.state("Sneaky")) == ({}, {})
    assert out.state("Other") == {"x": "original"}
    assert out.doc.flow.context == {"config": {"x": "original"}}
    assert (out.doc.flow.current_step, out.doc.run_status) == ("Coordinator", "running")


@tool
async def route(self: Step, how: str) -> Any:
    """Try to route from inside a branch."""
    if how == "go":
        return go("Other")
    return stay("again") if how == "stay" else direct("answer the user")


async def _run_catching(self: Step, user_message: str | None = None) -> Any:
    try:
        return await Step.run(self, user_message)
    except ParallelMutationError:
        return "swallowed"


async def _route_from_on_response(self: Step, result: Any) -> Any:
    return go("Other")


@pytest.mark.parametrize("how", ["go", "stay", "direct", "on_response"])
async def test_routing_from_a_branch_invalidates_the_barrier_even_when_caught(how: str) -> None:
    attrs: dict[str, Any] = {"route": route, "run": _run_catching}
    if how == "on_response":
        attrs["on_response"] = _route_from_on_response
    Router = branch_step("Router", attrs=attrs)
    Other = branch_step("Other", base=LogicStep)
    rule = Rule(step="Router", text="plain answer") if how == "on_response" else Rule(
        step="Router", tools=[("route", {"how": how})])

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Router}])

    out = await run_body(body, [Router, Other], rules=[rule])
    error = out.raised(ParallelMutationError)
    assert error.extra["provenance"][0]["step"] == "Router"
    assert out.doc.flow.current_step == "Coordinator"
    assert [e.step_name for e in out.doc.flow.sequence if e.level == 1] == ["Coordinator"]


@pytest.mark.parametrize("output", [{1, 2}, float("nan"), object()], ids=["set", "nan", "obj"])
async def test_a_non_json_branch_output_invalidates_the_barrier(output: Any) -> None:
    async def odd(step: Step, message: str | None) -> Any:
        return output

    Odd = branch_step("Odd", odd)
    Good = branch_step("Good", saving({"g": 1}))

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Good}, {"step": Odd, "key": "odd"}])

    out = await run_body(body, [Odd, Good])
    error = out.raised(ParallelOutputError)
    assert error.extra["provenance"] == [
        {"path": "1", "key": "odd", "step": "Odd", "kind": "output"}]
    assert out.state("Good") == {}


async def test_a_non_json_state_value_invalidates_the_barrier_even_when_caught() -> None:
    async def odd(step: Step, message: str | None) -> Any:
        with contextlib.suppress(ParallelOutputError):
            step.save_state({"when": {1, 2}})
        return "ok"

    Odd = branch_step("Odd", odd)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Odd}])

    out = await run_body(body, [Odd])
    out.raised(ParallelOutputError)


async def test_a_root_join_checkpoint_saves_once_right_after_the_join() -> None:
    D = branch_step("D", saving({"d": 1}))
    Quiet = branch_step("Quiet", failing("nothing to publish"))

    async def body(coord: Step) -> Any:
        store: RecordingStore = coord.flow.require_engine().store  # type: ignore[assignment]
        sid = coord.flow.session_id
        before = await store.load(sid)
        saves = len(store.saved)
        batch = await coord.run_steps([{"step": D}], checkpoint="root-join")
        stored = await store.load(sid)
        after_first = len(store.saved)
        quiet = await coord.run_steps([{"step": Quiet}], checkpoint="root-join")
        return before, saves, batch, stored, after_first, quiet, len(store.saved)

    out = await run_body(body, [D, Quiet])
    before, saves, batch, stored, after_first, quiet, after_quiet = out.value
    assert isinstance(stored, SessionDocument) and isinstance(before, SessionDocument)
    assert stored.revision == before.revision + 1
    assert after_first == saves + 1
    assert user_state(stored.step_record("D").state) == {"d": 1}  # type: ignore[union-attr]
    pub = batch.publication
    assert (pub.checkpoint, pub.checkpointed, pub.revision) == ("root-join", True, stored.revision)
    assert (quiet.publication.published, quiet.publication.checkpointed) == (False, False)
    assert after_quiet == after_first  # a root join that publishes nothing does not save


async def test_a_nested_barrier_never_checkpoints_even_when_asked() -> None:
    D = branch_step("D", saving({"d": 1}))
    seen: dict[str, Any] = {}

    async def b(step: Step, message: str | None) -> Any:
        store: RecordingStore = step.flow.require_engine().store  # type: ignore[assignment]
        saves = len(store.saved)
        seen["inner"] = (await step.run_steps([{"step": D}], checkpoint="root-join")).publication
        seen["saves during inner"] = len(store.saved) - saves

    B = branch_step("B", b)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": B}])

    out = await run_body(body, [B, D])
    inner = seen["inner"]
    assert seen["saves during inner"] == 0
    assert (inner.target, inner.checkpoint, inner.checkpointed, inner.revision) == (
        "caller-scope", "root-join", False, None)
    assert inner.published
    assert not out.value.publication.checkpointed
    assert out.state("D") == {"d": 1}


class FlakyStore(RecordingStore):
    """A store whose next save fails once ``armed`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        if self.armed:
            self.armed = False
            raise SessionStoreError("disk full")
        return await super().save(doc, expected_revision)


async def test_a_failing_root_join_checkpoint_rolls_the_publication_back_and_raises() -> None:
    D = branch_step("D", saving({"x": "new", "y": "new"}))
    E = branch_step("E", saving({"e": 1}))
    store = FlakyStore()

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("D", {"x": "old"})
        revision = (await store.load(coord.flow.session_id)).revision  # type: ignore[union-attr]
        store.armed = True
        try:
            await coord.run_steps([{"step": D}, {"step": E}], checkpoint="root-join")
        except ParallelCheckpointError as exc:
            stored = await store.load(coord.flow.session_id)
            return exc, {n: user_state(coord.flow.get_step_state(n)) for n in "DE"}, (
                revision, stored.revision if stored else None)
        raise AssertionError("the checkpoint did not fail")

    out = await run_body(body, [D, E], store=store)
    error, states, (revision, stored_revision) = out.value
    assert isinstance(error.__cause__, SessionStoreError)
    assert error.extra["fields"] == [["D", "x"], ["D", "y"], ["E", "e"]]
    assert states == {"D": {"x": "old"}, "E": {}}
    assert stored_revision == revision
    assert (out.state("D"), out.state("E")) == ({"x": "old"}, {})


@pytest.mark.parametrize("policy", ["retain-successes", "atomic"])
async def test_token_usage_of_rejected_and_discarded_branches_stays_recorded(policy: str) -> None:
    async def talk_then_maybe_fail(step: Step, message: str | None) -> Any:
        answer = await Step.run(step, message)
        step.save_state({"answer": answer})
        if step.parallel_invocation().key == "bad":
            raise ValueError("rejected after its model call")
        return answer

    Talker = branch_step("Talker", talk_then_maybe_fail)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Talker, "key": "ok"},
                                      {"step": Talker, "key": "bad"}],
                                     failure_policy=policy)  # type: ignore[arg-type]

    out = await run_body(body, [Talker], rules=[Rule(step="Talker", text="hi", usage=usage(7))])
    assert [b.status for b in out.value.branches] == ["fulfilled", "rejected"]
    assert len(out.model.requests) == 2
    assert out.doc.tokens.total_tokens == 14
    assert out.state("Talker") == ({"answer": "hi"} if policy == "retain-successes" else {})
