"""The event schema contract: the committed JSON Schema, coverage of every event type, and
the invariants every recorded run keeps.

The runs checked are the committed goldens plus a few small runs made here for what the
demos never do: a retried and a refused model call, removals, root-join checkpoints that
save and fail, a sink that overflows, secret model params and a very large state value.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    MemorySessionStore,
    ModelBlockedError,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ModelTransportError,
    ParallelCheckpointError,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    SessionDocument,
    SessionStoreError,
    Step,
)
from runtime import events as ev
from runtime.events import (
    BoundedSink,
    CallbackSink,
    EventSink,
    JsonlSink,
    MemorySink,
    dump_event,
    read_jsonl,
    runs_of,
)
from runtime.events.sinks import event_json
from tests.golden.goldens import GOLDENS

pytestmark = pytest.mark.anyio

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "static/picoflow_web/schema/events.schema.json"
SECRET = "sk-secret"
BIG = 200_000


@pytest.fixture
def anyio_backend() -> str:
    """These runs make no timing claims; one backend keeps the cached runs simple."""
    return "asyncio"


# -- small flows for the event types the demos never produce -----------------------------------


class ProbeFlow(Flow):
    """Base of the probe flows: a scripted selection, no pause between attempts."""

    retry_delay = 0.0

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="probe")


class Echo(Step):
    """One model call."""


class EchoFlow(ProbeFlow):
    def define_steps(self) -> list[Step]:
        return [Echo(self)]


class SecretFlow(ProbeFlow):
    """Model params carry an API key, at flow and at step level."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="probe",
                              params={"api_key": SECRET, "temperature": 0})

    def define_steps(self) -> list[Step]:
        return [Echo(self).use_model({"provider": "scripted", "name": "probe",
                                      "params": {"api_key": SECRET, "top_p": 1}})]


class FlakyModel:
    """Fails the first attempt with a transport error, then answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            raise ModelTransportError("connection reset by peer")
        return ModelResponse(content="echo")


class RefusingModel:
    """Always refuses: with no recovery hook, the turn fails."""

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        raise ModelBlockedError("the provider refused to answer")


class FailingStore(MemorySessionStore):
    """A store whose saves fail while ``failing`` is set."""

    failing = False

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        if self.failing:
            raise SessionStoreError("disk full")
        return await super().save(doc, expected_revision)


class Pruner(LogicStep):
    """A branch that removes one field and replaces another."""

    async def run_logic(self) -> Routable:
        self.remove_state("stale")
        self.save_state({"fresh": f"from branch {self.parallel_invocation().path_str}"})
        return "pruned"


class Keeper(LogicStep):
    """Removes canonically, then forks two root-join checkpointed barriers; the second's
    save fails and is rolled back."""

    async def run_logic(self) -> Routable:
        self.save_state({"keep": 1, "drop": 2})
        self.remove_state("drop")
        self.flow.save_step_state(Pruner, {"stale": "old", "fresh": "new"})
        await self.run_steps([RunStepRequest(Pruner)], checkpoint="root-join")
        store = self.flow.require_engine().store
        assert isinstance(store, FailingStore)
        store.failing = True
        try:
            await self.run_steps([RunStepRequest(Pruner)], checkpoint="root-join")
        except ParallelCheckpointError:
            return "checkpoint failed and was rolled back"
        finally:
            store.failing = False
        return "checkpoint unexpectedly saved"


class CheckpointFlow(ProbeFlow):
    def define_steps(self) -> list[Step]:
        return [Keeper(self), Pruner(self)]


class Hoarder(LogicStep):
    """Saves a value far larger than an event may carry."""

    async def run_logic(self) -> Routable:
        self.save_state({"blob": "x" * BIG, "small": 1})
        return "saved"


class HoarderFlow(ProbeFlow):
    def define_steps(self) -> list[Step]:
        return [Hoarder(self)]


async def _run(flow: type[Flow], model: Any, name: str, *, store: Any = None,
               sinks: Sequence[EventSink] = ()) -> list[ev.Event]:
    memory = MemorySink()
    engine = FlowEngine(flows=[flow], providers={"scripted": model},
                        store=store or MemorySessionStore(), sinks=[memory, *sinks])
    await engine.run(flow.id, "hello", f"probe-{name}", run_id=f"probe-{name}")
    return memory.events


def _overflow_sinks() -> list[EventSink]:
    bounded = BoundedSink("bounded", capacity=2)

    def drain(event: ev.Event) -> None:
        if event.seq == 5:  # a consumer catching up once, mid-run
            bounded.drain()

    return [bounded, CallbackSink(drain, "drainer")]


_EXTRA: dict[str, list[ev.Event]] = {}


async def extra_runs() -> dict[str, list[ev.Event]]:
    """The probe runs by name, made once per test session."""
    if not _EXTRA:
        _EXTRA["retry"] = await _run(EchoFlow, FlakyModel(), "retry")
        _EXTRA["refused"] = await _run(EchoFlow, RefusingModel(), "refused")
        _EXTRA["checkpoint"] = await _run(CheckpointFlow, ScriptedModel(), "checkpoint",
                                          store=FailingStore())
        _EXTRA["overflow"] = await _run(EchoFlow, ScriptedModel([Rule(text="echo")]),
                                        "overflow", sinks=_overflow_sinks())
        _EXTRA["secret"] = await _run(SecretFlow, ScriptedModel([Rule(text="echo")]), "secret")
        _EXTRA["big"] = await _run(HoarderFlow, ScriptedModel(), "big")
        _EXTRA["streamed"] = await _run(EchoFlow, ScriptedModel(
            [Rule(text="echo, streamed")], latency=0.002, stream=2), "streamed")
    return _EXTRA


async def all_runs() -> dict[str, list[ev.Event]]:
    """Every recorded run — the goldens' committed ones and the probes — by run id."""
    runs: dict[str, list[ev.Event]] = {}
    for golden in GOLDENS:
        runs.update(runs_of(read_jsonl(golden.jsonl_path)))
    for events in (await extra_runs()).values():
        runs.update(runs_of(events))
    return runs


# -- the schema ----------------------------------------------------------------------------------


def test_the_committed_json_schema_is_the_generated_one() -> None:
    committed = json.loads(SCHEMA_FILE.read_text("utf-8"))
    assert committed == ev.json_schema(), (
        "regenerate: .venv/bin/python -m runtime schema > "
        "static/picoflow_web/schema/events.schema.json")


async def test_every_event_type_is_produced_and_validates_strictly() -> None:
    produced: set[str] = set()
    for events in (await all_runs()).values():
        for event in events:
            line = dump_event(event)
            assert dump_event(ev.parse_event(line)) == line
            produced.add(event.type)
    assert produced == set(ev.EVENT_TYPES)


async def test_the_probes_produce_what_they_are_for() -> None:
    runs = await extra_runs()

    def types(name: str) -> list[str]:
        return [e.type for e in runs[name]]

    retried = [e for e in runs["retry"] if isinstance(e, ev.ModelFailed)]
    assert [(e.attempt, e.retrying, e.error.code) for e in retried] == [
        (1, True, "model_transport")]
    assert types("retry")[-1] == "turn.finished"
    assert "turn.failed" in types("refused")
    assert types("checkpoint").count("checkpoint.saved") == 1
    (failed,) = [e for e in runs["checkpoint"] if isinstance(e, ev.CheckpointFailed)]
    assert failed.error.code == "parallel_checkpoint"
    removed = {(e.step, e.field, e.draft) for e in runs["checkpoint"]
               if isinstance(e, ev.StateRemoved)}
    assert removed == {("Keeper", "drop", False), ("Pruner", "stale", True)}
    (overflow,) = [e for e in runs["overflow"] if isinstance(e, ev.SinkOverflowed)]
    assert (overflow.sink, overflow.first_seq, overflow.last_seq, overflow.dropped) == (
        "bounded", 2, 5, 4)


# -- invariants over every recorded run ----------------------------------------------------------


async def test_seq_is_gap_free_from_zero_in_every_run() -> None:
    for run_id, events in (await all_runs()).items():
        assert [e.seq for e in events] == list(range(len(events))), run_id


async def test_every_path_is_announced_by_a_fork_and_started_before_use() -> None:
    for run_id, events in (await all_runs()).items():
        announced: set[str] = set()
        started: set[str] = set()
        owed: dict[str, int] = {}  # a wide fork's requests not announced yet
        for event in events:
            if isinstance(event, ev.BarrierForked | ev.BarrierRequested):
                assert event.path == "" or event.path in started, (run_id, event.seq)
                announced.update(r.path for r in event.requests)
                if isinstance(event, ev.BarrierForked):
                    owed[event.barrier] = (event.count or len(event.requests)) - len(
                        event.requests)
                else:
                    owed[event.barrier] -= len(event.requests)
            elif hasattr(event, "barrier"):  # every page of a fork before its branches
                assert owed.get(event.barrier, 0) == 0, (run_id, event.seq, event.type)
            if event.path == "":
                continue
            assert event.path in announced, (run_id, event.seq, event.path)
            if isinstance(event, ev.BranchStarted):
                started.add(event.path)
            elif isinstance(event, ev.BranchRejected) and not event.started:
                # A queued branch cancelled before it ran: its one and only event.
                assert event.path not in started, (run_id, event.seq)
            elif isinstance(event, ev.BranchReused):
                # Restored from the ledger by a resumed turn: its one and only event too.
                assert event.path not in started, (run_id, event.seq)
            else:
                assert event.path in started, (run_id, event.seq, event.type)


async def test_a_finished_turn_starts_with_turn_started_and_ends_with_turn_finished() -> None:
    checked = 0
    for run_id, events in (await all_runs()).items():
        if not any(isinstance(e, ev.TurnFinished) for e in events):
            continue
        assert events[0].type == "turn.started", run_id
        assert events[-1].type == "turn.finished", run_id
        assert [e.type for e in events].count("turn.finished") == 1, run_id
        checked += 1
    assert checked == sum(len(g.turns) - len(g.fails) - len(g.interrupted) - len(g.stops)
                          for g in GOLDENS) + len(await extra_runs()) - 1  # one refused


async def test_turn_cancelled_is_the_last_event_of_its_run_and_nothing_else_ended_it() -> None:
    checked = 0
    for run_id, events in (await all_runs()).items():
        kinds = [e.type for e in events]
        if "turn.cancelled" not in kinds:
            continue
        assert kinds[0] == "turn.started" and kinds[-1] == "turn.cancelled", run_id
        assert kinds.count("turn.cancelled") == 1, run_id
        assert not {"turn.finished", "turn.failed", "run.interrupted"} & set(kinds), run_id
        assert events[-1].path == "", run_id
        checked += 1
    assert checked == sum(len(g.stops) for g in GOLDENS)


async def test_run_interrupted_is_the_last_event_of_its_run_and_nothing_ended_it() -> None:
    checked = 0
    for run_id, events in (await all_runs()).items():
        kinds = [e.type for e in events]
        if "run.interrupted" not in kinds:
            continue
        assert kinds.index("run.interrupted") == len(kinds) - 1, run_id
        assert not {"turn.finished", "turn.failed"} & set(kinds), run_id
        assert events[-1].path == "" and events[-1].seq == events[-2].seq + 1, run_id
        checked += 1
    assert checked == sum(len(g.interrupted) for g in GOLDENS)


async def test_a_failed_turn_ends_with_turn_failed() -> None:
    events = (await extra_runs())["refused"]
    assert events[0].type == "turn.started"
    assert events[-1].type == "turn.failed"


async def test_every_sink_receives_the_events_in_seq_order() -> None:
    last = MemorySink()
    await _run(EchoFlow, ScriptedModel([Rule(text="echo")]), "order",
               sinks=[*_overflow_sinks(), last])
    assert any(isinstance(e, ev.SinkOverflowed) for e in last.events)
    assert [e.seq for e in last.events] == list(range(len(last.events)))


async def test_every_event_of_a_new_session_carries_its_id() -> None:
    memory = MemorySink()
    engine = FlowEngine(flows=[EchoFlow], providers={"scripted": ScriptedModel([
        Rule(text="echo")])}, sinks=[memory])
    reply = await engine.run(EchoFlow.id, "hello")
    assert reply.success
    assert {e.session_id for e in memory.events} == {reply.session_id}


async def test_session_loaded_truncates_a_huge_field_not_its_whole_step() -> None:
    memory = MemorySink()
    engine = FlowEngine(flows=[HoarderFlow], providers={"scripted": ScriptedModel()},
                        sinks=[memory])
    for _ in range(2):
        assert (await engine.run(HoarderFlow.id, "hello", "probe-hoard")).success
    loaded = [e for e in memory.events if isinstance(e, ev.SessionLoaded)][-1]
    assert loaded.steps["Hoarder"]["small"] == 1
    assert ev.Truncated.model_validate(loaded.steps["Hoarder"]["blob"]).size == BIG + 2


async def test_no_event_carries_an_api_key() -> None:
    runs = await extra_runs()
    lines = [dump_event(e) for e in runs["secret"]]
    started = [e for e in runs["secret"] if isinstance(e, ev.ModelStarted)]
    assert started and all(e.model["params"] == {"temperature": 0, "top_p": 1}
                           for e in started)
    assert not [line for line in lines if SECRET in line]


async def test_a_huge_state_value_travels_as_a_truncation_marker() -> None:
    (replaced, small) = [e for e in (await extra_runs())["big"]
                         if isinstance(e, ev.StateReplaced)]
    assert (small.field, small.value) == ("small", 1)
    marker = ev.Truncated.model_validate(replaced.value)
    assert marker.size == BIG + 2  # the JSON string's quotes
    assert marker.preview == '"' + "x" * 199
    assert len(dump_event(replaced)) < 1_000


# -- bad input -----------------------------------------------------------------------------------

GOOD = {"v": 1, "run_id": "r", "session_id": "s", "seq": 0, "time": 1798761600.0,
        "offset": 0.0, "path": "", "type": "turn.started", "flow": "F", "message": "hi"}


@pytest.mark.parametrize("bad", [
    {k: v for k, v in GOOD.items() if k != "flow"},
    {k: v for k, v in GOOD.items() if k != "seq"},
    {**GOOD, "type": "turn.exploded"},
    {**GOOD, "surprise": 1},
    {**GOOD, "seq": -1},
    {**GOOD, "time": "yesterday"},
], ids=["missing-field", "missing-envelope", "unknown-type", "extra-field", "negative-seq",
        "wrong-type"])
def test_malformed_events_are_rejected(bad: dict[str, Any]) -> None:
    assert ev.parse_event(json.dumps(GOOD)).type == "turn.started"
    with pytest.raises(ValidationError):
        ev.parse_event(json.dumps(bad))
    with pytest.raises(ValidationError):
        ev.parse_event(bad)


def test_read_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    good = json.dumps(GOOD)
    path.write_text("\n".join([good, "", good.replace('"seq": 0', '"seq": 1'),
                               json.dumps({**GOOD, "seq": 2, "extra": True})]) + "\n")
    with pytest.raises(ValueError, match=r"run\.jsonl:4: not a valid event"):
        read_jsonl(path)
    path.write_text(good + "\n{not json\n")
    with pytest.raises(ValueError, match=r"run\.jsonl:2: not a valid event"):
        read_jsonl(path)


def test_a_lone_surrogate_is_written_as_a_replacement_character(tmp_path: Path) -> None:
    # No UTF-8 can hold one: the serialiser raised, and the bus dropped the sink for it.
    path = tmp_path / "run.jsonl"
    jsonl, memory = JsonlSink(path), MemorySink()
    bus = ev.EventBus([jsonl, memory], run_id="r1", session_id="s1")
    bus.emit(ev.BranchStarted, "0", barrier="b0", index=0, key="k\ud800", step="S\udfffx")
    bus.emit(ev.BranchFulfilled, "0", barrier="b0", index=0, key="k", output={"t": "\ud83d"})
    jsonl.close()
    assert bus.sinks == [jsonl, memory]
    assert [e.type for e in memory.events] == ["branch.started", "branch.fulfilled"]
    started, fulfilled = read_jsonl(path)
    assert (started.key, started.step) == ("k\ufffd", "S\ufffdx")
    assert fulfilled.output == {"t": "\ufffd"}
    assert event_json(memory.events[0]).decode().count("\ufffd") == 2


@pytest.mark.parametrize("depth", [129, 300, 100_000])
def test_a_value_nested_too_deeply_travels_as_a_truncation_marker(depth: int) -> None:
    # pydantic's serialiser stops near 255 levels and json.dumps at the recursion limit:
    # the event, and the sink it went to, were lost.
    value: Any = "x"
    for _ in range(depth - 1):
        value = [value]
    marker = ev.safe_value({"v": value})
    assert marker["truncated"] is True
    assert marker["preview"].startswith('{"v": [[[') if depth < 1000 else (
        marker["preview"] == "(nested deeper than 128 levels)")
    bus = ev.EventBus([MemorySink()])
    event = bus.emit(ev.BranchFulfilled, "0", barrier="b0", index=0, key="k", output=marker)
    assert event is not None and json.loads(event_json(event))["output"] == marker
    assert ev.safe_value({"v": [[["x"]]]}) == {"v": [[["x"]]]}
