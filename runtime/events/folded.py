"""The built-in reducers as the folds apply them, one ``state.contributed`` at a time.

A contribution whose event names its ``channel`` (one of
:data:`~runtime.events.schema.FOLDED_CHANNELS`) does not carry the field's reduced value:
the fold reduces the contribution onto the value the contributor's view held just before.
These are the runtime's reducers (``runtime/barrier/reducers.py``) restated for plain JSON,
without the runtime's code; the browser's fold has the same in ``fold_reduce.js``, and the
goldens check all three agree.
"""

from __future__ import annotations

import json
from typing import Any

EMPTY: dict[str, Any] = {"sum": 0, "append": [], "keyed_by_branch": {}, "merge_record": {}}


class FoldReduceError(ValueError):
    """A contribution the named reducer cannot take (a corrupt or foreign trace)."""


def truncated(value: Any) -> bool:
    """Whether ``value`` is the marker an event carries for a value too large to carry."""
    return isinstance(value, dict) and value.get("truncated") is True and "preview" in value


def reduce_one(channel: str, present: bool, before: Any, value: Any, key: str) -> Any:
    """The field after one contribution ``value`` of the branch keyed ``key``, reduced by
    the built-in ``channel`` onto ``before`` (the channel's empty value when absent).

    A field an event could only carry truncated stays that marker: its whole value was
    never in the events. Raises :class:`FoldReduceError` for a value the reducer refuses.
    """
    if channel not in EMPTY:
        raise FoldReduceError(f"no fold for channel {json.dumps(channel)}")
    acc = before if present else EMPTY[channel]
    if truncated(acc):
        return acc
    if channel == "sum":
        if not (_number(acc) and _number(value)):
            raise FoldReduceError("sum() channel needs numbers")
        return acc + value
    if channel == "append":
        if not isinstance(acc, list):
            raise FoldReduceError("append() channel needs a list")
        return [*acc, value]
    if channel == "keyed_by_branch":
        if not isinstance(acc, dict):
            raise FoldReduceError("keyed_by_branch() channel needs an object")
        return {**acc, key: value}
    if not (isinstance(acc, dict) and isinstance(value, dict)):
        raise FoldReduceError("merge_record() channel merges objects only")
    return {**acc, **value}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
