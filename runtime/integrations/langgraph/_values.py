"""Values, channels and errors of LangGraph, as the tracer's events carry them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.topic import Topic
from langgraph.errors import GraphInterrupt, InvalidUpdateError

from runtime import events as ev

Reducer = Callable[[Any, Any], Any]


class Cancelled(Exception):
    """A task LangGraph stopped because a sibling failed (no callback ended it)."""


def channels_of(graph: Any) -> tuple[dict[str, Reducer], frozenset[str]]:
    """The reducer of each reducer channel of ``graph``, and its state keys (none known
    without a compiled graph)."""
    channels = getattr(graph, "channels", None)
    if not isinstance(channels, Mapping):
        return {}, frozenset()
    reducers: dict[str, Reducer] = {}
    for name, channel in channels.items():
        if isinstance(channel, BinaryOperatorAggregate):
            reducers[name] = channel.operator
        elif isinstance(channel, Topic):
            reducers[name] = topic
    keys = frozenset(n for n in channels if not n.startswith(("__", "branch:")))
    return reducers, keys


def subgraph_of(graph: Any, node: str) -> Any:
    """The compiled subgraph that runs as (or inside) ``node`` of ``graph``, or None."""
    try:
        found = dict(graph.get_subgraphs()) if graph is not None else {}
    except Exception:  # a graph that cannot list them: its parent's channels stand in
        return None
    return found.get(node)


def topic(values: Any, value: Any) -> list[Any]:
    """How a ``Topic`` channel takes one task's write: a list is several values."""
    return [*(values or []), *(value if isinstance(value, list) else [value])]


topic.__name__ = "topic"


def reduce(reducer: Reducer, before: Any, value: Any) -> Any:
    """``before`` combined with ``value`` by the channel's operator (a missing value is
    the operator's empty one, as LangGraph's channel starts from its type's default)."""
    if before is None and reducer is not topic:
        return value
    return reducer(before, value)


def reducer_name(reducer: Reducer | None) -> str:
    """The name ``join.reduced`` gives a channel's operator (``add``, ``add_messages``)."""
    if reducer is None:
        return "unknown"
    return str(getattr(reducer, "__name__", type(reducer).__name__)).lstrip("_")


def sort_key(lg_path: tuple[Any, ...]) -> str:
    """LangGraph's order of a superstep's tasks (``task_path_str`` of the task path, the
    order ``apply_writes`` applies their writes in): PULL tasks by node name, then PUSH
    tasks by ``Send`` index."""
    def text(part: Any) -> str:
        if isinstance(part, tuple | list):
            return "~" + ", ".join(text(p) for p in part)
        return f"{part:010d}" if isinstance(part, int) and not isinstance(part, bool) \
            else str(part)
    return text(lg_path)


def plain(value: Any) -> Any:
    """A value for an event: LangChain messages and other pydantic models as their JSON,
    anything else JSON cannot say as its ``repr``, a large value truncated."""
    return ev.safe_value(_jsonable(value))


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # a model that cannot say itself in JSON: its repr
            return repr(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def interrupts(error: BaseException | None) -> list[Any]:
    """What an ``interrupt()`` asked (the values of a ``GraphInterrupt``), as events say."""
    if not isinstance(error, GraphInterrupt):
        return []
    found = error.args[0] if error.args else ()
    return [plain(getattr(i, "value", i)) for i in
            (found if isinstance(found, list | tuple) else ())]


INVALID_UPDATE_CODE = "invalid_update"
"""The error code of an ``InvalidUpdateError`` that is not two writes to one key (a node
returned something other than a dict of state keys, a reducer raised, ...)."""


def turn_error(error: BaseException, conflict: ev.ErrorInfo | None) -> ev.ErrorInfo:
    """The error a failed turn carries: LangGraph's, coded as our runtime codes it. Two
    writes to one key are the code, field, provenance and fix of the superstep's
    ``join.invalidated`` (``conflict``) with LangGraph's own message."""
    if not isinstance(error, InvalidUpdateError):
        return ev.error_info(error)
    found = ev.error_info(error)
    if conflict is None:
        return found.model_copy(update={"code": INVALID_UPDATE_CODE})
    return found.model_copy(update={"code": conflict.code, "extra": conflict.extra})


def error_info(error: BaseException) -> ev.ErrorInfo:
    """A task's error as events carry it; an ``interrupt()`` says what it asked."""
    if not isinstance(error, GraphInterrupt):
        return ev.error_info(error)
    asked = interrupts(error)
    return ev.ErrorInfo(type=type(error).__name__, code="interrupted",
                        message=ev.safe_text(json.dumps(asked, default=repr)),
                        extra={"interrupts": asked})
