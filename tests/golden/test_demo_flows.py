"""The demo registry as the dashboard uses it: every flow in one engine, on both backends.

The goldens pin asyncio's order of events; what must not depend on the backend is the
outcome. So each demo plays its golden's turns here on asyncio and on trio, and its final
state must equal the state folded from the committed golden.
"""

from __future__ import annotations

import pytest

from picoflow_web.demos.parallel import DemoFlow, cancel_flow, demo_flows
from runtime import Flow, FlowEngine, Model
from runtime.events import comparable, fold, read_jsonl, runs_of
from tests.golden.goldens import DEMO_GOLDENS, Golden

pytestmark = pytest.mark.anyio

GOLDEN_OF = {golden.build(golden.latency)[0].id: golden for golden in DEMO_GOLDENS}


def committed_final_state(golden: Golden) -> dict[str, dict[str, object]]:
    """The canonical state after the golden's last turn, folded from its committed log."""
    last = list(runs_of(read_jsonl(golden.jsonl_path)).values())[-1]
    return {step: fields for step, fields in comparable(fold(last).state).items() if fields}


def test_the_registry_lists_every_demo_once_with_its_model() -> None:
    flows = demo_flows(0.005)
    ids = [flow.id for flow, _ in flows]
    assert ids == ["HotelFlow", "ResearchFlow", "ConflictFlow", "ExpenseFlow", "BusFlow",
                   "AtomicFlow", "CancelFlow", "TimingFlow", "FanOutFlow", "ResearchDesk",
                   "Researcher"]
    logic_only = {"FanOutFlow", "ResearchDesk", "Researcher"}
    assert sorted(i for i in ids if i not in logic_only) == sorted(GOLDEN_OF)
    # The logic-only demos call no model; every other demo comes with its scripted model.
    assert all(isinstance(model, Model) for flow, model in flows if flow.id not in logic_only)
    assert all(model is None for flow, model in flows if flow.id in logic_only)
    assert all(flow.unit == 0.005 for flow, _ in flows
               if issubclass(flow, DemoFlow) or flow.id in ("ResearchDesk", "Researcher"))


def test_the_latency_scales_the_flow_and_its_limits() -> None:
    slow, _ = cancel_flow(0.3)
    fast, _ = cancel_flow(0.005)
    assert (slow.id, fast.id) == ("CancelFlow", "CancelFlow")
    assert slow().config_parallel_execution().cancellation_grace == pytest.approx(1.8)
    assert fast().config_parallel_execution().cancellation_grace == pytest.approx(0.03)


async def test_every_demo_succeeds_and_ends_in_its_golden_state_on_any_backend() -> None:
    flows = [golden.build(golden.latency) for golden in DEMO_GOLDENS]
    models = {flow.id: model for flow, model in flows}

    def model_for(flow_id: str) -> Model | None:
        return models[flow_id]

    classes: list[type[Flow]] = [flow for flow, _ in flows]
    engine = FlowEngine(flows=classes, model_override=model_for)
    for flow in classes:
        golden = GOLDEN_OF[flow.id]
        session_id = golden.session_id  # the hotel confirmation number derives from it
        for message in golden.turns:
            reply = await engine.run(flow.id, message, session_id, golden.config)
            assert reply.success, (flow.id, message, reply.message)
        doc = await engine.store.load(session_id)
        assert doc is not None
        saved = {record.name: record.state for record in doc.flow.steps}
        state = {step: fields for step, fields in comparable(saved).items() if fields}
        assert state == committed_final_state(golden), flow.id


@pytest.mark.anyio
async def test_fan_out_flow_joins_every_branch_and_reduces_them() -> None:
    from picoflow_web.demos.scale import FanOutFlow
    from runtime import FlowEngine

    engine = FlowEngine(flows=[FanOutFlow])
    reply = await engine.run("FanOutFlow", "go", config={"branches": 300, "concurrency": 7})
    assert reply.success, reply.message
    assert reply.message == "300 of 300 branches joined; total 300."
    doc = await engine.store.load(reply.session_id)
    assert doc is not None
    by_key = doc.step_record("Tick").state["by_key"]  # type: ignore[union-attr]
    assert by_key == {f"t{i}": i for i in range(300)}


@pytest.mark.anyio
async def test_fan_out_flow_fails_every_nth_branch_and_publishes_the_rest() -> None:
    from picoflow_web.demos.scale import FanOutFlow
    from runtime import FlowEngine

    engine = FlowEngine(flows=[FanOutFlow])
    reply = await engine.run("FanOutFlow", "go", config={"branches": 100, "fail_every": 7})
    assert reply.success, reply.message
    assert reply.message == "86 of 100 branches joined; total 86."
    doc = await engine.store.load(reply.session_id)
    assert doc is not None
    by_key = doc.step_record("Tick").state["by_key"]  # type: ignore[union-attr]
    assert sorted(by_key.values()) == [i for i in range(100) if (i + 1) % 7]
