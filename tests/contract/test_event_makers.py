"""Event makers: the builders compiled per event type that the hottest events go through.

The suite runs strict (``PICOFLOW_STRICT_EVENTS=1``), where a maker checks through
``build_strict``; the compiled hot path is what runs without the variable, so it is pinned
here in a fresh process, against the strict builder's output for the same fields.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime import events as ev

ROOT = Path(__file__).resolve().parents[2]


def test_a_maker_stamps_builds_and_delivers_like_the_bus() -> None:
    sink = ev.MemorySink()
    bus = ev.EventBus([sink], run_id="r", session_id="s")
    started = ev.event_maker(ev.BranchStarted)
    first = bus.emit(ev.StepEntered, step="Fan", level=1, how="start")
    made = started(bus, "0", barrier="b", index=0, key="k", step="Add")
    assert sink.events == [first, made]
    assert made is not None and first is not None
    assert (made.seq, made.run_id, made.session_id, made.path) == (1, "r", "s", "0")
    assert made.offset >= first.offset and made.time >= first.time
    assert bus.seq == 2
    assert list(made.__dict__) == list(ev.BranchStarted.model_fields)
    # An unset optional field added later (``rerun``) is left out of the serialised event.
    assert list(made.model_dump()) == [f for f in ev.BranchStarted.model_fields
                                       if f != "rerun"]
    assert ev.event_maker(ev.BranchStarted) is started  # compiled once


def test_a_maker_emits_nothing_and_stamps_no_seq_without_sinks() -> None:
    bus = ev.EventBus([], run_id="r")
    assert ev.event_maker(ev.StepExited)(bus, "", step="Greet") is None
    assert bus.seq == 0


def test_a_record_maker_fills_defaults_and_runs_default_factories_per_record() -> None:
    info = ev.record_maker(ev.ErrorInfo)
    one, two = info(type="E", code="internal", message="m"), info(
        type="E", code="internal", message="m")
    assert one.extra == {} and one.extra is not two.extra
    request = ev.record_maker(ev.BranchRequest)(index=0, path="0", step="A", key="a",
                                               params={})
    assert request == ev.BranchRequest(index=0, path="0", step="A", key="a", params={})


def test_in_strict_mode_a_maker_names_a_misspelled_field() -> None:
    bus = ev.EventBus([ev.MemorySink()], run_id="r")
    with pytest.raises(ev.EventBuildError, match=r"unknown field 'stpe' \(did you mean"):
        ev.event_maker(ev.StepExited)(bus, "", stpe="Greet")
    assert bus.seq == 0
    with pytest.raises(ev.EventBuildError, match=r"BranchRequest: unknown field 'kye'"):
        ev.record_maker(ev.BranchRequest)(index=0, path="0", step="A", kye="a", params={})


HOT_PATH_PROBE = """
import json
from runtime import events as ev
out = {"strict": ev.STRICT}
sink = ev.MemorySink()
bus = ev.EventBus([sink], run_id="r", session_id="s")
ev.event_maker(ev.BranchRejected)(bus, "0.1", barrier="b", index=1, key="k",
    error=ev.record_maker(ev.ErrorInfo)(type="E", code="internal", message="<b>x</b>"),
    cancelled=False, started=True)
bus.emit(ev.StepExited, stpe="Greet")  # misspelled: the bus falls back, never raises
out["events"] = [e.model_dump(mode="json") for e in sink.events]
out["order"] = [list(e.model_dump()) for e in sink.events]
try:
    ev.event_maker(ev.StepExited)(bus, "", stpe="Greet")
except TypeError as exc:
    out["direct"] = str(exc)
print(json.dumps(out))
"""


def test_without_strict_mode_a_maker_builds_what_the_strict_builder_builds() -> None:
    env = {k: v for k, v in os.environ.items() if k != ev.STRICT_ENV}
    result = subprocess.run([sys.executable, "-c", HOT_PATH_PROBE], capture_output=True,
                            text=True, check=True, cwd=ROOT, env=env)
    out: dict[str, Any] = json.loads(result.stdout)
    assert out["strict"] is False
    rejected, exited = out["events"]
    # The compiled builder's event is the validated one, field for field and in order.
    assert rejected == ev.parse_event(rejected).model_dump(mode="json")
    assert out["order"][0] == list(ev.BranchRejected.model_fields)
    assert (rejected["seq"], rejected["path"], rejected["error"]["extra"]) == (0, "0.1", {})
    assert (exited["type"], exited["seq"], exited["step"]) == ("step.exited", 1, None)
    assert out["order"][1] == list(ev.StepExited.model_fields)
    # Called directly, a misspelled field is the call's TypeError.
    assert "unexpected keyword argument 'stpe'" in out["direct"]


def test_every_event_type_compiles_a_maker() -> None:
    for name, cls in ev.EVENT_TYPES.items():
        assert callable(ev.event_maker(cls)), name


def test_an_event_type_with_a_field_named_bus_gets_no_maker() -> None:
    class Odd(ev.EventBase):
        type: str = "odd"
        bus: str

    with pytest.raises(TypeError, match="may not declare a field named 'bus'"):
        ev.event_maker(Odd)
