"""The branch ledger and ``FlowEngine.resume``, in one process.

A turn of :class:`~tests.runtime.ledger_flows.LedgerFlow` is interrupted — stopped through
its cancel token once a number of model calls began, or failed by its own code — and
resumed. The model counts every call by request, so each test knows exactly which branches
ran in the resume: none of those the ledger held, every other one once. The resumed
session must then equal the session of an uninterrupted run with the same inputs.
(The kill -9 of a worker process is ``test_ledger_kill.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from runtime import (
    CancelToken,
    MemorySessionStore,
    ParallelConfigurationError,
    SessionDocument,
    SessionStore,
    SessionStoreError,
    SQLiteSessionStore,
    TokenUsage,
)
from runtime import events as ev
from runtime.barrier import LedgerEntry, barrier_options
from runtime.events import BarrierOptions, MemorySink
from runtime.stores import BranchLedgerStore
from tests.runtime.ledger_flows import ALWAYS_FAILS, CountingModel, Fan, engine_for

pytestmark = pytest.mark.anyio

SESSION = "ledger-session"


def states(doc: SessionDocument | None) -> dict[str, dict[str, Any]]:
    """Every step's saved state without its save stamps."""
    assert doc is not None
    return {r.name: {k: v for k, v in r.state.items() if k != "_saveOn"}
            for r in doc.flow.steps}


async def uninterrupted(config: dict[str, Any]) -> SessionDocument:
    """The session an uninterrupted run of the same inputs saves."""
    store = MemorySessionStore()
    reply = await engine_for(CountingModel(), store).run("LedgerFlow", "go", SESSION, config)
    assert reply.success, reply.message
    doc = await store.load(SESSION)
    assert doc is not None
    return doc


async def stopped_after(store: SessionStore, config: dict[str, Any], calls: int,
                        model: CountingModel | None = None) -> CountingModel:
    """Run the flow and stop its turn as its ``calls``-th model call begins."""
    model = model or CountingModel()
    token = CancelToken()

    async def on_call(text: str) -> None:
        if sum(model.calls.values()) == calls:
            token.cancel("interrupted by the test", "pytest")

    model.on_call = on_call
    reply = await engine_for(model, store).run("LedgerFlow", "go", SESSION, config,
                                               run_id="first", cancel=token)
    assert reply.error_code == "turn_cancelled", reply
    return model


async def ledgered(store: SessionStore) -> dict[tuple[str, str], str]:
    """What the session's ledger holds: (barrier, key) -> the branch's user message."""
    assert isinstance(store, BranchLedgerStore)
    found = await store.ledger_load(SESSION)
    assert found is not None, "the interrupted turn kept no ledger"
    return {(e.barrier, e.key): f"item-{e.index}" for e in found[1]}


async def resume(store: SessionStore, model: CountingModel | None = None
                 ) -> tuple[CountingModel, list[ev.Event], SessionDocument]:
    model = model or CountingModel()
    sink = MemorySink()
    reply = await engine_for(model, store, sinks=[sink]).resume(SESSION, run_id="second")
    assert reply.success, reply.message
    doc = await store.load(SESSION)
    assert doc is not None
    return model, sink.events, doc


@pytest.fixture(autouse=True)
def no_variant() -> Iterator[None]:
    yield
    Fan.variant = {}


async def test_a_stopped_turn_resumes_reusing_every_ledgered_branch_and_ends_as_if_never_stopped(
) -> None:
    config = {"n": 40, "mode": "reducer", "max_concurrency": 4}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=17)
    held = await ledgered(store)
    assert 8 <= len(held) < 40  # some finished, some were stopped

    model, events, doc = await resume(store)

    expected = {f"item-{i}" for i in range(40)} - set(held.values())
    assert dict(model.calls) == dict.fromkeys(expected, 1)  # the ledgered ones never again
    reused = [e for e in events if isinstance(e, ev.BranchReused)]
    assert sorted(e.key for e in reused) == sorted(key for _, key in held)
    # Nothing listened to the first run: no seq to link to.
    assert all(e.original_run_id == "first" and e.original_seq is None
               and e.total_tokens == 7 for e in reused)
    started = {e.key for e in events if isinstance(e, ev.BranchStarted)}
    assert started.isdisjoint(e.key for e in reused)
    (turn,) = [e for e in events if isinstance(e, ev.TurnStarted)]
    assert turn.resumes == "first"
    reference = await uninterrupted(config)
    assert states(doc) == states(reference)
    # Request-path order, not the order the two runs finished in.
    assert doc.step_record("Researcher").state["notes"][:2] == [  # type: ignore[union-attr]
        "r0:answer(item-0)", "r1:answer(item-1)"]
    assert doc.tokens == reference.tokens  # each branch's tokens counted once
    assert await store.ledger_load(SESSION) is None  # the final save dropped it


async def test_a_resume_stopped_in_turn_resumes_again_with_the_ledger_of_both_runs() -> None:
    config = {"n": 30, "mode": "reducer", "max_concurrency": 3}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=9)
    engine = engine_for(CountingModel(), store)
    offered = await engine.resumable(SESSION)
    assert offered is not None
    assert (offered.turn_id, offered.run_id, offered.flow, offered.message) == (
        "first", "first", "LedgerFlow", "go")
    assert offered.entries == len(await ledgered(store)) and offered.tokens == 7 * offered.entries

    second, token = CountingModel(), CancelToken()

    async def on_call(text: str) -> None:
        if sum(second.calls.values()) == 9:
            token.cancel("interrupted again", "pytest")

    second.on_call = on_call
    reply = await engine_for(second, store).resume(SESSION, run_id="second", cancel=token)
    assert reply.error_code == "turn_cancelled"
    offered = await engine.resumable(SESSION)
    assert offered is not None and (offered.turn_id, offered.run_id) == ("first", "second")
    held = await ledgered(store)

    third, sink = CountingModel(), MemorySink()
    reply = await engine_for(third, store, sinks=[sink]).resume(SESSION, run_id="third")
    assert reply.success, reply.message
    assert set(third.calls).isdisjoint(held.values())
    # Every branch ran to its end in exactly one of the three runs, or was stopped.
    assert set(third.calls) | set(held.values()) == {f"item-{i}" for i in range(30)}
    reused = {e.original_run_id for e in sink.events if isinstance(e, ev.BranchReused)}
    assert reused == {"first", "second"}
    (turn,) = [e for e in sink.events if isinstance(e, ev.TurnStarted)]
    assert turn.resumes == "second"
    assert states(await store.load(SESSION)) == states(await uninterrupted(config))
    assert await engine.resumable(SESSION) is None


async def test_a_conflict_is_the_same_conflict_when_one_writer_was_reused() -> None:
    config = {"n": 30, "mode": "conflict", "max_concurrency": 3}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=12)
    held = await ledgered(store)
    assert ("b0", "r5") in held and ("b0", "r27") not in held  # one writer each way

    model, events, doc = await resume(store)

    assert "item-5" not in model.calls and model.calls["item-27"] == 1
    reference = await uninterrupted(config)
    assert states(doc)["Fan"]["error"] == "ParallelStateConflictError"
    assert states(doc) == states(reference)  # same provenance, same message
    (invalid,) = [e for e in events if isinstance(e, ev.JoinInvalidated)]
    assert {p["path"] for p in invalid.provenance} == {"5", "27"}


async def test_the_atomic_policy_holds_across_a_resume_and_a_rejected_branch_runs_again(
) -> None:
    config = {"n": 30, "mode": "atomic", "max_concurrency": 3}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=20)
    held = await ledgered(store)
    assert ("b0", f"r{ALWAYS_FAILS}") not in held  # rejected: never ledgered

    model, events, doc = await resume(store)

    assert model.calls[f"item-{ALWAYS_FAILS}"] == 1  # it ran again, and failed again
    assert set(model.calls).isdisjoint(held.values())
    reference = await uninterrupted(config)
    assert states(doc) == states(reference)
    assert states(doc)["Fan"]["rejected"] == 1
    assert "notes" not in states(doc).get("Researcher", {})  # atomic: nothing published
    (published,) = [e for e in events if isinstance(e, ev.JoinPublished)]
    assert len(published.discarded) == 30


async def test_a_branch_with_an_invalid_shared_mutation_is_not_ledgered_and_fails_again(
) -> None:
    config = {"n": 20, "mode": "mutation", "max_concurrency": 2}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=17)
    held = await ledgered(store)
    assert ("b0", "r12") in held and ("b0", f"r{ALWAYS_FAILS}") not in held  # fulfilled, yet

    model, _, doc = await resume(store)

    assert model.calls[f"item-{ALWAYS_FAILS}"] == 1  # it ran again
    assert states(doc)["Fan"]["error"] == "ParallelMutationError"
    assert states(doc) == states(await uninterrupted(config))


async def test_a_branch_rejected_before_the_interruption_runs_again_and_may_succeed() -> None:
    config = {"n": 20, "mode": "reducer", "max_concurrency": 2}
    store = MemorySessionStore()
    flaky = CountingModel()
    flaky.fail = {"item-1"}
    await stopped_after(store, config, calls=14, model=flaky)
    held = await ledgered(store)
    assert ("b0", "r0") in held and ("b0", "r1") not in held

    model, _, doc = await resume(store)

    assert model.calls["item-1"] == 1 and "item-0" not in model.calls
    assert states(doc) == states(await uninterrupted(config))


async def test_a_failed_turn_resumes_from_where_it_began_reusing_every_branch() -> None:
    config = {"n": 25, "mode": "reducer", "explode": True}
    store = MemorySessionStore()
    first = CountingModel()
    reply = await engine_for(first, store).run("LedgerFlow", "go", SESSION, config,
                                               run_id="first")
    assert reply.error_code == "internal" and "after the join" in reply.message
    aborted = await store.load(SESSION)
    assert aborted is not None and aborted.run_status == "aborted"
    assert len(await ledgered(store)) == 25

    Fan.explode = False
    try:
        model, events, doc = await resume(store)
    finally:
        Fan.explode = True
    assert not model.calls  # every branch came from the ledger
    assert sum(isinstance(e, ev.BranchReused) for e in events) == 25
    assert doc.run_status == "running" and doc.revision == aborted.revision + 1
    assert doc.tokens == first_tokens(first)
    reference = await uninterrupted({"n": 25, "mode": "reducer"})
    assert states(doc) == states(reference)


def first_tokens(model: CountingModel) -> TokenUsage:
    """The tokens of the calls ``model`` answered (7 each), as a session counts them."""
    calls = sum(model.calls.values())
    return TokenUsage(input_tokens=3 * calls, output_tokens=4 * calls, total_tokens=7 * calls)


async def test_a_request_whose_digest_changed_runs_again_and_says_why() -> None:
    config = {"n": 12, "mode": "reducer", "max_concurrency": 2}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=9)
    held = await ledgered(store)
    assert ("b0", "r3") in held

    Fan.variant = {3: "item-3-changed"}
    model, events, doc = await resume(store)

    assert model.calls["item-3-changed"] == 1 and "item-3" not in model.calls
    (rerun,) = [e for e in events if isinstance(e, ev.BranchStarted) and e.rerun]
    assert rerun.key == "r3" and "changed" in (rerun.rerun or "")
    assert "r3" not in {e.key for e in events if isinstance(e, ev.BranchReused)}
    notes = states(doc)["Researcher"]["notes"]
    assert notes[3] == "r3:answer(item-3-changed)"


async def test_a_resumed_nested_barrier_reuses_whole_subtrees() -> None:
    config = {"n": 10, "mode": "nested", "max_concurrency": 2}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=16)
    assert isinstance(store, BranchLedgerStore)
    found = await store.ledger_load(SESSION)
    assert found is not None
    outer = {e.index for e in found[1] if e.barrier == "b0"}
    inner = {(e.barrier, e.key) for e in found[1] if e.barrier != "b0"}
    assert outer and len(outer) < 10
    assert any(b == f"{i}/b0" for i in outer for b, _ in inner)

    model, events, doc = await resume(store)

    expected: dict[str, int] = {}
    for i in set(range(10)) - outer:
        expected[f"item-{i}"] = 1
        for j in range(3):
            if (f"{i}/b0", f"a{j}") not in inner:
                expected[f"r{i}.{j}-{j}"] = 1
    assert dict(model.calls) == expected  # a reused branch's inner branches never ran
    # Reused subtrees open no inner barrier; the others reuse their ledgered inner branches.
    forked = {e.barrier for e in events if isinstance(e, ev.BarrierForked)}
    assert forked == {"b0", *(f"{i}/b0" for i in set(range(10)) - outer)}
    reference = await uninterrupted(config)
    assert states(doc) == states(reference)
    assert doc.tokens == reference.tokens


async def test_resume_needs_a_ledgered_turn_and_ledger_true_needs_a_ledger_store() -> None:
    store = MemorySessionStore()
    reply = await engine_for(CountingModel(), store).resume(SESSION)
    assert (reply.success, reply.error_code) == (False, "nothing_to_resume")

    plain = PlainStore()
    model = CountingModel()
    reply = await engine_for(model, plain).run("LedgerFlow", "go", SESSION,
                                               {"n": 2, "mode": "reducer"})
    assert reply.message == "invalid"  # the fork raised; the flow caught it
    error = states(await plain.load(SESSION))["Fan"]
    assert error["error"] == "ParallelConfigurationError"
    assert "BranchLedgerStore" in error["message"]
    assert not model.calls  # raised at the fork: no branch ran
    reply = await engine_for(CountingModel(), PlainStore()).resume(SESSION)
    assert reply.error_code == "nothing_to_resume"


async def test_a_turn_that_goes_past_an_interrupted_one_drops_its_ledger() -> None:
    config = {"n": 10, "mode": "reducer", "max_concurrency": 2}
    store = MemorySessionStore()
    await stopped_after(store, config, calls=5)
    assert await ledgered(store)
    reply = await engine_for(CountingModel(), store).run("LedgerFlow", "again", SESSION,
                                                         {"n": 1, "mode": "reducer"})
    assert reply.success, reply.message
    # Resuming now would run the old message over the newer session: there is no offer.
    assert await store.ledger_load(SESSION) is None
    reply = await engine_for(CountingModel(), store).resume(SESSION)
    assert reply.error_code == "nothing_to_resume"


async def test_the_ledger_survives_the_sqlite_store_being_reopened(tmp_path: Any) -> None:
    path = tmp_path / "sessions.db"
    config = {"n": 16, "mode": "reducer", "max_concurrency": 2}
    store = SQLiteSessionStore(path)
    await stopped_after(store, config, calls=9)
    held = await ledgered(store)
    await store.close()

    reopened = SQLiteSessionStore(path)
    try:
        model, _, doc = await resume(reopened)
    finally:
        await reopened.close()
    assert set(model.calls) == {f"item-{i}" for i in range(16)} - set(held.values())
    assert states(doc) == states(await uninterrupted(config))


class BrokenLedgerStore(MemorySessionStore):
    """A store whose ledger writes fail (a full disk, say); everything else works."""

    async def ledger_put(self, session_id: str, turn_id: str,
                         entries: Sequence[LedgerEntry]) -> None:
        raise SessionStoreError("the ledger's disk is full")


async def test_a_failing_ledger_write_never_fails_the_turn_and_a_resume_runs_everything(
        caplog: pytest.LogCaptureFixture) -> None:
    config = {"n": 10, "mode": "reducer", "max_concurrency": 2}
    store = BrokenLedgerStore()
    await stopped_after(store, config, calls=7)
    found = await store.ledger_load(SESSION)
    assert found is not None and found[1] == []  # the turn's record, no entry
    assert "the ledger's disk is full" in caplog.text

    model, events, doc = await resume(store)

    assert dict(model.calls) == {f"item-{i}": 1 for i in range(10)}
    assert not any(isinstance(e, ev.BranchReused) for e in events)
    assert states(doc) == states(await uninterrupted(config))


class PlainStore:
    """A user's own store: the session port only, no ledger."""

    def __init__(self) -> None:
        self._inner = MemorySessionStore()

    async def load(self, session_id: str) -> SessionDocument | None:
        return await self._inner.load(session_id)

    async def create(self, doc: SessionDocument) -> SessionDocument:
        return await self._inner.create(doc)

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        return await self._inner.save(doc, expected_revision)

    async def delete(self, session_id: str, expected_revision: int | None = None) -> bool:
        return await self._inner.delete(session_id, expected_revision)

    async def close(self) -> None:
        await self._inner.close()


def test_no_barrier_option_leaks_into_existing_traces() -> None:
    """An unset ``ledger`` option is not serialised: traces of unledgered barriers are
    byte for byte what they were."""
    assert "ledger" not in BarrierOptions().model_dump(mode="json")
    assert BarrierOptions(ledger=True).model_dump(mode="json")["ledger"] is True
    with pytest.raises(ParallelConfigurationError):
        barrier_options(ledger="sometimes")
