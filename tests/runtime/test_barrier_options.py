"""A barrier's options are one model: what run_steps takes, validates and reports."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from runtime import BarrierOptions, ParallelConfigurationError, Step
from runtime import events as ev
from runtime.events import MemorySink
from tests.runtime.barrier_helpers import branch_step, returning, run_body
from tests.runtime.helpers import make_engine

pytestmark = pytest.mark.anyio

# run_steps spells the documented names; the model the event's.
KWARG_OF_FIELD = {"policy": "failure_policy"}


def test_run_steps_takes_exactly_the_options_with_the_models_defaults() -> None:
    params = inspect.signature(Step.run_steps).parameters
    kwargs = {name: p.default for name, p in params.items()
              if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "cancel"}
    fields = {KWARG_OF_FIELD.get(name, name): info.default
              for name, info in BarrierOptions.model_fields.items()}
    assert kwargs == fields


def test_the_forked_event_carries_the_option_fields_in_one_place() -> None:
    assert issubclass(ev.BarrierForked, BarrierOptions)
    names = list(ev.BarrierForked.model_fields)
    options = list(BarrierOptions.model_fields)
    start = names.index(options[0])
    assert names[start:start + len(options)] == options


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"failure_policy": "all-or-nothing"}, "policy"),
        ({"checkpoint": "every-join"}, "checkpoint"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"branch_timeout": 0}, "branch_timeout"),
        ({"branch_timeout": -1.5}, "branch_timeout"),
        ({"token_budget": 0}, "token_budget"),
    ],
)
async def test_a_bad_option_is_a_configuration_error_before_any_branch_starts(
    options: dict[str, Any], field: str
) -> None:
    started: list[str] = []

    async def record(step: Step, message: str | None) -> Any:
        started.append(step.parallel_invocation().key)

    A = branch_step("A", record)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A}], **options)

    out = await run_body(body, [A])
    error = out.raised(ParallelConfigurationError)
    assert error.message.startswith(f"Invalid run_steps() options: {field}: ")
    assert [list(e["loc"]) for e in error.extra["errors"]] == [[field]]
    assert started == []


async def test_the_forked_event_reports_the_options_run_steps_was_given() -> None:
    A = branch_step("A", returning("ok"))
    sink = MemorySink()

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": A}], failure_policy="atomic",
                                     max_concurrency=3, branch_timeout=2.5, token_budget=99)

    engine, _ = make_engine()
    engine.sinks.append(sink)
    await run_body(body, [A], engine=engine)
    (forked,) = [e for e in sink.events if isinstance(e, ev.BarrierForked)]
    assert BarrierOptions.model_validate(forked.model_dump(include=set(
        BarrierOptions.model_fields))) == BarrierOptions(
        policy="atomic", max_concurrency=3, branch_timeout=2.5, token_budget=99)
