"""What a branch could not see: its siblings' drafts and their inner joins' results.

The seed's visibility table, row 3: the outer caller starts B and C, B forks D and E; once
D and E join, their state is visible to B, and C keeps its fork view. So C's list of what
it could NOT see names B's drafts and what D's and E's join published into B's scope, in
both folds.
"""

from __future__ import annotations

from typing import Any

from runtime import events as ev
from runtime.events import fold, view_at
from tests.contract.node_fold import first_difference, node_exports, python_export


def _seed_row_three() -> list[ev.Event]:
    items: list[dict[str, Any]] = []

    def add(type_: str, path: str = "", **fields: Any) -> None:
        items.append({"v": 1, "run_id": "r1", "session_id": "s1", "seq": len(items),
                      "time": 0.0, "offset": len(items) / 10, "path": path, "type": type_,
                      **fields})

    def fork(barrier: str, caller: str, base: str, *branches: tuple[str, str]) -> None:
        add("barrier.forked", caller, barrier=barrier, caller_step="Top" if not caller
            else "B", policy="retain-successes", checkpoint="none", max_concurrency=None,
            branch_timeout=None, token_budget=None, base=base, requests=[
                {"index": i, "path": path, "step": step, "key": step, "params": {},
                 "user_message": None} for i, (path, step) in enumerate(branches)])

    add("turn.started", flow="F", message="go")
    add("session.loaded", new_session=True, revision=1, current_step="Top", steps={},
        context={}, tokens={})
    fork("b0", "", "canonical", ("0", "B"), ("1", "C"))
    add("branch.started", "0", barrier="b0", index=0, key="B", step="B")
    add("branch.started", "1", barrier="b0", index=1, key="C", step="C")
    add("state.replaced", "0", step="B", field="plan", value="p", base=None, draft=True)
    fork("0/b0", "0", "0", ("0.0", "D"), ("0.1", "E"))
    for i, (path, step) in enumerate((("0.0", "D"), ("0.1", "E"))):
        add("branch.started", path, barrier="0/b0", index=i, key=step, step=step)
        add("state.replaced", path, step=step, field="found", value=step.lower(), base=None,
            draft=True)
        add("branch.fulfilled", path, barrier="0/b0", index=i, key=step, output=step)
    add("join.published", "0", barrier="0/b0", target="caller-scope", discarded=[], fields=[
        {"step": "D", "field": "found", "value": "d", "deleted": False, "writer": "0.0"},
        {"step": "E", "field": "found", "value": "e", "deleted": False, "writer": "0.1"}])
    add("branch.fulfilled", "1", barrier="b0", index=1, key="C", output="c")
    return [ev.parse_event(item) for item in items]


def test_a_sibling_could_not_see_what_an_inner_join_published_into_its_siblings_scope(
) -> None:
    run = fold(_seed_row_three())
    seen = view_at(run, "1")
    assert seen["state"] == {}  # C keeps its fork view
    assert [(w["path"], w["step"], w["field"], w["value"], w["kind"])
            for w in seen["invisible"]] == [
        ("0", "B", "plan", "p", "draft"),
        ("0", "D", "found", "d", "join"), ("0", "E", "found", "e", "join")]
    # B sees its inner join's results; D does not see E's draft, only E's own.
    assert view_at(run, "0")["state"] == {"B": {"plan": "p"}, "D": {"found": "d"},
                                          "E": {"found": "e"}}
    assert [(w["path"], w["kind"]) for w in view_at(run, "0.0")["invisible"]] == [
        ("0.1", "draft")]


def test_the_browser_fold_lists_the_same_invisible_writes() -> None:
    events = _seed_row_three()
    python, stops = python_export(events)
    (node,) = node_exports([(events, stops)])
    assert first_difference(python, node) is None
