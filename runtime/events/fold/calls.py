"""Model and tool calls: what the run model keeps of them is the tokens they used, and
the text of an invocation's open model attempt as the model streams it.

The browser's fold keeps every call for the page to draw; this one needs only the
totals, per run and per invocation, and what an attempt has written before it ends.
An attempt's streamed text lasts until its ``model.finished`` (whose content is the whole
answer) or its ``model.failed`` (what the failed attempt wrote is not the answer); a
fold without drafts keeps none.
"""

from __future__ import annotations

from typing import Any

from .. import schema as ev
from .model import Handlers, Invocation, RunModel, Stream


def _model_started(run: RunModel, event: ev.ModelStarted, inv: Invocation | None) -> None:
    if inv is not None and run.drafts:
        inv.streaming = Stream(event.step, event.call, event.attempt)


def _model_delta(run: RunModel, event: ev.ModelDelta, inv: Invocation | None) -> None:
    stream = inv.streaming if inv is not None else None
    if stream is None or (stream.call, stream.attempt) != (event.call, event.attempt):
        return  # not the attempt the invocation has open (its start was never seen)
    stream.text += event.text
    if event.tool_calls:
        stream.tool_calls = merge_tool_chunks(stream.tool_calls, event.tool_calls)


def merge_tool_chunks(calls: list[dict[str, Any]],
                      chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``calls`` (by ``index``) with a delta's tool-call chunks appended, as a new list:
    the arguments' text grows, an ``id`` or ``name`` is set once known."""
    merged = {call["index"]: dict(call) for call in calls}
    for chunk in chunks:
        index = chunk.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        call = merged.setdefault(index, {"index": index, "arguments": ""})
        for key in ("id", "name"):
            if chunk.get(key):
                call[key] = chunk[key]
        arguments = chunk.get("arguments")
        call["arguments"] += arguments if isinstance(arguments, str) else ""
    return sorted(merged.values(), key=lambda call: call["index"])


def _attempt_ended(run: RunModel, event: ev.ModelFinished | ev.ModelFailed,
                   inv: Invocation | None) -> None:
    stream = inv.streaming if inv is not None else None
    if inv is not None and stream is not None and (stream.call, stream.attempt) == (
            event.call, event.attempt):
        inv.streaming = None


def _model_finished(run: RunModel, event: ev.ModelFinished, inv: Invocation | None) -> None:
    run.tokens = {k: run.tokens.get(k, 0) + n for k, n in (
        ("input_tokens", event.input_tokens), ("output_tokens", event.output_tokens),
        ("total_tokens", event.total_tokens))}
    if inv is not None:
        inv.tokens += event.total_tokens
    _attempt_ended(run, event, inv)


def _model_failed(run: RunModel, event: ev.ModelFailed, inv: Invocation | None) -> None:
    _attempt_ended(run, event, inv)


HANDLERS: Handlers = {
    "model.started": _model_started,
    "model.delta": _model_delta,
    "model.finished": _model_finished,
    "model.failed": _model_failed,
}
