"""The event bus: synchronous, non-blocking emit to pluggable sinks.

Back-pressure policy. :meth:`EventBus.emit` never awaits and never blocks: it stamps the
envelope (gap-free ``seq``, wall time, monotonic offset) and hands the event to every sink
synchronously. A sink's :meth:`EventSink.receive` must return at once — append to memory,
write into a buffered file, or put into a queue that its own task drains. So a slow
consumer can never stall a branch or a join. A sink whose buffer is full does not drop
silently: it reports the dropped range, and the bus emits a ``sink.overflowed`` event
(to every sink) naming the sink and the sequence numbers it lost, so the gap is in the
stream itself. A sink that raises is removed from the run and reported the same way; the
flow goes on. The sinks that ship with the runtime are in :mod:`runtime.events.sinks`
and :mod:`runtime.events.dashboard`.

A sink whose buffer cannot drain fast enough may instead ask the run to slow down: an
optional ``congested()`` method returning True says so. :meth:`EventBus.congested` is
true while any sink says it; the runtime core waits at its next await point (a branch
start, a model call) until it is false again. The bus itself never waits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from .makers import event_maker
from .schema import SCHEMA_VERSION, Event, EventBase, SinkOverflowed
from .values import build_unchecked


@runtime_checkable
class EventSink(Protocol):
    """Receives the events of runs. ``receive`` must not block (see the module docstring).

    Returns None, or the ``(first_seq, last_seq)`` range of events it had to drop since
    its last report (the bus then emits ``sink.overflowed``).
    """

    name: str

    def receive(self, event: Event) -> tuple[int, int] | None:
        """Take one event."""
        ...


class EventBus:
    """The events of one run (one turn)."""

    def __init__(
        self, sinks: Iterable[EventSink], *, run_id: str | None = None, session_id: str = ""
    ) -> None:
        self.run_id = run_id or uuid.uuid4().hex
        self.session_id = session_id
        self.sinks = list(sinks)
        self.pressure: tuple[Callable[[], bool], ...] = tuple(
            check for sink in self.sinks
            if callable(check := getattr(sink, "congested", None)))
        """The ``congested`` methods of the sinks that have one (empty: never congested)."""
        self.seq = 0
        self._start = time.monotonic()
        self._wall = time.time()  # wall time of _start: one clock read per event after

    def congested(self) -> bool:
        """Whether any sink asks the run to wait before doing more work."""
        return any(check() for check in self.pressure)

    def emit(self, cls: type[EventBase], path: str = "", **fields: Any) -> Event | None:
        """Stamp and deliver one event; returns it (None when nothing listens)."""
        return self.emit_fields(cls, path, fields)

    def emit_fields(self, cls: type[EventBase], path: str, fields: dict[str, Any]) -> Event | None:
        """:meth:`emit` with the event's own fields as a dict (no re-packing).

        Built without validation on this hot path (:mod:`~runtime.events.makers`); tests
        validate every type strictly. A field the event does not declare is dropped and a
        missing one is None: an emit never breaks a flow.
        """
        if not self.sinks:
            return None
        seq = self.seq
        try:
            return event_maker(cls)(self, path, **fields)  # type: ignore[no-any-return]
        except TypeError:
            if self.seq != seq:  # raised after the event went out: not a field's mistake
                raise
        # A misspelled or missing field: the maker's call did not bind them.
        now = time.monotonic() - self._start
        event: Any = build_unchecked(cls, {
            "v": SCHEMA_VERSION, "run_id": self.run_id, "session_id": self.session_id,
            "seq": self.seq, "time": self._wall + now, "offset": now,
            "path": path, **fields, "type": cls.model_fields["type"].default,
        })
        self.seq += 1
        return self.deliver(event)

    def deliver(self, event: Event) -> Event:
        """Hand a stamped event to every sink (the makers call this); returns it.

        A sink that raises is removed and reported; a sink that dropped events reports the
        range, and ``sink.overflowed`` follows once every sink has this event.
        """
        sinks = self.sinks
        if len(sinks) == 1:  # the usual case: one sink, no loop and no report list
            sink = sinks[0]
            try:
                dropped = sink.receive(event)
            except Exception as exc:  # a broken sink must not break the flow
                self._remove(sink)
                self._report(f"{sink.name} ({exc!r})", event.seq, event.seq, 1)
                return event
            if dropped:
                first, last = dropped
                self._report(sink.name, first, last, last - first + 1)
            return event
        reports: list[tuple[str, int, int]] | None = None
        for sink in list(sinks):
            try:
                dropped = sink.receive(event)
            except Exception as exc:  # a broken sink must not break the flow
                self._remove(sink)
                reports = [*(reports or []), (f"{sink.name} ({exc!r})", event.seq, event.seq)]
                continue
            if dropped:
                reports = [*(reports or []), (sink.name, *dropped)]
        for name, first, last in reports or ():  # after every sink has the event: seq order
            self._report(name, first, last, last - first + 1)
        return event

    def _remove(self, sink: EventSink) -> None:
        self.sinks.remove(sink)
        self.pressure = tuple(check for check in self.pressure
                              if getattr(check, "__self__", None) is not sink)

    def _report(self, name: str, first: int, last: int, dropped: int) -> None:
        self.emit(SinkOverflowed, sink=name, first_seq=first, last_seq=last, dropped=dropped)

