"""The what-if of runs recorded elsewhere: OpenTelemetry spans, a recorded golden."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from picoflow_web.record.span_events import Span, derive
from runtime.whatif import what_if

MS = 1_000_000
T0 = 1_700_000_000_000 * MS
TRACE = "0af7651916cd43dd8448eb211c80319c"
GOLDEN = Path(__file__).parents[1] / "golden"


def span(span_id: str, parent: str, name: str, start: int, end: int, *,
         chat: bool = False) -> Span:
    return Span(span_id=span_id.rjust(16, "0"), parent_span_id=parent.rjust(16, "0")
                if parent else "", name=name, start=T0 + start * MS, end=T0 + end * MS,
                resource={"service.name": "agent"},
                attributes={"gen_ai.operation.name": "chat"} if chat else {})


def seed_as_spans(unit: int = 100) -> list[Any]:
    """The seed's two workers as an instrumented agent's spans: each worker a span, each
    stage a chat span in it, one after the other."""
    return derive(TRACE, TRACE, [
        span("1", "", "agent", 0, 11 * unit),
        span("2", "1", "worker A", 0, 2 * unit),
        span("3", "2", "A1", 0, unit, chat=True),
        span("4", "2", "A2", unit, 2 * unit, chat=True),
        span("5", "1", "worker B", 0, 11 * unit),
        span("6", "5", "B1", 0, 10 * unit, chat=True),
        span("7", "5", "B2", 10 * unit, 11 * unit, chat=True),
    ])


def branch(schedule: dict[str, Any], key: str) -> dict[str, Any]:
    [found] = [op for op in schedule["operations"] if op["key"] == key]
    return found


def test_an_otel_run_s_sequential_chat_spans_are_each_a_superstep_s_node() -> None:
    report = what_if(seed_as_spans()).as_dict()
    s = report["schedules"]
    assert s["recorded"]["total"] == s["local_barriers"]["total"] == 1.1
    assert s["supersteps"]["total"] == 1.1 and s["supersteps"]["supersteps"] == 2
    assert branch(s["local_barriers"], "worker A")["parts"] == [(0, 0.2)]
    assert branch(s["supersteps"], "worker A")["parts"] == [(0, 0.1), (1.0, 1.1)]
    [wait] = [w for w in s["supersteps"]["waits"] if w["at"] == "superstep"]
    assert (wait["key"], wait["for_keys"], wait["superstep"]) == ("worker A", ["worker B"], 2)
    assert any(note.startswith("Recorded from OpenTelemetry spans") for note in
               report["inferred"])
    assert ("Under graph-wide supersteps, worker A would end at 1.1 s instead of 200 ms: it "
            "waits 900 ms for worker B at superstep 2.") in report["summary"]


def golden_runs() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Every run of every golden trace, as the dicts its lines parse to."""
    for path in sorted(GOLDEN.glob("*.jsonl")):
        runs: dict[str, list[dict[str, Any]]] = {}
        for line in path.read_text().splitlines():
            event = json.loads(line)
            runs.setdefault(event["run_id"], []).append(event)
        yield from runs.items()


def test_the_events_of_the_types_it_reads_are_all_it_needs() -> None:
    from runtime.whatif import READ

    for run_id, events in golden_runs():
        some = [event for event in events if event["type"] in READ]
        assert what_if(some).as_dict() == what_if(events).as_dict(), run_id


def test_every_golden_run_gets_three_schedules_that_keep_its_operations() -> None:
    for run_id, events in golden_runs():
        s = what_if(events).as_dict()["schedules"]
        ids = {name: sorted(op["id"] for op in s[name]["operations"]) for name in s}
        assert ids["recorded"] == ids["supersteps"] == ids["local_barriers"], run_id
        for name in ("supersteps", "local_barriers"):
            for op in s[name]["operations"]:
                assert 0 <= op["start"] <= op["end"] <= s[name]["total"] + 1e-6, run_id
            # a leaf runs as long in every model (a caller's union of children may not)
            callers = {op["parent"] for op in s[name]["operations"]}
            recorded = {op["id"]: op["busy"] for op in s["recorded"]["operations"]}
            for op in s[name]["operations"]:
                if op["path"] not in callers:
                    assert abs(op["busy"] - recorded[op["id"]]) < 1e-5, (run_id, name, op)
