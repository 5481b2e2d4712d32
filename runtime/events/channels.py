"""The built-in channels' reducer rules, on plain JSON values: the one statement of them.

A join (``runtime.barrier``) reduces every contribution to a field at once; a branch's view
does the same for its own; the fold (``runtime.events.fold``) reduces one
``state.contributed`` at a time onto the value before, because an event naming its
``channel`` carries the contribution, not the field. All three must agree to the value and
to the refusal, so the rules live here once. The module is pure (standard library only):
the fold may not import the barrier, and the barrier may import the event package, so
this is where both can read it. The browser's fold restates the rules in JavaScript; the
goldens check it against the Python fold.

A rule refuses with :class:`ChannelError`: :attr:`ChannelError.rule` is what the channel
needs (what a fold records), the message adds the type it found (what a join reports).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

FOLDED_CHANNELS = ("sum", "append", "keyed_by_branch", "merge_record")
"""The built-in channels both folds reduce themselves (``state.contributed`` ``channel``)."""

_EMPTY: dict[str, type[Any]] = {"sum": int, "append": list, "keyed_by_branch": dict,
                                "merge_record": dict}

_NEEDS = {
    "sum": "sum() channel needs numbers",
    "append": "append() channel needs a list",
    "keyed_by_branch": "keyed_by_branch() channel needs an object",
    "merge_record": "merge_record() channel merges objects only",
}

_FOUND = {"sum": "got", "append": "found", "keyed_by_branch": "found"}
"""How a refusal names the type it met (merge_record's names none)."""


class ChannelError(TypeError):
    """A value a built-in channel's reducer refuses, or a channel with no rule here."""

    def __init__(self, rule: str, found: str = "") -> None:
        super().__init__(f"{rule}, {found}" if found else rule)
        self.rule = rule
        """What the channel needs, without what it found."""


def empty(channel: str) -> Any:
    """The value a field absent at the fork starts from (a fresh one each call)."""
    return _EMPTY[channel]()


def number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (a bool is not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def takes_accumulator(channel: str, acc: Any) -> bool:
    """Whether the built-in ``channel`` reduces onto ``acc``."""
    if channel == "append":
        return isinstance(acc, list)
    if channel == "sum":
        return number(acc)
    return isinstance(acc, dict)  # keyed_by_branch, merge_record


def takes_value(channel: str, value: Any) -> bool:
    """Whether the built-in ``channel`` takes a contributed ``value``."""
    if channel == "sum":
        return number(value)
    if channel == "merge_record":
        return isinstance(value, dict)
    return True  # append, keyed_by_branch: any value


def check(channel: str, acc: Any, values: Iterable[Any]) -> None:
    """Raise :class:`ChannelError` unless ``channel`` takes ``acc`` and every value."""
    if channel not in _NEEDS:
        raise ChannelError(f"no fold for channel {json.dumps(channel)}")
    if not takes_accumulator(channel, acc):
        raise _refused(channel, acc)
    if channel in ("sum", "merge_record"):
        for value in values:
            if not takes_value(channel, value):
                raise _refused(channel, value)


def _refused(channel: str, operand: Any) -> ChannelError:
    word = _FOUND.get(channel)
    return ChannelError(_NEEDS[channel], f"{word} {type(operand).__name__}" if word else "")


def combine(channel: str, acc: Any, value: Any, key: str) -> Any:
    """``acc`` after one contribution ``value`` of the branch keyed ``key``."""
    check(channel, acc, (value,))
    if channel == "sum":
        return acc + value
    if channel == "append":
        return [*acc, value]
    if channel == "keyed_by_branch":
        return {**acc, key: value}
    return {**acc, **value}


def combine_all(channel: str, acc: Any, items: Sequence[tuple[str, Any]]) -> Any:
    """``acc`` after the contributions ``(branch key, value)`` in order, in one pass: the
    same value as :func:`combine` one at a time, without a copy per contribution."""
    check(channel, acc, (value for _, value in items))
    if channel == "sum":
        return acc + sum(value for _, value in items)
    if channel == "append":
        return [*acc, *(value for _, value in items)]
    if channel == "keyed_by_branch":
        return {**acc, **{key: value for key, value in items}}
    merged = dict(acc)
    for _, value in items:
        merged.update(value)
    return merged


def truncated(value: Any) -> bool:
    """Whether ``value`` is the marker an event carries for a value too large to carry."""
    return isinstance(value, dict) and value.get("truncated") is True and "preview" in value


def reduce_one(channel: str, present: bool, before: Any, value: Any, key: str) -> Any:
    """The field after one contribution, as a fold reduces it: onto ``before`` (the
    channel's empty value when absent). A field an event could only carry truncated stays
    that marker: its whole value was never in the events."""
    if channel not in _NEEDS:
        raise ChannelError(f"no fold for channel {json.dumps(channel)}")
    acc = before if present else empty(channel)
    if truncated(acc):
        return acc
    return combine(channel, acc, value, key)
