"""Streamed answers: chunks an adapter reports become coalesced ``model.delta`` events of
the attempt that wrote them, before its ``model.finished`` (or ``model.failed``)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import ModelRequest, ModelResponse, ModelTransportError, Rule, ScriptedModel, Step
from runtime import events as ev
from runtime.events import MemorySink
from runtime.streaming import DeltaCoalescer, listening, stream_delta
from tests.runtime.helpers import make_engine
from tests.runtime.test_model_loop import flow_of

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_chunks_are_coalesced_to_one_delta_per_interval_and_the_rest_flushed() -> None:
    sent: list[tuple[str, list[dict[str, Any]], int]] = []
    clock = Clock()
    coalescer = DeltaCoalescer(lambda *delta: sent.append(delta), interval=0.05, clock=clock)
    for at, text in [(0.0, "Hel"), (0.01, "lo"), (0.02, ", "), (0.06, "wor"), (0.07, "ld")]:
        clock.now = 100.0 + at
        coalescer.add(text, ())
    assert sent == [("Hel", [], 1), ("lo, wor", [], 3)]
    coalescer.flush()
    coalescer.flush()  # nothing waits: nothing more is sent
    assert sent[2:] == [("ld", [], 1)]


def test_tool_call_chunks_are_merged_by_index_with_their_id_and_name() -> None:
    sent: list[tuple[str, list[dict[str, Any]], int]] = []
    clock = Clock()
    coalescer = DeltaCoalescer(lambda *delta: sent.append(delta), clock=clock)
    coalescer.add("", [{"index": 0, "id": "c1", "name": "lookup", "arguments": '{"q'}])
    coalescer.add("", [{"index": 0, "arguments": '": "x"}'},
                       {"index": 1, "id": "c2", "name": "add", "arguments": "{"}])
    coalescer.flush()
    assert sent == [
        ("", [{"index": 0, "id": "c1", "name": "lookup", "arguments": '{"q'}], 1),
        ("", [{"index": 0, "arguments": '": "x"}'},
              {"index": 1, "id": "c2", "name": "add", "arguments": "{"}], 1)]


def test_outside_a_model_attempt_nobody_listens() -> None:
    assert not listening()
    stream_delta("ignored")  # no listener: nothing to do, nothing raised


class Writer(Step):
    def get_prompt(self) -> str | None:
        return "Write."


async def run_streamed(model: Any, message: str = "hi") -> list[ev.Event]:
    flow = flow_of(Writer)
    engine, _ = make_engine(flow, model=model)
    sink = MemorySink()
    engine.sinks.append(sink)
    await engine.run(flow.__name__, message)
    return [e for e in sink.events if e.type.startswith("model.")]


async def test_a_streaming_answer_arrives_as_deltas_between_start_and_finish() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    model = ScriptedModel([Rule(text=text)], latency=0.004, stream=8)
    events = await run_streamed(model)
    types = [e.type for e in events]
    assert types[0] == "model.started" and types[-1] == "model.finished"
    deltas = [e for e in events if isinstance(e, ev.ModelDelta)]
    assert set(types[1:-1]) == {"model.delta"} and deltas
    assert "".join(d.text for d in deltas) == text
    assert sum(d.chunks for d in deltas) == 8
    assert {(d.call, d.attempt, d.step) for d in deltas} == {(1, 1, "Writer")}


async def test_streamed_tool_calls_carry_their_arguments_text() -> None:
    model = ScriptedModel([Rule(tools=[("lookup", {"q": "fox"})], times=1),
                           Rule(text="done")], latency=0.004, stream=3)
    events = await run_streamed(model)
    first = [e for e in events if isinstance(e, ev.ModelDelta) and e.call == 1]
    calls: dict[int, dict[str, Any]] = {}
    for delta in first:
        for chunk in delta.tool_calls:
            merged = calls.setdefault(chunk["index"], {"arguments": ""})
            merged.update({k: v for k, v in chunk.items() if k != "arguments"})
            merged["arguments"] += chunk["arguments"]
    finished = next(e for e in events if isinstance(e, ev.ModelFinished) and e.call == 1)
    assert calls[0]["name"] == "lookup" and calls[0]["id"] == finished.tool_calls[0]["id"]
    assert calls[0]["arguments"] == '{"q": "fox"}'


class BreaksMidStream:
    """Writes part of an answer, then loses the connection (once), then answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        stream_delta("partial ")
        if self.calls == 1:
            raise ModelTransportError("connection dropped")
        stream_delta("whole")
        return ModelResponse(content="partial whole")


async def test_what_a_failed_attempt_wrote_is_shown_before_its_failure() -> None:
    events = await run_streamed(BreaksMidStream())
    assert [(e.type, getattr(e, "attempt", None)) for e in events] == [
        ("model.started", 1), ("model.delta", 1), ("model.failed", 1),
        ("model.started", 2), ("model.delta", 2), ("model.delta", 2), ("model.finished", 2)]
    assert [e.text for e in events if isinstance(e, ev.ModelDelta)] == [
        "partial ", "partial ", "whole"]


async def test_without_latency_or_stream_a_scripted_answer_has_no_delta() -> None:
    for model in (ScriptedModel([Rule(text="x")], stream=4),
                  ScriptedModel([Rule(text="x")], latency=0.001)):
        assert [e.type for e in await run_streamed(model)] == ["model.started", "model.finished"]


def test_a_negative_stream_is_refused() -> None:
    from runtime import FlowDefinitionError
    with pytest.raises(FlowDefinitionError, match="stream"):
        ScriptedModel(stream=-1)
