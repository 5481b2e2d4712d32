"""Streamed answers: what a model adapter reports while the model writes.

An adapter that streams calls :func:`stream_delta` with each chunk of text or of a tool
call's arguments. While a model attempt runs, the runner listens (when the turn records
events) and turns the chunks into ``model.delta`` events; with nobody listening the call
costs one context-variable read. The adapter's answer (:class:`~runtime.llm.ModelResponse`)
is still the whole reply: deltas only show it arriving.

Chunks are coalesced per attempt so a fast model cannot flood the event log: a delta goes
out when :data:`MIN_INTERVAL` has passed since the attempt's previous one, else the chunk
waits for the next chunk or for the attempt's end (:meth:`DeltaCoalescer.flush`). No
timer task is started per call: a fan-out of streaming branches would pay for one each.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

MIN_INTERVAL = 0.05
"""Seconds between two ``model.delta`` events of one attempt (at most about 20 a second)."""

Emit = Callable[[str, list[dict[str, Any]], int], None]
"""Receives one coalesced delta: text, tool-call chunks, how many chunks it holds."""


class DeltaCoalescer:
    """Merges an attempt's chunks into deltas at most every ``interval`` seconds."""

    __slots__ = ("_calls", "_chunks", "_clock", "_emit", "_interval", "_last", "_text")

    def __init__(self, emit: Emit, *, interval: float = MIN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._emit = emit
        self._interval = interval
        self._clock = clock
        self._last = -float("inf")
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._chunks = 0

    def add(self, text: str, tool_calls: Sequence[Mapping[str, Any]]) -> None:
        """One chunk; sent at once when the attempt's last delta is old enough."""
        if text:
            self._text.append(text)
        for chunk in tool_calls:
            self._add_call(chunk)
        self._chunks += 1
        now = self._clock()
        if now - self._last >= self._interval:
            self._send(now)

    def flush(self) -> None:
        """Send what waits (the attempt ended, or is about to)."""
        if self._chunks:
            self._send(self._clock())

    def _add_call(self, chunk: Mapping[str, Any]) -> None:
        index = chunk.get("index", 0)
        index = index if isinstance(index, int) and not isinstance(index, bool) else 0
        merged = self._calls.setdefault(index, {"index": index, "arguments": ""})
        for key in ("id", "name"):
            value = chunk.get(key)
            if isinstance(value, str) and value:
                merged[key] = value
        arguments = chunk.get("arguments")
        if isinstance(arguments, str):
            merged["arguments"] += arguments

    def _send(self, now: float) -> None:
        text, calls, chunks = "".join(self._text), list(self._calls.values()), self._chunks
        self._text, self._calls, self._chunks = [], {}, 0
        self._last = now
        self._emit(text, calls, chunks)


_LISTENER: ContextVar[DeltaCoalescer | None] = ContextVar("picoflow_model_stream",
                                                         default=None)


def stream_delta(text: str = "", tool_calls: Sequence[Mapping[str, Any]] = ()) -> None:
    """Report a chunk of the answer being written: ``text``, and/or tool-call chunks
    ``{"index", "id"?, "name"?, "arguments"?}`` (``arguments``: the JSON text written
    since the previous chunk of that call). Call it from the task that runs
    :meth:`~runtime.llm.Model.invoke`; outside a model attempt it does nothing."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.add(text, tool_calls)


def listening() -> bool:
    """Whether a chunk reported now would be shown (an adapter may skip building it)."""
    return _LISTENER.get() is not None


@contextmanager
def listen(coalescer: DeltaCoalescer) -> Iterator[None]:
    """Route :func:`stream_delta` of this task (and tasks it starts) to ``coalescer``;
    what waits is flushed on the way out, whether the attempt answered or raised."""
    token = _LISTENER.set(coalescer)
    try:
        yield
    finally:
        _LISTENER.reset(token)
        coalescer.flush()


__all__ = ["MIN_INTERVAL", "DeltaCoalescer", "listen", "listening", "stream_delta"]
