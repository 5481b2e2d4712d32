"""Event sinks: memory, callback, JSON Lines file, bounded buffer; the JSONL format.

Every sink here satisfies :class:`~runtime.events.bus.EventSink`: ``receive`` returns at
once. :class:`BoundedSink` is the one that sheds load; it reports what it dropped, and the
bus turns that report into a ``sink.overflowed`` event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .schema import Event, parse_event
from .values import SURROGATE


class MemorySink:
    """Keeps every event in a list (tests, the trace tool, replays)."""

    name = "memory"

    def __init__(self) -> None:
        self.events: list[Event] = []

    def receive(self, event: Event) -> None:
        self.events.append(event)

    def of_run(self, run_id: str) -> list[Event]:
        """The events of one run, in order."""
        return [e for e in self.events if e.run_id == run_id]


class CallbackSink:
    """Calls a function with each event; the function must return quickly."""

    def __init__(self, callback: Callable[[Event], None], name: str = "callback") -> None:
        self.name = name
        self._callback = callback

    def receive(self, event: Event) -> None:
        self._callback(event)


class JsonlSink:
    """Appends events to a JSON Lines file — also the export and import format.

    Writes go into the file object's buffer; ``flush()`` or ``close()`` pushes them out.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = f"jsonl:{self.path.name}"
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def receive(self, event: Event) -> None:
        self._file.write(dump_event(event) + "\n")

    def flush(self) -> None:
        """Push buffered lines to the file."""
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()


class BoundedSink:
    """Wraps a sink with a bounded buffer drained by :meth:`drain` (a consumer's task).

    When the buffer is full, new events are dropped; the next ``receive`` that finds room
    reports the dropped range, so the bus emits ``sink.overflowed`` for the gap.
    """

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self.buffer: list[Event] = []
        self._dropped: tuple[int, int] | None = None

    def receive(self, event: Event) -> tuple[int, int] | None:
        if len(self.buffer) >= self.capacity:
            first = self._dropped[0] if self._dropped else event.seq
            self._dropped = (first, event.seq)
            return None
        self.buffer.append(event)
        dropped, self._dropped = self._dropped, None
        return dropped

    def drain(self) -> list[Event]:
        """Take everything buffered."""
        taken, self.buffer = self.buffer, []
        return taken


def dump_event(event: Event) -> str:
    """One event as a compact JSON line (pydantic's serialiser: no union dispatch)."""
    return event_json(event).decode()


def event_json(event: Event) -> bytes:
    """:func:`dump_event` as UTF-8 bytes, for senders that write bytes.

    The model's own serialiser, called directly: ``model_dump_json`` spends twice as long
    sorting out its keyword arguments as the serialising takes, on every event.
    """
    try:
        return event.__pydantic_serializer__.to_json(event)
    except ValueError:  # pydantic's serialisation error
        return _replacing_surrogates(event)


def _replacing_surrogates(event: Event) -> bytes:
    """The event's line with U+FFFD for each lone surrogate, as a UTF-8 decoder would put it.

    Text no UTF-8 can hold (a lone surrogate, from a model's ``"\\ud800"`` escape or a
    flow's own string) fails pydantic's serialiser; losing the event, or the sink, for it
    would leave a hole in the run. Anything else that fails still raises.
    """
    data = event.__pydantic_serializer__.to_python(event, mode="json")
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not SURROGATE.search(text):  # the failure was something else: say what it was
        return event.__pydantic_serializer__.to_json(event)
    return SURROGATE.sub("\ufffd", text).encode()


def read_jsonl(path: str | Path) -> list[Event]:
    """Read and strictly validate a JSONL export; errors name the line."""
    events: list[Event] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                events.append(parse_event(line))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a valid event: {exc}") from None
    return events
