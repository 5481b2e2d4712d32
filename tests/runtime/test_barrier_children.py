"""Children inside branches: direct_result, run_step as a one-child atomic barrier, the
cursor and the sequence trail, the spec's worked nested tree and the seed's A/B timing.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from runtime import (
    DirectResult,
    FlowDefinitionError,
    ParallelBatchResult,
    ParallelOutputError,
    Rule,
    RunStepRequest,
    Step,
    Transition,
    direct_result,
    go,
    tool,
)
from tests.runtime.barrier_helpers import branch_step, failing, run_body, saving
from tests.runtime.helpers import ScriptedFlow, load, make_engine

pytestmark = pytest.mark.anyio


@tool
def finish(self: Step, value: int) -> DirectResult:
    """Finish the branch with a value."""
    self.save_state({"done": value})  # saved before returning: publishes at the join
    return direct_result({"value": value})


def _answering_step(name: str, calls: list[str]) -> type[Step]:
    async def on_response(self: Step, result: Any) -> Any:
        calls.append(self.name)
        return str(result)

    return branch_step(name, attrs={"finish": finish, "on_response": on_response})


async def test_direct_result_ends_the_branch_with_its_value_and_no_second_model_call() -> None:
    on_response_calls: list[str] = []
    Finisher = _answering_step("Finisher", on_response_calls)
    Talker = _answering_step("Talker", on_response_calls)
    rules = [Rule(step="Finisher", tools=[("finish", {"value": 7})], times=1),
             Rule(step="Finisher", text="a second call"),
             Rule(step="Talker", text="plain answer")]

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": Finisher}, {"step": Talker}])

    out = await run_body(body, [Finisher, Talker], rules=rules)
    assert [b.output for b in out.value.branches] == [{"value": 7}, "plain answer"]
    assert [r.step for r in out.model.requests].count("Finisher") == 1
    assert on_response_calls == ["Talker"]
    assert out.state("Finisher") == {"done": 7}
    assert out.doc.flow.current_step == "Coordinator"


async def test_a_second_direct_result_in_one_model_response_rejects_the_branch() -> None:
    Finisher = _answering_step("Finisher", [])
    rules = [Rule(step="Finisher", tools=[("finish", {"value": 1}), ("finish", {"value": 2})])]

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": Finisher}])

    out = await run_body(body, [Finisher], rules=rules)
    branch = out.value.branches[0]
    assert branch.status == "rejected" and isinstance(branch.error, FlowDefinitionError)
    assert "second direct_result()" in str(branch.error)
    assert out.state("Finisher") == {}


async def test_direct_result_outside_a_branch_is_a_definition_error() -> None:
    Finisher = _answering_step("Finisher", [])

    async def body(coord: Step) -> Any:
        return await coord.run_step(Finisher)  # a sequential child, not a branch

    out = await run_body(body, [Finisher], rules=[Rule(step="Finisher",
                                                       tools=[("finish", {"value": 1})])])
    error = out.raised(FlowDefinitionError)
    assert "only for tool handlers of a run_steps() branch" in error.message

    class Top(Step):
        finish = finish

    class TopFlow(ScriptedFlow):
        def define_steps(self) -> list[type[Step]]:
            return [Top]

    engine, _ = make_engine(TopFlow, rules=[Rule(step="Top", tools=[("finish", {"value": 1})])])
    reply = await engine.run("TopFlow", "hi")
    assert (reply.success, reply.error_code) == (False, "flow_definition")
    assert (await load(engine, reply.session_id)).flow.current_step == "Top"


@tool
def finish_odd(self: Step) -> DirectResult:
    """Finish with a value that is not JSON."""
    return direct_result({1, 2})


async def test_a_non_json_direct_result_invalidates_the_barrier() -> None:
    Odd = branch_step("Odd", attrs={"finish_odd": finish_odd})
    Good = branch_step("Good", saving({"g": 1}))

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": Good}, {"step": Odd}])

    out = await run_body(body, [Odd, Good], rules=[Rule(step="Odd", tools=[("finish_odd", {})])])
    assert isinstance(out.error, ParallelOutputError)
    assert out.state("Good") == {}


async def test_run_step_inside_a_branch_publishes_the_childs_writes_into_the_branch() -> None:
    seen: dict[str, Any] = {}
    Child = branch_step("Child", saving({"c": 1}, 5))

    async def parent(step: Step, message: str | None) -> Any:
        output = await step.run_step(Child)
        seen["child state"] = step.flow.get_step_state("Child")
        return output

    Parent = branch_step("Parent", parent)

    async def body(coord: Step) -> Any:
        batch = await coord.run_steps([{"step": Parent}])
        return batch, coord.flow.sequence

    out = await run_body(body, [Parent, Child])
    batch, sequence = out.value
    assert batch.branches[0].output == 5
    assert {k: v for k, v in seen["child state"].items() if k != "_saveOn"} == {"c": 1}
    assert out.state("Child") == {"c": 1}
    assert [(e.level, e.step_name) for e in sequence][1:] == [(2, "Parent"), (3, "Child")]


@pytest.mark.parametrize("parent_catches", [True, False])
async def test_run_step_inside_a_branch_rethrows_the_childs_error_and_drops_its_writes(
    parent_catches: bool,
) -> None:
    seen: dict[str, Any] = {}
    Child = branch_step("Child", failing("child broke", {"c": 1}))

    async def parent(step: Step, message: str | None) -> Any:
        try:
            return await step.run_step(Child)
        except ValueError as exc:
            seen["error"] = exc
            seen["child state"] = step.flow.get_step_state("Child")
            if not parent_catches:
                raise
            return "recovered"

    Parent = branch_step("Parent", parent)

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": Parent}])

    out = await run_body(body, [Parent, Child])
    assert str(seen["error"]) == "child broke"
    assert seen["child state"] == {}
    branch = out.value.branches[0]
    if parent_catches:
        assert (branch.status, branch.output) == ("fulfilled", "recovered")
    else:
        assert branch.status == "rejected" and branch.error is seen["error"]
    assert out.state("Child") == {}


async def test_branches_never_move_the_cursor_and_record_one_trail_level_per_depth() -> None:
    E = branch_step("E", saving({"e": 1}))

    async def forks(step: Step, message: str | None) -> Any:
        nested = {"B": "D", "D": "E"}.get(step.name)
        if nested:
            await step.run_steps([{"step": nested}])

    B, C, D = branch_step("B", forks), branch_step("C", forks), branch_step("D", forks)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": B}, {"step": C}])

    out = await run_body(body, [B, C, D, E])
    trail = [(e.level, e.step_name) for e in out.doc.flow.sequence]
    assert trail[0] == (1, "Coordinator")
    assert sorted(trail[1:]) == [(2, "B"), (2, "C"), (3, "D"), (4, "E")]
    assert trail.index((2, "B")) < trail.index((3, "D")) < trail.index((4, "E"))
    assert out.doc.flow.current_step == "Coordinator"
    assert out.state("E") == {"e": 1}


# -- the spec's worked nested tree (BasicFlow) -------------------------------------------


class Film(BaseModel):
    title: str
    genre: str
    releaseYear: int
    rating: float
    summary: str


class NameStep(Step):
    @tool
    async def user_name(self, name: str) -> Transition:
        """Record the user's name."""
        self.flow.save_transient_step_state(InContextStep, {"msg": f"A film for {name}."})
        answer = await self.run_step(InContextStep)
        self.save_state({"name": name, "inContext": json.loads(answer)})
        return go(DOBStep)


class InContextStep(Step):
    def output_schema(self) -> type[BaseModel]:
        return Film

    async def on_enter(self) -> None:
        batch = await self.run_steps([
            RunStepRequest(ConcurStep1, user_message="Run the 1st concurrent step."),
            RunStepRequest(ConcurStep2, user_message="Run the 2nd concurrent step."),
        ])
        if batch.rejected:
            raise RuntimeError(f"concurrent steps failed: {batch.rejected[0].error}")
        self.save_state({"concurStep1": batch.fulfilled[0].output,
                         "concurStep2": batch.fulfilled[1].output})

    async def run(self, user_message: str | None = None) -> str:
        return await super().run(self.get_transient_state("msg"))


class ConcurStep1(Step):
    async def on_enter(self) -> None:
        self.save_state({"concurStep1": "Starting nested ConcurStep3."})
        await self.run_steps([RunStepRequest(ConcurStep3, user_message="Run step 3.")])

    @tool
    def complete_concurrent_step1(self) -> DirectResult:
        """Mark step 1 complete."""
        self.save_state({"concurStep1": {"completed": True}})
        return direct_result({"completed": True})


class ConcurStep2(Step):
    async def on_enter(self) -> None:
        await self.run_steps([RunStepRequest(ConcurStep4, user_message="Run step 4.")])

    async def on_response(self, result: Any) -> str:
        self.save_state({"concurStep2": result})
        return str(result)


class _Leaf(Step):
    async def on_response(self, result: Any) -> str:
        self.save_state({self.name[0].lower() + self.name[1:]: result})
        return str(result)


class ConcurStep3(_Leaf):
    pass


class ConcurStep4(_Leaf):
    pass


class DOBStep(Step):
    pass


class BasicFlow(ScriptedFlow):
    def define_steps(self) -> list[type[Step]]:
        return [NameStep, InContextStep, ConcurStep1, ConcurStep2, ConcurStep3, ConcurStep4,
                DOBStep]


FILM = {"title": "Arrival", "genre": "sci-fi", "releaseYear": 2016, "rating": 8.5,
        "summary": "Linguists meet visitors."}


async def test_the_worked_nested_tree_moves_the_cursor_once_and_records_levels_two_to_four(
) -> None:
    engine, _ = make_engine(BasicFlow, rules=[
        Rule(step="NameStep", tools=[("user_name", {"name": "Ada"})]),
        Rule(step="ConcurStep1", tools=[("complete_concurrent_step1", {})]),
        Rule(step="ConcurStep2", text="Step 2 done."),
        Rule(step="ConcurStep3", text="Step 3 done."),
        Rule(step="ConcurStep4", text="Step 4 done."),
        Rule(step="InContextStep", text=json.dumps(FILM)),
        Rule(step="DOBStep", text="When were you born?"),
    ])
    reply = await engine.run("BasicFlow", "My name is Ada.")
    assert reply.success, reply.message
    assert reply.message == "When were you born?"
    doc = await load(engine, reply.session_id)
    assert doc.flow.current_step == "DOBStep"
    states = {s.name: {k: v for k, v in s.state.items() if k != "_saveOn"}
              for s in doc.flow.steps}
    assert states["ConcurStep1"] == {"concurStep1": {"completed": True}}
    assert states["ConcurStep2"] == {"concurStep2": "Step 2 done."}
    assert states["ConcurStep3"] == {"concurStep3": "Step 3 done."}
    assert states["ConcurStep4"] == {"concurStep4": "Step 4 done."}
    assert states["InContextStep"] == {"concurStep1": {"completed": True},
                                       "concurStep2": "Step 2 done."}
    assert states["NameStep"] == {"name": "Ada", "inContext": FILM}
    trail = [(e.level, e.step_name) for e in doc.flow.sequence]
    assert [t for t in trail if t[0] == 1] == [(1, "NameStep"), (1, "DOBStep")]
    assert trail[-1] == (1, "DOBStep")
    assert sorted(trail[1:-1]) == [(2, "InContextStep"), (3, "ConcurStep1"), (3, "ConcurStep2"),
                                   (4, "ConcurStep3"), (4, "ConcurStep4")]


# -- the seed's A/B example: who owns the next operation ----------------------------------


async def test_a_coordinator_worker_starts_its_next_step_without_waiting_for_its_sibling(
) -> None:
    # The claim is causal: A's coordinator starts A2 as soon as A1 ends, while B1 still
    # runs. So no clock: A1 ends only once B1 has started, and B1 ends only once A2 has
    # ended. A runtime that made A2 wait for B1 would deadlock here, and B1 would fail
    # when its wait times out.
    names = ("A1", "A2", "B1", "B2")
    marks: list[str] = []
    started = {name: anyio.Event() for name in names}
    ended = {name: anyio.Event() for name in names}
    held_until = {"A1": started["B1"], "B1": ended["A2"]}

    def make(name: str) -> type[Step]:
        async def work(step: Step, message: str | None) -> Any:
            marks.append(f"{name} started")
            started[name].set()
            if name in held_until:
                with anyio.fail_after(5):
                    await held_until[name].wait()
            marks.append(f"{name} ended")
            ended[name].set()
            return name

        return branch_step(name, work)

    steps = {name: make(name) for name in names}

    async def worker(step: Step, message: str | None) -> Any:
        prefix = step.parallel_invocation().key
        for suffix in ("1", "2"):
            await step.run_step(steps[prefix + suffix])
        return prefix

    Worker = branch_step("Worker", worker)

    async def body(coord: Step) -> Any:
        batch = await coord.run_steps([{"step": Worker, "key": "A"},
                                       {"step": Worker, "key": "B"}])
        marks.append("caller resumed")
        return batch

    out = await run_body(body, [Worker, *steps.values()])
    assert [b.status for b in out.value.branches] == ["fulfilled", "fulfilled"], marks
    order = [marks.index(mark) for mark in (
        "B1 started", "A1 ended", "A2 started", "A2 ended", "B1 ended",  # A2 within B1
        "B2 started", "B2 ended", "caller resumed")]  # B2 after B1; the caller after B
    assert order == sorted(order), marks
    assert marks[-1] == "caller resumed"


async def test_one_shared_batch_makes_the_dependent_step_wait_for_the_slowest_sibling() -> None:
    # B1 is the slowest of the first batch by construction: it ends only once A1 has.
    marks: list[str] = []
    a1_ended = anyio.Event()

    def make(name: str) -> type[Step]:
        async def work(step: Step, message: str | None) -> Any:
            marks.append(f"{name} started")
            if name == "B1":
                with anyio.fail_after(5):
                    await a1_ended.wait()
            marks.append(f"{name} ended")
            if name == "A1":
                a1_ended.set()
            return name

        return branch_step(name, work)

    steps = {name: make(name) for name in ("A1", "A2", "B1", "B2")}

    async def body(coord: Step) -> Any:
        await coord.run_steps([{"step": steps["A1"]}, {"step": steps["B1"]}])
        return await coord.run_steps([{"step": steps["A2"]}, {"step": steps["B2"]}])

    await run_body(body, list(steps.values()))
    assert marks.index("A2 started") > marks.index("B1 ended"), marks  # A2 idled for B1
