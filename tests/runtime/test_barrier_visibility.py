"""What a branch can see: the seed's "State visibility and nested joins" table, row by row.

The outer caller (the top-level coordinator) runs B and C; B forks D and E. Events force
the interleavings the table talks about, so every assertion is about a moment that
really happened, not about a lucky schedule.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime import ParallelBatchResult, Rule, Step, human_message
from tests.runtime.barrier_helpers import (
    Outcome,
    branch_step,
    failing,
    run_body,
    saving,
    user_state,
    wait,
)
from tests.runtime.helpers import contents, memory

pytestmark = pytest.mark.anyio


def _view(step: Step, name: str) -> dict[str, Any]:
    return user_state(step.flow.get_step_state(name))


async def _b_and_c_with_d_and_e(*, b_fails_after_join: bool) -> tuple[Outcome, dict[str, Any]]:
    """Outer caller runs B and C; B saves, forks D and E, reads, then maybe fails.

    C reads everything only after B's inner join happened (an event forces it), then
    saves its own state. Returns the turn and what each invocation saw.
    """
    seen: dict[str, Any] = {}
    inner_joined = anyio.Event()
    D = branch_step("D", saving({"d": "from D"}, "D out"))
    E = branch_step("E", saving({"e": "from E"}, "E out"))

    async def b(step: Step, message: str | None) -> Any:
        step.save_state({"b": "before fork"})
        inner = await step.run_steps([{"step": D}, {"step": E}])
        seen["inner"] = inner
        seen["B after join"] = {name: _view(step, name) for name in ("B", "D", "E")}
        inner_joined.set()
        step.save_state({"b": "after join"})
        if b_fails_after_join:
            raise RuntimeError("B broke after its inner join")
        return "B out"

    async def c(step: Step, message: str | None) -> Any:
        await wait(inner_joined)
        seen["C after inner join"] = {name: _view(step, name) for name in ("B", "D", "E")}
        step.save_state({"c": "from C"})
        return "C out"

    B, C = branch_step("B", b), branch_step("C", c)

    async def body(coord: Step) -> ParallelBatchResult:
        return await coord.run_steps([{"step": B}, {"step": C}])

    return await run_body(body, [B, C, D, E]), seen


async def test_a_callers_change_before_the_inner_fork_is_visible_to_its_branches() -> None:
    seen: dict[str, Any] = {}

    async def read_b(step: Step, message: str | None) -> Any:
        seen[step.name] = _view(step, "B")
        return None

    D, E = branch_step("D", read_b), branch_step("E", read_b)

    async def b(step: Step, message: str | None) -> Any:
        step.save_state({"phase": "forking"})
        await step.run_steps([{"step": D}, {"step": E}])
        return None

    B = branch_step("B", b)

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("B", {"phase": "initial", "keep": 1})
        return await coord.run_steps([{"step": B}])

    await run_body(body, [B, D, E])
    assert seen == {"D": {"phase": "forking", "keep": 1}, "E": {"phase": "forking", "keep": 1}}


async def test_siblings_see_their_own_changes_but_never_each_others_in_flight_changes() -> None:
    wrote = {"D": anyio.Event(), "E": anyio.Event()}
    seen: dict[str, Any] = {}

    async def write_then_read(step: Step, message: str | None) -> Any:
        other = "E" if step.name == "D" else "D"
        step.save_state({step.name.lower(): 1})
        wrote[step.name].set()
        await wait(wrote[other])  # the sibling has written before either reads
        seen[step.name] = {"own": user_state(step.get_state()), "sibling": _view(step, other)}
        return None

    D, E = branch_step("D", write_then_read), branch_step("E", write_then_read)

    async def b(step: Step, message: str | None) -> Any:
        return (await step.run_steps([{"step": D}, {"step": E}])).publication.fields

    B = branch_step("B", b)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": B}])

    out = await run_body(body, [B, D, E])
    assert seen == {"D": {"own": {"d": 1}, "sibling": {}}, "E": {"own": {"e": 1}, "sibling": {}}}
    assert out.value.fulfilled[0].output == [["D", "d"], ["E", "e"]]  # outputs are plain JSON
    assert (out.state("D"), out.state("E")) == ({"d": 1}, {"e": 1})


async def test_two_branches_of_one_step_class_write_separate_private_copies() -> None:
    wrote = {"left": anyio.Event(), "right": anyio.Event()}
    seen: dict[str, Any] = {}

    async def side(step: Step, message: str | None) -> Any:
        key = step.parallel_invocation().key
        other = "right" if key == "left" else "left"
        step.save_state({key: True, "shared": f"{key} draft"})
        wrote[key].set()
        await wait(wrote[other])
        seen[key] = user_state(step.get_state())
        if key == "right":
            raise ValueError("right gives up")  # its drafts of "shared" are discarded
        return None

    W = branch_step("W", side)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": W, "key": "left"}, {"step": W, "key": "right"}])

    out = await run_body(body, [W])
    assert seen == {"left": {"left": True, "shared": "left draft"},
                    "right": {"right": True, "shared": "right draft"}}
    assert out.state("W") == {"left": True, "shared": "left draft"}


async def test_an_inner_join_is_visible_to_its_caller_while_the_callers_sibling_keeps_its_view(
) -> None:
    _, seen = await _b_and_c_with_d_and_e(b_fails_after_join=False)
    assert seen["B after join"] == {"B": {"b": "before fork"}, "D": {"d": "from D"},
                                    "E": {"e": "from E"}}
    assert seen["C after inner join"] == {"B": {}, "D": {}, "E": {}}
    publication = seen["inner"].publication
    assert (publication.target, publication.published) == ("caller-scope", True)
    assert publication.fields == (("D", "d"), ("E", "e"))


async def test_a_fulfilled_caller_and_its_descendants_state_reach_the_saved_session() -> None:
    out, _ = await _b_and_c_with_d_and_e(b_fails_after_join=False)
    assert [b.status for b in out.value.branches] == ["fulfilled", "fulfilled"]
    assert {name: out.state(name) for name in "BCDE"} == {
        "B": {"b": "after join"}, "C": {"c": "from C"}, "D": {"d": "from D"},
        "E": {"e": "from E"},
    }
    assert out.value.publication.target == "canonical"


async def test_a_caller_failing_after_its_inner_join_discards_its_and_its_descendants_updates(
) -> None:
    out, seen = await _b_and_c_with_d_and_e(b_fails_after_join=True)
    assert seen["inner"].publication.published  # the inner join did publish, into B's scope
    batch: ParallelBatchResult = out.value
    assert [b.status for b in batch.branches] == ["rejected", "fulfilled"]
    assert str(batch.rejected[0].error) == "B broke after its inner join"
    assert {name: out.state(name) for name in "BCDE"} == {
        "B": {}, "C": {"c": "from C"}, "D": {}, "E": {},
    }
    assert batch.publication.fields == (("C", "c"),)
    assert [(d.index, d.reason) for d in batch.publication.discarded] == [(0, "rejected")]


async def test_branches_read_context_and_other_steps_state_as_the_caller_saw_it_at_the_fork(
) -> None:
    seen: dict[str, Any] = {}

    async def read(step: Step, message: str | None) -> Any:
        other = step.flow.get_step_state("Other")
        seen["lang"] = step.get_context("config.lang")
        seen["other"] = user_state(other)
        seen["caller stage"] = step.flow.get_step_state("Coordinator", "stage")
        seen["own"] = user_state(step.get_state())
        other["v"] = "changed by the reader"  # a copy: nobody else sees this
        seen["other again"] = user_state(step.flow.get_step_state("Other"))
        return None

    Reader = branch_step("Reader", read)
    Other = branch_step("Other", saving({"never": "runs"}))

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("Other", {"v": 1})
        coord.flow.save_step_state("Reader", {"mine": "from caller"})
        coord.save_state({"stage": "forking"})
        return await coord.run_steps([{"step": Reader}])

    out = await run_body(body, [Reader, Other], context={"lang": "fr"})
    assert seen == {"lang": "fr", "other": {"v": 1}, "caller stage": "forking",
                    "own": {"mine": "from caller"}, "other again": {"v": 1}}
    assert out.state("Other") == {"v": 1}


async def test_a_removal_in_a_branch_hides_the_field_from_its_view_and_publishes_a_removal(
) -> None:
    seen: dict[str, Any] = {}
    dropped = anyio.Event()

    async def drop(step: Step, message: str | None) -> Any:
        step.remove_state("stale")
        seen["own"] = user_state(step.get_state())
        dropped.set()
        return None

    async def look(step: Step, message: str | None) -> Any:
        await wait(dropped)  # the sibling's removal is made, not yet published
        seen["sibling"] = _view(step, "Dropper")
        return None

    Dropper, Looker = branch_step("Dropper", drop), branch_step("Looker", look)

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("Dropper", {"stale": 1, "kept": 2})
        return await coord.run_steps([{"step": Dropper}, {"step": Looker}])

    out = await run_body(body, [Dropper, Looker])
    assert seen == {"own": {"kept": 2}, "sibling": {"stale": 1, "kept": 2}}
    assert out.state("Dropper") == {"kept": 2}


async def test_a_concurrent_second_barrier_of_one_caller_keeps_its_fork_view() -> None:
    first_joined = anyio.Event()
    seen: dict[str, Any] = {}

    async def late_reader(step: Step, message: str | None) -> Any:
        await wait(first_joined)
        seen["X"] = _view(step, "X")
        return None

    X = branch_step("X", saving({"x": 1}))
    Y = branch_step("Y", late_reader)

    async def body(coord: Step) -> Any:
        async def first() -> None:
            await coord.run_steps([{"step": X}])
            first_joined.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await coord.run_steps([{"step": Y}])

    out = await run_body(body, [X, Y])
    assert out.error is None
    assert seen == {"X": {}}


async def test_a_callers_write_after_its_fork_stays_invisible_to_the_forked_branches() -> None:
    forked = anyio.Event()
    written = anyio.Event()
    seen: dict[str, Any] = {}

    async def child(step: Step, message: str | None) -> Any:
        forked.set()
        await wait(written)
        seen["B"] = _view(step, "B")
        return None

    D = branch_step("D", child)

    async def b(step: Step, message: str | None) -> Any:
        step.save_state({"phase": "at fork"})
        async with anyio.create_task_group() as tg:
            tg.start_soon(step.run_steps, [{"step": D}])
            await wait(forked)
            step.save_state({"phase": "after fork"})
            written.set()
        return _view(step, "B")

    B = branch_step("B", b)

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": B}])

    out = await run_body(body, [B, D])
    assert seen == {"B": {"phase": "at fork"}}
    assert out.value.branches[0].output == {"phase": "after fork"}
    assert out.state("B") == {"phase": "after fork"}


async def test_a_branch_model_call_sees_the_callers_history_in_a_private_clone() -> None:
    requests: dict[str, list[str]] = {}

    def answer(request: Any) -> str:
        texts = contents(request.messages, "human", "ai")
        requests[texts[-1]] = texts
        return f"answer to {texts[-1]}"

    Worker = branch_step("Worker")

    async def body(coord: Step) -> Any:
        history = coord.flow.require_step("Worker").get_memory()  # seeds the system slot
        history.append(human_message("Coordinator", "caller note"))
        batch = await coord.run_steps([
            {"step": Worker, "key": "a", "user_message": "task a"},
            {"step": Worker, "key": "b", "user_message": "task b"},
        ])
        return batch, contents(coord.flow.get_memory("shared"), "human", "ai")

    out = await run_body(
        body, [lambda flow: Worker(flow).use_memory("shared")],
        rules=[Rule(step="Worker", respond=answer, latency=0.01)],
    )
    batch, caller_history = out.value
    assert [b.output for b in batch.branches] == ["answer to task a", "answer to task b"]
    assert requests == {"task a": ["caller note", "task a"], "task b": ["caller note", "task b"]}
    assert caller_history == ["caller note"]
    assert contents(memory(out.doc, "shared"), "human", "ai") == ["caller note"]


async def test_nested_branches_inherit_the_calling_branchs_memory_clone_and_never_leak_it(
) -> None:
    requests: list[list[str]] = []

    def answer(request: Any) -> str:
        requests.append(contents(request.messages, "human", "ai"))
        return "leaf answer"

    Leaf = branch_step("Leaf")

    async def middle(step: Step, message: str | None) -> Any:
        step.get_memory().append(human_message(step.name, "middle note"))
        batch = await step.run_steps([{"step": Leaf, "user_message": "leaf task"}])
        return contents(step.get_memory(), "human", "ai"), batch.branches[0].output

    Middle = branch_step("Middle", middle)

    async def body(coord: Step) -> Any:
        history = coord.flow.require_step("Middle").get_memory()  # seeds the system slot
        history.append(human_message("Coordinator", "caller note"))
        return await coord.run_steps([{"step": Middle}])

    out = await run_body(
        body,
        [lambda flow: Middle(flow).use_memory("shared"),
         lambda flow: Leaf(flow).use_memory("shared")],
        rules=[Rule(step="Leaf", respond=answer)],
    )
    assert requests == [["caller note", "middle note", "leaf task"]]
    middle_history, leaf_output = out.value.branches[0].output
    assert middle_history == ["caller note", "middle note"]  # the leaf's clone was discarded
    assert leaf_output == "leaf answer"
    assert contents(memory(out.doc, "shared"), "human", "ai") == ["caller note"]


async def test_a_rejected_branchs_reads_and_writes_leave_the_callers_view_untouched() -> None:
    Bad = branch_step("Bad", failing("bad", {"x": "draft"}))

    async def body(coord: Step) -> Any:
        coord.flow.save_step_state("Bad", {"x": "canonical"})
        batch = await coord.run_steps([{"step": Bad}])
        return batch, user_state(coord.flow.get_step_state("Bad"))

    out = await run_body(body, [Bad])
    batch, after = out.value
    assert batch.branches[0].status == "rejected"
    assert after == {"x": "canonical"}
    assert out.state("Bad") == {"x": "canonical"}


async def test_each_branch_gets_a_fresh_instance_configured_like_the_registered_step() -> None:
    # A fan-out makes its branches' instances without Step's own constructor when the
    # step has none of its own: one with a constructor of its own has it called per
    # branch, and both keep the registered step's memory namespace.
    from runtime import LogicStep

    made: list[Step] = []
    ran: list[Step] = []

    class Counted(LogicStep):
        def __init__(self, flow: Any) -> None:
            super().__init__(flow)
            made.append(self)
            self.label = "constructed"

        async def run_logic(self) -> Any:
            ran.append(self)
            return [self.label, self.get_memory_space()]

    class Plain(LogicStep):
        async def run_logic(self) -> Any:
            ran.append(self)
            return [self.get_memory_space(), self.flow is not None]

    async def body(coord: Step) -> Any:
        return await coord.run_steps([{"step": Counted, "key": "a"}, {"step": Counted, "key": "b"},
                                      {"step": Plain, "key": "c"}, {"step": Plain, "key": "d"}])

    out = await run_body(body, [lambda flow: Counted(flow).use_memory("notes"),
                                lambda flow: Plain(flow).use_memory("scratch")])
    assert [branch.output for branch in out.value.branches] == [
        ["constructed", "notes"], ["constructed", "notes"], ["scratch", True],
        ["scratch", True]]
    assert len({id(step) for step in ran}) == 4  # four instances, all alive here
    counted = [step for step in ran if isinstance(step, Counted)]
    assert len(counted) == 2 and all(step in made for step in counted)  # constructed per branch
    assert sum(isinstance(step, Plain) for step in ran) == 2
