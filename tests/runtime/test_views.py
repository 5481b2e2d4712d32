"""``fork_views`` makes what ``BranchView(...)`` makes: every field, and the path's text as
``format_path`` writes it, for root and nested barriers, first and later ordinals."""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType
from typing import Any

import pytest

from runtime.barrier.reducers import Channel
from runtime.barrier.types import BarrierUsage, CancelToken, format_path
from runtime.barrier.views import BranchView, Snapshot, fork_views
from runtime.errors import ParallelMutationError


def _channels(step: str) -> dict[str, Channel]:
    return {}


def _state(view: BranchView) -> dict[str, Any]:
    return {f.name: getattr(view, f.name) for f in fields(BranchView)}


def _made_by_init(base: Snapshot, plan: list[tuple[Any, ...]], ordinal: int,
                  cancel: CancelToken, usages: tuple[BarrierUsage, ...], depth: int,
                  barrier_id: str, outer: BranchView | None) -> list[BranchView]:
    prefix = outer.path if outer is not None else ()
    return [BranchView(base=base, step=name, index=i, key=key, path=(*prefix, (ordinal, i)),
                       params=params, cancel=cancel, channels_of=_channels, usages=usages,
                       depth=depth, barrier_id=barrier_id, outer=outer)
            for i, (_, name, key, params, _) in enumerate(plan)]


@pytest.mark.parametrize("ordinal", [0, 2])
@pytest.mark.parametrize("nested", [False, True])
def test_fork_views_match_the_dataclass(ordinal: int, nested: bool) -> None:
    base = Snapshot(states={"A": {"x": 1}}, memory={})
    cancel = CancelToken()
    usages = (BarrierUsage(budget=None),)
    outer = None
    if nested:
        outer = BranchView(base=base, step="B", index=3, key="b", path=((0, 1), (1, 3)),
                           params={}, cancel=cancel, channels_of=_channels, usages=usages,
                           depth=2, barrier_id="1/b1")
    plan = [(None, "A", f"k{i}", MappingProxyType({"i": i}), None if i else "hi")
            for i in range(12)]
    barrier_id = f"{outer.path_str}/b{ordinal}" if outer else f"b{ordinal}"
    depth = 3 if nested else 1

    made = fork_views(base, plan, ordinal, cancel, _channels, usages, depth, barrier_id, outer)
    expected = _made_by_init(base, plan, ordinal, cancel, usages, depth, barrier_id, outer)

    assert [_state(v) for v in made] == [_state(v) for v in expected]
    assert [v.path_str for v in made] == [format_path(v.path) for v in expected]
    # Views start with shared read-only empties; what one branch writes never reaches a
    # sibling, and a write cannot land in the shared empties themselves.
    first, second = made[0], made[1]
    first.write("A", {"x": 2}, ())
    first.add_violation(ParallelMutationError("probe"))
    first.memory_of("A").append("note")  # type: ignore[arg-type]
    assert (second.writes, second.violations, second.memory) == ({}, (), {})
    assert first.writes["A"]["x"].value == 2 and len(first.violations) == 1
    assert second.state_of("A") == {"x": 1} and first.state_of("A") == {"x": 2}
    with pytest.raises((TypeError, AttributeError)):
        second.writes["A"] = {}  # type: ignore[index]
    third = fork_views(base, plan, ordinal, cancel, _channels, usages, depth, barrier_id,
                       outer)[2]
    assert (third.writes, third.violations, third.overridden) == ({}, (), ())
