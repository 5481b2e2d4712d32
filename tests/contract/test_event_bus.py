"""The bus's delivery: a sink that raises is removed and reported, a sink that dropped
events reports the range as ``sink.overflowed`` once every sink has the event, and a flow
never sees either, with one sink (the usual case, delivered without the loop) or several."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import events as ev


class Broken:
    name = "broken"

    def receive(self, event: Any) -> None:
        raise RuntimeError("disk full")

    def congested(self) -> bool:
        return True


class Dropping:
    """Keeps every event; reports a dropped range with the event at ``at``."""

    name = "dropping"

    def __init__(self, at: int) -> None:
        self.at = at
        self.events: list[Any] = []

    def receive(self, event: Any) -> tuple[int, int] | None:
        self.events.append(event)
        return (7, 9) if event.seq == self.at else None


@pytest.mark.parametrize("others", [0, 1], ids=["alone", "beside another sink"])
def test_a_sink_that_raises_is_removed_and_reported_to_the_others(others: int) -> None:
    memory = [ev.MemorySink() for _ in range(others)]
    bus = ev.EventBus([Broken(), *memory], run_id="r")
    assert bus.congested()  # the broken sink's own check, until it is removed
    first = bus.emit(ev.StepEntered, step="A", level=1, how="start")
    assert first is not None and first.seq == 0
    assert [type(s) for s in bus.sinks] == [ev.MemorySink] * others
    assert not bus.congested()
    bus.emit(ev.StepExited, step="A")
    for sink in memory:
        assert [e.type for e in sink.events] == ["step.entered", "sink.overflowed",
                                                 "step.exited"]
        overflowed = sink.events[1]
        assert overflowed.sink.startswith("broken (RuntimeError('disk full'))")
        assert (overflowed.first_seq, overflowed.last_seq, overflowed.dropped) == (0, 0, 1)
    assert bus.seq == (3 if others else 1)  # with no sink left, the report is not emitted


@pytest.mark.parametrize("others", [0, 1], ids=["alone", "beside another sink"])
def test_a_dropped_range_follows_the_event_that_reported_it_in_seq_order(others: int) -> None:
    dropping = Dropping(at=1)
    memory = [ev.MemorySink() for _ in range(others)]
    bus = ev.EventBus([dropping, *memory], run_id="r")
    for step in ("A", "B", "C"):
        bus.emit(ev.StepEntered, step=step, level=1, how="start")
    for sink in (dropping, *memory):
        assert [(e.seq, e.type) for e in sink.events] == [
            (0, "step.entered"), (1, "step.entered"), (2, "sink.overflowed"),
            (3, "step.entered")]
        overflowed = sink.events[2]
        assert (overflowed.sink, overflowed.first_seq, overflowed.last_seq,
                overflowed.dropped) == ("dropping", 7, 9, 3)
