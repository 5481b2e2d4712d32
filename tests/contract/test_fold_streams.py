"""Streamed answers (``model.delta``) in the fold and in the other readers of events.

The fold keeps each invocation's open model attempt with the text its deltas wrote, until
the attempt's ``model.finished`` (whose content is the whole reply) or ``model.failed``;
the browser's fold agrees (``tests/golden/streamed.fold.json`` snapshots it after every
delta). The what-if schedule and the OpenTelemetry spans do not read deltas: a run's
record with or without them gives the same plan and the same spans.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from runtime import events as ev
from runtime.events import fold, read_jsonl
from runtime.integrations.otel import spans_of
from runtime.whatif import operations
from tests.golden.goldens import BY_NAME

EVENTS = read_jsonl(BY_NAME["streamed"].jsonl_path)


def seq_of(kind: str, path: str, attempt: int, nth: int = 0) -> int:
    return [e.seq for e in EVENTS if e.type == kind and e.path == path
            and getattr(e, "attempt", None) == attempt][nth]


def streams(upto: int | None = None, *, drafts: bool = True) -> dict[str, dict[str, Any]]:
    run = fold(EVENTS, upto, drafts=drafts)
    return {path: inv.streaming.as_dict() for path, inv in run.invocations.items()
            if inv.streaming is not None}


def test_the_open_attempt_gathers_its_deltas_until_it_ends() -> None:
    assert streams(seq_of("model.started", "0", 1))["0"]["text"] == ""
    assert streams(seq_of("model.delta", "0", 1, 1))["0"] == {
        "step": "Drafter", "call": 1, "attempt": 1, "text": "The tide comes in tw",
        "tool_calls": []}
    # A failed attempt's text is not the answer: the retry starts from nothing.
    assert "0" not in streams(seq_of("model.failed", "0", 1))
    assert streams(seq_of("model.delta", "0", 2, 0))["0"]["text"] == "The tide "
    assert streams(seq_of("model.delta", "1", 1, 1))["1"]["tool_calls"] == [
        {"index": 0, "id": "call_tide", "name": "tide_table", "arguments": '{"harbour": "Brest"}'}]
    assert streams() == {}  # every attempt ended


def test_the_deltas_add_up_to_the_finished_reply() -> None:
    finished = next(e for e in EVENTS if isinstance(e, ev.ModelFinished) and e.path == "0")
    before = streams(finished.seq - 1)["0"]
    assert (before["call"], before["attempt"]) == (finished.call, finished.attempt)
    assert before["text"] == finished.content


def test_a_fold_without_drafts_keeps_no_stream() -> None:
    assert streams(seq_of("model.delta", "0", 1, 1), drafts=False) == {}


def test_a_delta_of_an_attempt_not_open_changes_nothing() -> None:
    stray = EVENTS[seq_of("model.delta", "0", 2, 0)].model_copy(update={"call": 9})
    run = fold([*EVENTS[:seq_of("model.delta", "0", 2, 0)], stray])
    stream = run.invocations["0"].streaming
    assert stream is not None and (stream.attempt, stream.text) == (2, "")


def without_deltas() -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in EVENTS if e.type != "model.delta"]


def test_the_what_if_does_not_read_deltas() -> None:
    assert "model.delta" not in operations.READ
    every = [e.model_dump(mode="json") for e in EVENTS]
    assert operations.read(every) == operations.read(without_deltas())


def test_the_spans_ignore_deltas() -> None:
    every = spans_of(e.model_dump(mode="json") for e in EVENTS).spans
    assert {key: dataclasses.asdict(span) for key, span in every.items()} == {
        key: dataclasses.asdict(span) for key, span in spans_of(without_deltas()).spans.items()}
    assert any(key.startswith("model:0:1:1") for key in every)
