"""Building events: the strict builder the tests run with, the unchecked hot path, and the
barrier options that ``barrier.forked`` shares with the barrier driver.

The suite runs with ``PICOFLOW_STRICT_EVENTS=1`` (``tests/conftest.py``), so every event
the runtime emits in any test is checked; without the variable the builder is the
unvalidated hot path, whose behaviour is pinned here as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from runtime import events as ev

ROOT = Path(__file__).resolve().parents[2]
ENVELOPE = {"v": 1, "run_id": "r", "session_id": "s", "seq": 0, "time": 1.5, "offset": 0.5,
            "path": ""}
ENTERED = {**ENVELOPE, "type": "step.entered", "step": "Greet", "level": 1, "how": "start"}


def test_the_suite_runs_with_strict_event_building() -> None:
    assert os.environ.get(ev.STRICT_ENV) == "1"
    assert ev.STRICT is True
    assert ev.build is ev.build_strict


def test_a_subprocess_of_a_test_inherits_strict_mode() -> None:
    probe = "from runtime import events as ev; print(ev.STRICT, ev.build is ev.build_strict)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.split() == ["True", "True"]


# -- strict --------------------------------------------------------------------------------


def test_a_misspelled_field_raises_naming_it_and_the_field_it_meant() -> None:
    fields = {k: v for k, v in ENTERED.items() if k != "level"} | {"levl": 1}
    with pytest.raises(ev.EventBuildError) as caught:
        ev.build(ev.StepEntered, fields)
    message = str(caught.value)
    assert message.startswith("StepEntered: ")
    assert "unknown field 'levl' (did you mean 'level'?)" in message
    assert "missing required field 'level'" in message
    assert caught.value.model is ev.StepEntered
    assert len(caught.value.problems) == 2


def test_a_missing_required_field_raises() -> None:
    with pytest.raises(ev.EventBuildError, match=r"missing required field 'how'"):
        ev.build(ev.StepEntered, {k: v for k, v in ENTERED.items() if k != "how"})


def test_a_value_the_model_rejects_raises_with_the_validation_error_chained() -> None:
    with pytest.raises(ev.EventBuildError, match=r"how: Input should be 'start', 'goto'") as caught:
        ev.build(ev.StepEntered, {**ENTERED, "how": "jump"})
    assert isinstance(caught.value.__cause__, ValidationError)
    with pytest.raises(ev.EventBuildError, match=r"seq: Input should be greater than or equal"):
        ev.build(ev.StepEntered, {**ENTERED, "seq": -1})


def test_a_value_that_would_read_back_differently_raises() -> None:
    # Lax validation accepts them, but a reader would parse back something else.
    with pytest.raises(ev.EventBuildError, match=r"'level' is emitted as 1.0 but reads back as 1$"):
        ev.build(ev.StepEntered, {**ENTERED, "level": 1.0})
    with pytest.raises(ev.EventBuildError, match=r"'completed' is emitted as 1 but reads back"):
        ev.build(ev.TurnFinished, {**ENVELOPE, "success": True, "completed": 1,
                                   "message": "m", "content_type": "text/plain"})


def test_a_nested_record_is_checked_too() -> None:
    with pytest.raises(ev.EventBuildError, match=r"BranchRequest: unknown field 'kye'"):
        ev.build(ev.BranchRequest, {"index": 0, "path": "0", "step": "A", "kye": "a",
                                    "params": {}})


def test_a_strict_build_returns_the_event_the_unchecked_builder_makes() -> None:
    strict = ev.build_strict(ev.StepEntered, dict(ENTERED))
    unchecked = ev.build_unchecked(ev.StepEntered, dict(ENTERED))
    assert type(strict) is ev.StepEntered
    assert ev.dump_event(strict) == ev.dump_event(unchecked) == ev.dump_event(
        ev.parse_event(ENTERED))


def test_the_bus_raises_on_a_misspelled_field_in_strict_mode() -> None:
    bus = ev.EventBus([ev.MemorySink()], run_id="r", session_id="s")
    with pytest.raises(ev.EventBuildError, match=r"unknown field 'stpe'"):
        bus.emit(ev.StepExited, stpe="Greet")
    assert bus.emit(ev.StepExited, step="Greet") is not None


# -- unchecked (the default) ---------------------------------------------------------------


def test_the_unchecked_builder_drops_unknown_fields_and_leaves_missing_ones_none() -> None:
    """What the hot path does with a mistake, unchanged: it neither checks nor raises."""
    fields = {k: v for k, v in ENTERED.items() if k != "level"} | {"levl": 1}
    event = ev.build_unchecked(ev.StepEntered, fields)
    assert event.level is None  # type: ignore[comparison-overlap]
    assert "levl" not in event.model_dump()
    defaulted = ev.build_unchecked(ev.StepEntered, {k: v for k, v in ENTERED.items()
                                                    if k not in ("v", "path")})
    assert (defaulted.v, defaulted.path) == (ev.SCHEMA_VERSION, "")
    assert list(defaulted.model_dump()) == list(ev.StepEntered.model_fields)


UNSTRICT_PROBE = """
import json
from runtime import events as ev
sink = ev.MemorySink()
bus = ev.EventBus([sink], run_id="r", session_id="s")
bus.emit(ev.StepExited, stpe="Greet")
print(json.dumps({"strict": ev.STRICT, "unchecked": ev.build is ev.build_unchecked,
                  "event": sink.events[0].model_dump(mode="json")}))
"""


@pytest.mark.parametrize("value", [None, "", "0"], ids=["unset", "empty", "zero"])
def test_without_strict_mode_the_bus_emits_as_before(value: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != ev.STRICT_ENV}
    if value is not None:
        env[ev.STRICT_ENV] = value
    result = subprocess.run([sys.executable, "-c", UNSTRICT_PROBE], capture_output=True,
                            text=True, check=True, cwd=ROOT, env=env)
    out: dict[str, Any] = json.loads(result.stdout)
    assert (out["strict"], out["unchecked"]) == (False, True)
    assert out["event"]["type"] == "step.exited"
    assert out["event"]["step"] is None


def test_with_strict_mode_the_same_emit_raises_in_a_fresh_process() -> None:
    env = {**os.environ, ev.STRICT_ENV: "1"}
    result = subprocess.run([sys.executable, "-c", UNSTRICT_PROBE], capture_output=True,
                            text=True, cwd=ROOT, env=env)
    assert result.returncode == 1
    assert "EventBuildError: StepExited: unknown field 'stpe' (did you mean 'step'?)" in (
        result.stderr)


# -- barrier options -----------------------------------------------------------------------

FORKED_ORDER = ("v", "run_id", "session_id", "seq", "time", "offset", "path", "type",
                "barrier", "caller_step", "requests", "policy", "checkpoint",
                "max_concurrency", "branch_timeout", "token_budget", "ledger", "base", "count")


def test_barrier_forked_takes_its_options_from_barrier_options_in_the_serialised_order() -> None:
    assert tuple(ev.BarrierForked.model_fields) == FORKED_ORDER
    assert issubclass(ev.BarrierForked, ev.BarrierOptions)
    assert "policy" not in ev.BarrierForked.__annotations__
    for name, info in ev.BarrierOptions.model_fields.items():
        assert ev.BarrierForked.model_fields[name].default == info.default
        assert ev.BarrierForked.model_fields[name].metadata == info.metadata
    assert ev.EVENT_TYPES["barrier.forked"] is ev.BarrierForked


def test_barrier_options_defaults_and_constraints() -> None:
    assert ev.BarrierOptions().model_dump() == {
        "policy": "retain-successes", "checkpoint": "none", "max_concurrency": None,
        "branch_timeout": None, "token_budget": None}
    ev.BarrierOptions(policy="atomic", checkpoint="root-join", max_concurrency=1,
                      branch_timeout=0.5, token_budget=1)
    for bad in ({"policy": "all-or-nothing"}, {"checkpoint": "always"},
                {"max_concurrency": 0}, {"branch_timeout": 0}, {"token_budget": 0},
                {"max_concurency": 2}):
        with pytest.raises(ValidationError):
            ev.BarrierOptions.model_validate(bad)
    options = ev.BarrierOptions()
    with pytest.raises(ValidationError):
        options.policy = "atomic"  # type: ignore[misc]


def test_a_field_with_a_default_factory_gets_a_fresh_value_per_unchecked_build() -> None:
    fields = {"type": "E", "code": "internal", "message": "m"}
    one, two = ev.build_unchecked(ev.ErrorInfo, fields), ev.build_unchecked(ev.ErrorInfo, fields)
    assert one.extra == {} and one.extra is not two.extra
    assert one.model_dump_json() == ev.ErrorInfo(**fields).model_dump_json()


def test_a_strict_build_runs_a_default_factory_once_for_both_copies() -> None:
    ticks = iter(range(100))

    class Stamped(BaseModel):
        n: int = Field(default_factory=lambda: next(ticks))

    assert ev.build_strict(Stamped, {}).n == 0
