"""Reducers: how contributions from parallel branches combine at a join.

A step declares reduced channels in ``parallel_state_channels()``; branches then call
``contribute_state(field, value)``. At the join every contribution to a field — including
those bubbled up from nested joins — is reduced in **request-path order** (then in call
order within one invocation), never in completion order, starting from the value the
caller saw at the fork (or the channel's empty value when the field was absent).

``save_state`` replacements never turn into contributions: declaring a channel does not
make two replacements of one field compatible.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..events import channels
from ..jsonutil import json_copy
from .types import InvocationPath


@dataclass(frozen=True)
class ContributionMeta:
    """Who contributed a value: handed to custom reducers."""

    path: InvocationPath
    """Invocation path of the contributing branch (request indices from the root)."""
    key: str
    """Branch key of the contributing branch."""
    seq: int
    """Order of this contribution among the branch's own contributions."""


Reducer = Callable[[Any, Any, ContributionMeta], Any]


@dataclass(frozen=True)
class Channel:
    """A reduced state field: a reducer, an empty value and a writer rule."""

    kind: str
    reducer: Reducer
    empty: Callable[[], Any]
    single_writer: bool = False
    fold: Callable[[Any, list[tuple[ContributionMeta, Any]]], Any] | None = None
    """All contributions at once, for built-ins where one step at a time is quadratic
    (appending to a copy per contribution); the same result as repeated ``reducer``."""

    def initial(self, present: bool, value: Any) -> Any:
        """The accumulator a join starts from: the caller-visible value, else empty."""
        return json_copy(value) if present else self.empty()

    def reduce(
        self, initial: Any, contributions: list[tuple[ContributionMeta, Any]], *,
        check: bool = True,
    ) -> Any:
        """Fold contributions (already in request-path order) into ``initial``.

        ``check`` validates (and detaches) the result as plain JSON, as a join must; a
        branch's own reads skip it.
        """
        if self.fold is not None:
            acc = self.fold(initial, contributions)
        else:
            acc = initial
            for meta, value in contributions:
                acc = self.reducer(acc, value, meta)
        return json_copy(acc, f"Result of the '{self.kind}' reducer") if check else acc


def _replace(acc: Any, value: Any, meta: ContributionMeta) -> Any:
    return value


def _builtin(kind: str) -> Channel:
    """A built-in channel: its rules (:mod:`runtime.events.channels`) are the folds' too."""

    def one(acc: Any, value: Any, meta: ContributionMeta) -> Any:
        return channels.combine(kind, acc, value, meta.key)

    def fold(acc: Any, items: list[tuple[ContributionMeta, Any]]) -> Any:
        return channels.combine_all(kind, acc, [(meta.key, value) for meta, value in items])

    return Channel(kind, one, lambda: channels.empty(kind), fold=fold)


def single_writer() -> Channel:
    """At most one branch may contribute; its (last) value replaces the field."""
    return Channel("single_writer", _replace, lambda: None, single_writer=True)


def reduced(fn: Reducer, initial: Any = None) -> Channel:
    """A custom fold ``fn(acc, value, meta)``; ``initial`` when the field is absent."""
    frozen = json_copy(initial, "A reduced() channel's initial value")
    return Channel("reduced", fn, lambda: json_copy(frozen))


def sum_() -> Channel:
    """Numeric sum (empty value 0)."""
    return _builtin("sum")


def append() -> Channel:
    """List append in request-path order (empty value ``[]``)."""
    return _builtin("append")


def append_unique_by(key: Callable[[Any], Any]) -> Channel:
    """Append, dropping a value whose ``key(value)`` is already in the list."""

    def unique(acc: Any, value: Any, meta: ContributionMeta) -> Any:
        return fold(acc, [(meta, value)])

    def fold(acc: Any, items: list[tuple[ContributionMeta, Any]]) -> Any:
        channels.check("append", acc, ())
        out = list(acc)
        seen = {json_key(key(v)) for v in out}
        for _, value in items:
            marker = json_key(key(value))
            if marker not in seen:
                seen.add(marker)
                out.append(value)
        return out

    return Channel("append_unique_by", unique, list, fold=fold)


def keyed_by_branch() -> Channel:
    """An object ``{branch key: value}`` (empty value ``{}``)."""
    return _builtin("keyed_by_branch")


def merge_record() -> Channel:
    """Shallow merge of object contributions; later in request-path order wins."""
    return _builtin("merge_record")


def json_key(value: Any) -> str:
    """A hashable, order-stable form of a JSON value (for uniqueness keys)."""
    return json.dumps(value, sort_keys=True)


class StepChannels:
    """The built-in channels, as a namespace: ``StepChannels.sum()`` etc."""

    single_writer = staticmethod(single_writer)
    reduced = staticmethod(reduced)
    sum = staticmethod(sum_)
    append = staticmethod(append)
    append_unique_by = staticmethod(append_unique_by)
    keyed_by_branch = staticmethod(keyed_by_branch)
    merge_record = staticmethod(merge_record)
