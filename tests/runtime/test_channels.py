"""The built-in channels' rules: one statement, read alike by the join and the fold."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.barrier import ContributionMeta, StepChannels
from runtime.events import channels

CONTRIBUTIONS: dict[str, list[Any]] = {
    "sum": [1, 2.5, -3],
    "append": [1, [2], {"x": 3}],
    "keyed_by_branch": ["a", None, {"b": 1}],
    "merge_record": [{"a": 1}, {"b": 2}, {"a": 3}],
}


@pytest.mark.parametrize("kind", channels.FOLDED_CHANNELS)
def test_the_join_the_branch_view_and_the_fold_reduce_a_channel_alike(kind: str) -> None:
    channel = getattr(StepChannels, kind)()
    items = [(ContributionMeta(path=((i, 0),), key=f"k{i}", seq=1), value)
             for i, value in enumerate(CONTRIBUTIONS[kind])]
    joined = channel.reduce(channel.initial(False, None), items)
    stepped = channel.initial(False, None)
    for meta, value in items:
        stepped = channel.reducer(stepped, value, meta)
    folded, present = None, False
    for meta, value in items:
        folded, present = channels.reduce_one(kind, present, folded, value, meta.key), True
    assert joined == stepped == folded


@pytest.mark.parametrize(("kind", "acc", "value", "rule", "message"), [
    ("sum", 1, "2", "sum() channel needs numbers", "sum() channel needs numbers, got str"),
    ("sum", True, 1, "sum() channel needs numbers", "sum() channel needs numbers, got bool"),
    ("append", {}, 1, "append() channel needs a list",
     "append() channel needs a list, found dict"),
    ("keyed_by_branch", [], 1, "keyed_by_branch() channel needs an object",
     "keyed_by_branch() channel needs an object, found list"),
    ("merge_record", {}, [1], "merge_record() channel merges objects only",
     "merge_record() channel merges objects only"),
])
def test_a_refusal_says_what_the_channel_needs_and_the_join_what_it_found(
    kind: str, acc: Any, value: Any, rule: str, message: str,
) -> None:
    meta = ContributionMeta(path=((0, 0),), key="k", seq=1)
    with pytest.raises(TypeError) as joined:
        getattr(StepChannels, kind)().reduce(acc, [(meta, value)])
    with pytest.raises(channels.ChannelError) as folded:
        channels.reduce_one(kind, True, acc, value, "k")
    assert str(joined.value) == message
    assert folded.value.rule == rule


def test_a_fold_keeps_a_truncated_field_and_names_a_channel_it_has_no_rule_for() -> None:
    marker = {"truncated": True, "preview": "[1, 2"}
    assert channels.reduce_one("append", True, marker, 3, "k") == marker
    with pytest.raises(channels.ChannelError, match='no fold for channel "median"'):
        channels.reduce_one("median", False, None, 1, "k")
