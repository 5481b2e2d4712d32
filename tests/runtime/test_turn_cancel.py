"""Stopping a whole turn: ``FlowEngine.run(..., cancel=token)`` and ``token.cancel()``.

The token reaches every barrier of the turn (queued branches never start, running ones are
told and get the grace period), the step gets the same grace to return, then is cancelled
hard; the turn ends with ``turn.cancelled``, never finished or failed, and the session
stays at its last saved revision (a barrier's own root-join checkpoint included), ready
for the next turn. Also: the engine-wide cap on branches per turn.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, ClassVar

import anyio
import pytest

from runtime import (
    CancelToken,
    Flow,
    FlowEngine,
    LogicStep,
    ParallelBatchResult,
    ParallelConfig,
    ParallelConfigurationError,
    ParallelLimitError,
    Routable,
    Rule,
    RunReply,
    ScriptedModel,
    Step,
    Transition,
    stay,
    tool,
)
from runtime import events as ev
from runtime.events import CallbackSink, EventSink, MemorySink
from tests.runtime.barrier_helpers import U, branch_step, swallowing_once, user_state, wait
from tests.runtime.helpers import GateModel, RecordingStore, ScriptedFlow, load

pytestmark = pytest.mark.anyio

Script = Callable[[Step], Awaitable[Routable]]


class Desk(LogicStep):
    """The top-level step: plays the flow's next script (one per turn)."""

    async def run_logic(self) -> Routable:
        scripts: list[Script] = type(self.flow).scripts  # type: ignore[attr-defined]
        return await scripts.pop(0)(self)


def desk_flow(scripts: Sequence[Script], *branches: type[Step],
              config: ParallelConfig | None = None) -> type[Flow]:
    """A flow whose :class:`Desk` plays ``scripts`` in turn order, with ``branches``."""

    class StopFlow(ScriptedFlow):
        def define_steps(self) -> list[type[Step]]:
            return [Desk, *branches]

        def config_parallel_execution(self) -> ParallelConfig:
            return config or ParallelConfig()

    StopFlow.scripts = list(scripts)  # type: ignore[attr-defined]
    return StopFlow


class Harness:
    """One engine with a recording sink and store; runs turns, keeps their events."""

    def __init__(self, flow: type[Flow], *, sinks: Sequence[EventSink] = (),
                 **engine: Any) -> None:
        self.sink = MemorySink()
        self.store = RecordingStore()
        self.flow = flow
        engine.setdefault("providers", {"scripted": ScriptedModel()})  # branches: no calls
        self.engine = FlowEngine(flows=[flow], store=self.store, sinks=[self.sink, *sinks],
                                 ship_to_dashboard=False, **engine)

    async def run(self, session_id: str | None = None, *, cancel: CancelToken | None = None,
                  stop: Callable[[], Awaitable[None]] | None = None,
                  run_id: str | None = None) -> RunReply:
        """One turn; ``stop`` runs beside it (the canceller, as a Stop button would be)."""
        async with anyio.create_task_group() as tg:
            if stop is not None:
                tg.start_soon(stop)
            reply = await self.engine.run(self.flow.id, "go", session_id, run_id=run_id,
                                          cancel=cancel)
            tg.cancel_scope.cancel()
        return reply

    def events(self, run_id: str) -> list[ev.Event]:
        return [e for e in self.sink.events if e.run_id == run_id]

    def types(self, run_id: str) -> list[str]:
        return [e.type for e in self.events(run_id)]


def stopper(token: CancelToken, ready: Iterable[anyio.Event], reason: str,
            by: str | None = None) -> Callable[[], Awaitable[None]]:
    """Cancel ``token`` once every ``ready`` event is set."""

    async def stop() -> None:
        for event in ready:
            await wait(event)
        token.cancel(reason, by)

    return stop


def stopped(reply: RunReply, reason: str, session_id: str) -> None:
    assert reply == RunReply(success=False, completed=False, message=f"Stopped: {reason}",
                             session_id=session_id, content_type="text/plain",
                             error_code="turn_cancelled")


def only(events: list[ev.Event], kind: type[Any]) -> Any:
    (found,) = [e for e in events if isinstance(e, kind)]
    return found


# -- the token -------------------------------------------------------------------------------


def test_a_token_records_who_asked_and_passes_it_on_with_the_reason() -> None:
    parent = CancelToken()
    child = CancelToken(parent)
    assert (parent.requested_by, child.requested_by) == (None, None)
    parent.cancel("stop pressed", by="ada")
    parent.cancel("again", "bob")  # the first request stays
    late = CancelToken(parent)  # linked after the fact: cancelled at once, alike
    assert [(t.reason, t.requested_by) for t in (parent, child, late)] == [
        ("stop pressed", "ada")] * 3
    anonymous = CancelToken()
    anonymous.cancel()
    assert (anonymous.reason, anonymous.requested_by) == ("cancelled", None)


# -- stopping mid-barrier ----------------------------------------------------------------------


async def test_stopping_a_turn_mid_barrier_ends_it_cancelled_at_its_last_saved_revision(
) -> None:
    token = CancelToken()
    entered = {"a": anyio.Event(), "b": anyio.Event()}
    reported = anyio.Event()
    started: list[str] = []
    told: dict[str, tuple[str | None, str | None]] = {}
    seen: dict[str, Any] = {}

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.CancelPropagated):
            reported.set()

    async def index(step: Step, message: str | None) -> Any:
        step.save_state({"indexed": True})
        return "indexed"

    async def work(step: Step, message: str | None) -> Any:
        inv = step.parallel_invocation()
        started.append(inv.key)
        entered[inv.key].set()
        with anyio.fail_after(5):
            await inv.cancel.wait()
        # The barrier's watcher wakes with the branches; on trio either may go first, so
        # the branches wait for its report to keep the order of events fixed.
        await wait(reported)
        told[inv.key] = (inv.cancel.reason, inv.cancel.requested_by)
        step.save_state({inv.key: "partial"})
        return f"{inv.key} stopped"

    Indexer, Worker = branch_step("Indexer", index), branch_step("Worker", work)

    async def greet(desk: Step) -> Routable:
        desk.save_state({"greeted": True})
        return "hello"

    async def sweep(desk: Step) -> Routable:
        await desk.run_steps([{"step": Indexer}], checkpoint="root-join")
        seen["batch"] = await desk.run_steps(
            [{"step": Worker, "key": key} for key in "abc"], max_concurrency=2)
        desk.save_state({"swept": True})  # after the stop: never saved
        return "swept"

    async def again(desk: Step) -> Routable:
        flow = desk.flow
        return (f"indexed={flow.get_step_state(Indexer, 'indexed')} "
                f"worker={flow.read_step_state(Worker)} swept={desk.get_state().get('swept')}")

    harness = Harness(desk_flow([greet, sweep, again], Indexer, Worker),
                      sinks=[CallbackSink(on_event)])
    first = await harness.run(run_id="t1")
    sid = first.session_id
    before = await load(harness.engine, sid)

    reply = await harness.run(sid, cancel=token, run_id="t2",
                              stop=stopper(token, entered.values(), "user pressed stop", "ada"))

    stopped(reply, "user pressed stop", sid)
    events, types = harness.events("t2"), harness.types("t2")
    assert (types[0], types[-1]) == ("turn.started", "turn.cancelled")
    assert not {"turn.finished", "turn.failed"} & set(types)
    requested = types.index("cancel.requested")
    outcomes = [i for i, e in enumerate(events)
                if isinstance(e, ev.BranchFulfilled | ev.BranchRejected) and e.barrier == "b1"]
    assert len(outcomes) == 3 and requested < min(outcomes) and max(outcomes) < len(types) - 1
    propagated = only(events, ev.CancelPropagated)
    assert (propagated.barrier, propagated.running, propagated.queued) == (
        "b1", ["1:0", "1:1"], ["1:2"])
    # The queued branch never started; the running ones were told who asked, and returned.
    assert started == ["a", "b"]
    assert told == {"a": ("user pressed stop", "ada"), "b": ("user pressed stop", "ada")}
    queued = only(events, ev.BranchRejected)
    assert (queued.key, queued.started, queued.cancelled) == ("c", False, True)
    batch: ParallelBatchResult = seen["batch"]
    assert batch.cancelled and [b.status for b in batch.branches] == [
        "fulfilled", "fulfilled", "rejected"]

    # Saved: the barrier's checkpoint, nothing after the stop.
    saves = [(e.reason, e.revision) for e in events if isinstance(e, ev.SessionSaved)]
    assert [reason for reason, _ in saves] == ["checkpoint"]
    cancelled = events[-1]
    assert isinstance(cancelled, ev.TurnCancelled)
    assert (cancelled.path, cancelled.reason, cancelled.requested_by) == (
        "", "user pressed stop", "ada")
    doc = await load(harness.engine, sid)
    assert doc.revision == cancelled.revision == saves[-1][1] == before.revision + 1
    assert doc.run_status == "running"
    assert {r.name: user_state(r.state) for r in doc.flow.steps} == {
        "Desk": {"greeted": True}, "Indexer": {"indexed": True}}

    # The fold: cancelled; its state is what the store holds, and what was published in
    # memory beyond it is kept apart, unsaved.
    run = ev.fold(events)
    assert (run.status, run.reply, run.error) == ("cancelled", None, None)
    assert run.cancellation == {"seq": cancelled.seq, "reason": "user pressed stop",
                                "requested_by": "ada", "revision": cancelled.revision}
    assert {step: user_state(fields) for step, fields in run.state.items()} == {
        r.name: user_state(r.state) for r in doc.flow.steps}
    assert "Worker" not in run.state
    assert {(u["step"], u["field"]): u["value"] for u in run.unsaved} == {
        ("Worker", "a"): "partial", ("Worker", "b"): "partial", ("Desk", "swept"): True}

    # The session takes its next turn from the saved revision.
    third = await harness.run(sid, run_id="t3")
    assert (third.success, third.message) == (True, "indexed=True worker={} swept=None")
    assert harness.types("t3")[-1] == "turn.finished"
    assert (await load(harness.engine, sid)).revision > doc.revision


async def test_a_barrier_forked_after_the_stop_starts_cancelled() -> None:
    token = CancelToken()
    waiting = anyio.Event()
    started: list[str] = []

    async def record(step: Step, message: str | None) -> Any:
        started.append(step.parallel_invocation().key)

    W = branch_step("W", record)

    async def late_fork(desk: Step) -> Routable:
        waiting.set()
        with anyio.fail_after(5):
            await token.wait()
        batch = await desk.run_steps([{"step": W, "key": "x"}, {"step": W, "key": "y"}])
        return f"{[b.status for b in batch.branches]} cancelled={batch.cancelled}"

    harness = Harness(desk_flow([late_fork], W))
    reply = await harness.run(cancel=token, run_id="late",
                              stop=stopper(token, [waiting], "closing"))
    stopped(reply, "closing", reply.session_id)
    assert started == []
    events = harness.events("late")
    rejected = [(e.key, e.started, e.cancelled) for e in events
                if isinstance(e, ev.BranchRejected)]
    assert rejected == [("x", False, True), ("y", False, True)]
    assert "branch.started" not in harness.types("late")
    assert only(events, ev.CancelRequested).reason == "closing"


# -- stopped before it began ---------------------------------------------------------------------


async def test_a_token_fired_before_the_turn_starts_stops_it_before_it_touches_the_session(
) -> None:
    ran: list[str] = []

    async def count(desk: Step) -> Routable:
        ran.append("ran")
        return "counted"

    harness = Harness(desk_flow([count, count]))
    first = await harness.run(run_id="t1")
    sid = first.session_id
    before = await load(harness.engine, sid)
    saves = len(harness.store.saved)

    token = CancelToken()
    token.cancel("cancelled while queued", "ada")
    reply = await harness.run(sid, cancel=token, run_id="t2")
    stopped(reply, "cancelled while queued", sid)
    assert harness.types("t2") == ["turn.started", "turn.cancelled"]
    cancelled = harness.events("t2")[-1]
    assert isinstance(cancelled, ev.TurnCancelled)
    assert (cancelled.requested_by, cancelled.revision) == ("ada", before.revision)
    assert ran == ["ran"]  # only the first turn ran its step
    assert len(harness.store.saved) == saves  # nothing was saved, not even a restore
    assert (await load(harness.engine, sid)).revision == before.revision

    # A new session stopped before it began is never created.
    fresh = await harness.run(cancel=token, run_id="t3")
    stopped(fresh, "cancelled while queued", "")
    (started, ended) = harness.events("t3")
    assert isinstance(ended, ev.TurnCancelled) and ended.revision == 0
    assert await harness.engine.store.load(started.session_id) is None


# -- the hard stop ---------------------------------------------------------------------------


async def test_a_step_that_ignores_the_stop_is_cancelled_hard_after_the_grace() -> None:
    token = CancelToken()
    waiting = anyio.Event()
    marks: list[str] = []

    async def stubborn(desk: Step) -> Routable:
        waiting.set()
        try:
            await anyio.Event().wait()  # never set, never looks at the token
        except anyio.get_cancelled_exc_class():
            marks.append("cancelled hard")
            raise
        return "unreachable"

    async def stop() -> None:
        await wait(waiting)
        token.cancel("stop")
        marks.append("stop sent")

    harness = Harness(desk_flow([stubborn], config=ParallelConfig(cancellation_grace=U)))
    reply = await harness.run(cancel=token, run_id="hard", stop=stop)
    stopped(reply, "stop", reply.session_id)
    assert marks == ["stop sent", "cancelled hard"]
    types = harness.types("hard")
    assert (types[0], types[-1]) == ("turn.started", "turn.cancelled")
    assert not {"turn.finished", "turn.failed"} & set(types)
    doc = await load(harness.engine, reply.session_id)
    assert (doc.run_status, doc.revision) == ("running", harness.events("hard")[-1].revision)


async def test_a_top_level_model_call_in_flight_is_stopped_by_the_hard_stop() -> None:
    token = CancelToken()
    model = GateModel()  # never released: the call would wait for ever

    class Talker(Step):
        pass

    class TalkFlow(ScriptedFlow):
        def define_steps(self) -> list[type[Step]]:
            return [Talker]

        def config_parallel_execution(self) -> ParallelConfig:
            return ParallelConfig(cancellation_grace=U)

    harness = Harness(TalkFlow, providers={"scripted": model})
    reply = await harness.run(cancel=token, run_id="talk",
                              stop=stopper(token, [model.entered], "too slow"))
    stopped(reply, "too slow", reply.session_id)
    assert len(model.requests) == 1
    types = harness.types("talk")
    assert "model.started" in types and types[-1] == "turn.cancelled"
    assert not {"model.finished", "model.failed", "turn.failed"} & set(types)


async def test_a_stubborn_branch_closes_at_the_grace_before_the_step_is_stopped_hard() -> None:
    token = CancelToken()
    entered = anyio.Event()
    marks: list[str] = []

    async def stubborn(step: Step, message: str | None) -> Any:
        step.save_state({"early": 1})
        entered.set()
        await anyio.sleep(100 * U)  # ignores the token
        return "never"

    Late = branch_step("Late", stubborn)

    async def fork_then_hang(desk: Step) -> Routable:
        batch = await desk.run_steps([{"step": Late}])
        marks.append(f"barrier returned: {batch.branches[0].status}")
        try:
            await anyio.Event().wait()
        except anyio.get_cancelled_exc_class():
            marks.append("cancelled hard")
            raise
        return "unreachable"

    harness = Harness(desk_flow([fork_then_hang], Late,
                                config=ParallelConfig(cancellation_grace=2 * U)))
    reply = await harness.run(cancel=token, run_id="late",
                              stop=stopper(token, [entered], "enough"))
    stopped(reply, "enough", reply.session_id)
    # The barrier closed its late branch and published before the step was cut off.
    assert marks == ["barrier returned: rejected", "cancelled hard"]
    types = harness.types("late")
    order = [types.index(t) for t in ("cancel.requested", "cancel.grace_expired",
                                      "branch.rejected", "join.published", "turn.cancelled")]
    assert order == sorted(order) and order[-1] == len(types) - 1


async def test_a_branch_that_swallows_its_cancellation_cannot_keep_a_stopped_turn_open(
) -> None:
    """The hard stop waits for the turn's root barriers to close; on asyncio a branch's
    cancellation is delivered once, so the barrier cancels a late branch again."""
    token = CancelToken()
    entered = anyio.Event()
    swallowed: list[str] = []
    Late = branch_step("Late", swallowing_once(entered, swallowed))

    async def fork(desk: Step) -> Routable:
        await desk.run_steps([{"step": Late}])
        return "unreachable"

    harness = Harness(desk_flow([fork], Late, config=ParallelConfig(cancellation_grace=U)))
    with anyio.fail_after(5):  # not a timing bound: without the re-cancel it never ends
        reply = await harness.run(cancel=token, run_id="swallow",
                                  stop=stopper(token, [entered], "enough"))
    stopped(reply, "enough", reply.session_id)
    assert swallowed == ["once"]
    rejected = only(harness.events("swallow"), ev.BranchRejected)
    assert rejected.cancelled and rejected.started


# -- cancellation is not failure -------------------------------------------------------------


async def test_an_error_the_stop_causes_in_the_step_is_not_a_failure() -> None:
    token = CancelToken()
    waiting = anyio.Event()
    W = branch_step("W", lambda step, message: anyio.lowlevel.checkpoint())

    async def careless(desk: Step) -> Routable:
        waiting.set()
        with anyio.fail_after(5):
            await token.wait()
        batch = await desk.run_steps([{"step": W}])
        return str(batch.fulfilled[0].output)  # IndexError: nothing was fulfilled

    harness = Harness(desk_flow([careless], W))
    reply = await harness.run(cancel=token, run_id="careless",
                              stop=stopper(token, [waiting], "stop"))
    stopped(reply, "stop", reply.session_id)
    assert "turn.failed" not in harness.types("careless")
    doc = await load(harness.engine, reply.session_id)
    assert (doc.run_status, doc.error) == ("running", [])


async def test_a_stopped_turn_makes_no_further_model_call() -> None:
    token = CancelToken()
    entered = anyio.Event()

    async def leaf(step: Step, message: str | None) -> Any:
        entered.set()
        with anyio.fail_after(5):
            await step.parallel_invocation().cancel.wait()
        return "stopped"

    Leaf = branch_step("Leaf", leaf)

    class Chat(Step):
        @tool
        async def fan_out(self) -> Transition:
            """Fork one leaf."""
            batch = await self.run_steps([{"step": Leaf}])
            return stay(f"leaf: {batch.branches[0].output}")  # would ask the model again

    class ChatFlow(ScriptedFlow):
        def define_steps(self) -> list[type[Step]]:
            return [Chat, Leaf]

    model = ScriptedModel([Rule(step="Chat", last_type="tool", text="never asked"),
                           Rule(step="Chat", tools=[("fan_out", {})])])
    harness = Harness(ChatFlow, providers={"scripted": model})
    reply = await harness.run(cancel=token, run_id="chat",
                              stop=stopper(token, [entered], "stop"))
    stopped(reply, "stop", reply.session_id)
    assert len(model.requests) == 1
    types = harness.types("chat")
    assert (types.count("model.started"), types.count("tool.finished")) == (1, 1)
    assert types[-1] == "turn.cancelled" and "turn.failed" not in types


# -- from another thread ---------------------------------------------------------------------


def _waiting_flow(waiting: anyio.Event, token: CancelToken) -> type[Flow]:
    async def wait_for_stop(desk: Step) -> Routable:
        waiting.set()
        with anyio.fail_after(5):
            await token.wait()
        return "saw the stop"

    return desk_flow([wait_for_stop])


async def test_a_thread_can_stop_the_turn_through_anyio() -> None:
    token, waiting = CancelToken(), anyio.Event()

    async def stop() -> None:
        await wait(waiting)
        await anyio.to_thread.run_sync(anyio.from_thread.run_sync, token.cancel,
                                       "from a thread", "worker-1")

    harness = Harness(_waiting_flow(waiting, token))
    reply = await harness.run(cancel=token, run_id="thread", stop=stop)
    stopped(reply, "from a thread", reply.session_id)
    assert harness.events("thread")[-1].requested_by == "worker-1"  # type: ignore[union-attr]


async def test_a_worker_thread_can_stop_the_turn_through_the_asyncio_loop(
    anyio_backend: str,
) -> None:
    if anyio_backend != "asyncio":
        pytest.skip("call_soon_threadsafe belongs to asyncio's loop")
    token, waiting = CancelToken(), anyio.Event()
    loop = asyncio.get_running_loop()

    async def stop() -> None:
        await wait(waiting)
        # What a dashboard worker does: positional arguments only.
        worker = threading.Thread(target=loop.call_soon_threadsafe,
                                  args=(token.cancel, "worker shutting down", "worker-2"))
        worker.start()
        await anyio.to_thread.run_sync(worker.join)

    harness = Harness(_waiting_flow(waiting, token))
    reply = await harness.run(cancel=token, run_id="loop", stop=stop)
    stopped(reply, "worker shutting down", reply.session_id)
    cancelled = harness.events("loop")[-1]
    assert isinstance(cancelled, ev.TurnCancelled)
    assert (cancelled.reason, cancelled.requested_by) == ("worker shutting down", "worker-2")


# -- the engine's cap on branches ----------------------------------------------------------------


class _Capped:
    W: ClassVar[type[Step]] = branch_step("W", lambda step, message: anyio.lowlevel.checkpoint())


async def test_the_engine_caps_the_branches_of_a_turn_below_the_flow_limit() -> None:
    errors: list[ParallelLimitError] = []

    async def fork_three_times(desk: Step) -> Routable:
        for n in (2, 1):
            await desk.run_steps([{"step": _Capped.W, "key": f"{n}-{i}"} for i in range(n)])
        try:
            await desk.run_steps([{"step": _Capped.W, "key": "one too many"}])
        except ParallelLimitError as exc:
            errors.append(exc)
        return "forked"

    harness = Harness(desk_flow([fork_three_times, fork_three_times], _Capped.W),
                      max_invocations=3)
    first = await harness.run(run_id="t1")
    assert (first.success, first.message) == (True, "forked")
    (error,) = errors
    assert "engine's limit of 3 invocations per turn" in error.message
    assert "FlowEngine(max_invocations=3) caps the flow's 256" in error.message
    assert error.extra == {"limit": 3, "used": 3, "requested": 1, "source": "engine"}
    # The budget is per turn: the next one forks as many again.
    second = await harness.run(first.session_id, run_id="t2")
    assert second.success and len(errors) == 2
    assert harness.types("t2").count("branch.fulfilled") == 3


async def test_a_flow_limit_below_the_engine_cap_is_the_one_named() -> None:
    errors: list[ParallelLimitError] = []

    async def fork(desk: Step) -> Routable:
        try:
            await desk.run_steps([{"step": _Capped.W, "key": str(i)} for i in range(3)])
        except ParallelLimitError as exc:
            errors.append(exc)
        return "tried"

    harness = Harness(desk_flow([fork], _Capped.W, config=ParallelConfig(max_invocations=2)),
                      max_invocations=10)
    assert (await harness.run()).success
    (error,) = errors
    assert "flow's limit of 2 invocations per turn (0 used)" in error.message
    assert error.extra["source"] == "flow"
    assert "branch.started" not in {e.type for e in harness.sink.events}


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_the_engine_cap_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ParallelConfigurationError, match="max_invocations"):
        FlowEngine(max_invocations=bad, ship_to_dashboard=False)
