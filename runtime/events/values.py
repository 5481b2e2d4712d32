"""Values as events carry them, and the builder the runtime emits events with.

* :func:`safe_value` / :func:`safe_list` turn any value into plain JSON for an event: a
  non-JSON object becomes its ``repr``, a value whose JSON is longer than
  :data:`MAX_VALUE_CHARS` becomes a :class:`~runtime.events.schema.Truncated` marker.
* :func:`error_info` is an exception as events carry it.
* :func:`interruption` is the ``run.interrupted`` event that ends a run whose executor went
  silent, built from the run's last stored event (the dashboard's, never the runtime's).
* :func:`build` constructs an event from a dict of its fields. By default it is
  :func:`build_unchecked`, the hot path: no validation at all. With the environment
  variable ``PICOFLOW_STRICT_EVENTS=1`` (read once, when this module is imported; the test
  suite sets it) it is :func:`build_strict`, which raises :class:`EventBuildError` on an
  unknown or missing field and on any value the event's model rejects.

Imports only the standard library, pydantic and the schema.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .schema import ErrorInfo, RunInterrupted

_E = TypeVar("_E", bound=BaseModel)
_R = TypeVar("_R")

MAX_VALUE_CHARS = 64_000
"""A value whose JSON is longer than this is replaced by a :class:`Truncated` marker."""

STRICT_ENV = "PICOFLOW_STRICT_EVENTS"
STRICT: bool = os.environ.get(STRICT_ENV, "").strip().lower() not in ("", "0", "false", "no")
"""Whether :func:`build` checks every event (``PICOFLOW_STRICT_EVENTS=1``)."""


def safe_value(value: Any, limit: int = MAX_VALUE_CHARS) -> Any:
    """``value`` as plain JSON for an event: non-JSON objects become their ``repr``; a value
    whose JSON exceeds ``limit`` characters becomes a :class:`Truncated` marker dict."""
    kind = type(value)
    if kind is str:
        if len(value) <= limit:
            return value
    elif kind is int or kind is bool or value is None or kind is float:
        return value if kind is not float or value == value else repr(value)
    elif _small_json(value, 3):
        return value  # plain JSON and far below the limit: the common case, kept cheap
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # not plain JSON: a JSON stand-in
        try:
            text = json.dumps(value, allow_nan=False, default=_plain_or_repr) if _dumpable(
                value) else json.dumps(repr(value))
        except RecursionError:  # even its repr is too deep
            return {"truncated": True, "size": 0, "preview": _TOO_DEEP}
        if len(text) <= limit and not too_deep(stand_in := json.loads(text), text):
            return stand_in
    else:
        if len(text) <= limit and not too_deep(value, text):
            return value  # already plain JSON; events are read-only
    return {"truncated": True, "size": len(text), "preview": text[:200]}


def safe_text(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """``text`` for an event's text field: whole up to ``limit`` characters, else cut there
    and saying how much is left out. A line no dashboard would take (its ingest refuses
    lines over 32 MiB) would lose the event: for ``turn.started``, the whole run."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


SURROGATE = re.compile("[\ud800-\udfff]")
"""A code point no UTF-8 can hold (a lone surrogate): what stores, sinks and pages cannot
take."""

MAX_DEPTH = 128
"""The deepest nesting a value may have. pydantic's serialiser stops near 255 levels, and a
value sits a few levels down in an event or a session document; no real value comes close."""

_TOO_DEEP = f"(nested deeper than {MAX_DEPTH} levels)"


def too_deep(value: Any, text: str) -> bool:
    """Whether ``value``, whose JSON is ``text``, nests deeper than :data:`MAX_DEPTH`."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False  # every level opens a bracket: nothing to walk
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()
        elif kind is list:
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


_SMALL_ITEMS = 16
_SMALL_TEXT = 1024


def _small_json(value: Any, depth: int) -> bool:
    """Cheaply prove a small container is plain JSON (else the caller serialises it).

    Plain loops, not ``all(genexpr)``: this runs for most values of most events.
    """
    kind = type(value)
    if kind is dict:
        if len(value) > _SMALL_ITEMS or depth == 0:
            return False
        for key, item in value.items():
            if type(key) is not str or len(key) > _SMALL_TEXT or not _small_leaf(item, depth):
                return False
        return True
    if kind is list:
        if len(value) > _SMALL_ITEMS or depth == 0:
            return False
        for item in value:  # noqa: SIM110 - a loop is faster than all(genexpr) here
            if not _small_leaf(item, depth):
                return False
        return True
    return False


def _small_leaf(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind is str:
        return len(value) <= _SMALL_TEXT
    if kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return value == value and value not in (_INF, -_INF)
    return _small_json(value, depth - 1)


_INF = float("inf")


FORK_PAGE = 256
"""The most requests one fork event carries (``barrier.forked``'s first page, then each
``barrier.requested``'s): no event grows with a fan-out's width."""
FORK_PAGE_CHARS = 48_000
"""The most characters of requests (their JSON, roughly) one page carries, so that a page
of requests with large params stays near 64 KB too; a page holds one request at least."""
_REQUEST_CHARS = 96
"""Roughly the JSON of a request's keys and index, beside its own strings and params."""


def _request_chars(request: Any) -> int:
    return _REQUEST_CHARS + len(request.path) + len(request.key) + len(request.step) + len(
        request.user_message or "") + len(json.dumps(request.params, default=repr))


def fork_pages(requests: list[_R]) -> list[list[_R]]:
    """``requests`` (a fork's, in order) cut into the pages its events carry: at most
    :data:`FORK_PAGE` requests and :data:`FORK_PAGE_CHARS` characters each. One page (the
    list itself) for most forks. Measured a page at a time: one ``json.dumps`` of its
    params, then request by request only when that page is too large."""
    return _cut(requests, FORK_PAGE, FORK_PAGE_CHARS, _page_chars, _request_chars)


def first_fork_page(requests: list[_R]) -> list[_R]:
    """The first page :func:`fork_pages` cuts from ``requests``, without cutting the rest
    (a fork that makes its requests a window at a time)."""
    return _first(requests, FORK_PAGE, FORK_PAGE_CHARS, _page_chars, _request_chars)


def _first(items: list[_R], page: int, budget: int, page_chars: Callable[[list[_R]], int],
           item_chars: Callable[[_R], int]) -> list[_R]:
    """The first page of ``items``: at most ``page`` items and ``budget`` characters (one
    item at least), measured whole first and item by item only when it is too large."""
    chunk = items if len(items) <= page else items[:page]
    if page_chars(chunk) <= budget:
        return chunk
    used, take = 0, 0
    for item in chunk:
        used += item_chars(item)
        if take and used > budget:
            break
        take += 1
    return chunk[:take]


def _cut(items: list[_R], page: int, budget: int, page_chars: Callable[[list[_R]], int],
         item_chars: Callable[[_R], int]) -> list[list[_R]]:
    """``items`` in pages of at most ``page`` items and ``budget`` characters (:func:`_first`
    of what is left, page after page)."""
    if len(items) <= page and page_chars(items) <= budget:
        return [items]
    pages: list[list[_R]] = []
    start, total = 0, len(items)
    while start < total:
        chunk = _first(items[start:start + page], page, budget, page_chars, item_chars)
        pages.append(chunk)
        start += len(chunk)
    return pages


def _page_chars(requests: list[Any]) -> int:
    strings = sum(len(r.path) + len(r.key) + len(r.step) + len(r.user_message or "")
                  for r in requests)
    params = json.dumps([r.params for r in requests], default=repr)
    return _REQUEST_CHARS * len(requests) + strings + len(params)


LIST_PAGE = 256
"""The most items of one per-branch list (a join's inputs, completion order, discarded
branches or provenance; a cancellation's paths) one event carries: the head's first page,
then each ``list.continued``'s."""
LIST_PAGE_CHARS = 48_000
"""The most characters of a list's items (their JSON) one page carries; a page holds one
item at least (an item's values are themselves cut at :data:`MAX_VALUE_CHARS`)."""


def list_pages(items: list[Any]) -> list[list[Any]]:
    """``items`` (JSON values, in order) cut into the pages their events carry: at most
    :data:`LIST_PAGE` items and :data:`LIST_PAGE_CHARS` characters each. One page (the list
    itself, empty or not) for most events."""
    return _cut(items, LIST_PAGE, LIST_PAGE_CHARS,
                lambda chunk: len(json.dumps(chunk, default=repr)),
                lambda item: len(json.dumps(item, default=repr)) + 2)


def paged_lists(lists: dict[str, list[Any]]) -> tuple[
        dict[str, list[Any]], dict[str, int] | None, list[tuple[str, int, list[Any]]]]:
    """An event's per-branch ``lists`` as it and its ``list.continued`` events carry them:
    each list's first page, the ``counts`` (None when every list fits one page) and the
    continuations ``(name, first, items)``, list by list, in order."""
    pages = {name: list_pages(items) for name, items in lists.items()}
    if all(len(cut) == 1 for cut in pages.values()):
        return lists, None, []
    rest: list[tuple[str, int, list[Any]]] = []
    for name, cut in pages.items():
        first = len(cut[0])
        for page in cut[1:]:
            rest.append((name, first, page))
            first += len(page)
    return ({name: cut[0] for name, cut in pages.items()},
            {name: len(items) for name, items in lists.items()}, rest)


class Unpager:
    """Event dicts in record order, a paged event handed on once its ``list.continued``
    pages have joined it (whole, as an unpaged event would be): for readers that look at
    an event's lists where it is (an exporter), not at where the fold keeps them."""

    def __init__(self) -> None:
        self._held: dict[str, Any] | None = None
        self._missing = 0

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events ready after ``event``: none while a paged one waits for its pages."""
        held = self._held
        if event.get("type") == "list.continued":
            if (held is None or held["type"] != event.get("of")
                    or held.get("barrier") != event.get("barrier")
                    or not isinstance(held.get(str(event.get("name"))), list)):
                return []  # a page of nothing held: the fold reports it
            held[str(event["name"])].extend(event.get("items") or [])
            self._missing -= len(event.get("items") or [])
            return self.flush() if self._missing <= 0 else []
        ready = self.flush()
        counts = event.get("counts")
        if not counts:
            ready.append(event)
            return ready
        held = self._held = {**event, **{name: list(event.get(name) or []) for name in counts}}
        del held["counts"]
        self._missing = sum(counts.values()) - sum(len(held[name]) for name in counts)
        if self._missing <= 0:
            ready.extend(self.flush())
        return ready

    def flush(self) -> list[dict[str, Any]]:
        """The paged event held, as far as its pages came (at the record's end)."""
        held, self._held, self._missing = self._held, None, 0
        return [held] if held is not None else []


def safe_list(items: list[Any]) -> list[Any]:
    """A list of JSON values for an event: whole if small enough, else item by item."""
    try:
        text = json.dumps(items, allow_nan=False)
        if len(text) <= MAX_VALUE_CHARS and not too_deep(items, text):
            return items
    except (TypeError, ValueError, RecursionError):
        pass
    return [safe_value(item) for item in items]


def _dumpable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False, default=_plain_or_repr)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _plain_or_repr(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else repr(value)


def build_unchecked(cls: type[_E], fields: dict[str, Any]) -> _E:
    """Construct an event (or nested record) without validation: the emit hot path.

    Fields missing from ``fields`` take their defaults (a required one: None) and unknown
    names are dropped; the values are kept in declaration order (the serialised order).
    :func:`build_strict` is the checked variant that :data:`STRICT` selects.
    """
    order = _ORDER.get(cls)
    if order is None:
        declared = cls.model_fields
        defaults = {name: None if info.is_required() or info.default_factory else info.default
                    for name, info in declared.items()}
        factories: dict[str, Any] = {name: info.default_factory
                                     for name, info in declared.items()
                                     if info.default_factory is not None}
        order = _ORDER[cls] = (tuple(defaults), defaults, set(defaults), factories)
    if tuple(fields) != order[0]:
        given = fields
        fields = {name: given.get(name, default) for name, default in order[1].items()}
        for name, factory in order[3].items():  # a fresh default per record, as pydantic
            if name not in given:
                fields[name] = factory()
    event = cls.__new__(cls)
    _set(event, "__dict__", fields)
    # Every field is set; one shared set per class (pydantic only reads it) saves an
    # allocation per event.
    _set(event, "__pydantic_fields_set__", order[2])
    _set(event, "__pydantic_extra__", None)
    _set(event, "__pydantic_private__", None)
    return event


_ORDER: dict[type[BaseModel],
             tuple[tuple[str, ...], dict[str, Any], set[str], dict[str, Any]]] = {}
_set = object.__setattr__


class EventBuildError(ValueError):
    """An event (or nested record) was built with a wrong field, in strict mode.

    Raised by :func:`build_strict` (:func:`build` under ``PICOFLOW_STRICT_EVENTS=1``): a
    field name the model does not declare (a misspelling the unchecked builder would
    silently drop), a required field left out (which it would set to None), or a value
    the model rejects or would read back differently.
    """

    def __init__(self, cls: type[BaseModel], problems: list[str]) -> None:
        self.model = cls
        self.problems = problems
        super().__init__(f"{cls.__name__}: " + "; ".join(problems))


def build_strict(cls: type[_E], fields: dict[str, Any]) -> _E:
    """:func:`build_unchecked`, after checking that ``fields`` make a valid ``cls``.

    Raises :class:`EventBuildError` naming every unknown field (with the closest declared
    name), every missing required field, the values ``cls.model_validate`` rejects, and the
    fields whose built value serialises differently from the value a reader would parse
    back (a float where an int is declared, say). Returns the same unvalidated instance the
    unchecked builder makes, so strict mode changes no output.
    """
    declared = cls.model_fields
    problems: list[str] = []
    missing = [name for name, info in declared.items()
               if info.is_required() and name not in fields]
    for name in fields:
        if name not in declared:
            # A misspelling most likely meant a field that is missing.
            close = (difflib.get_close_matches(name, missing, n=1)
                     or difflib.get_close_matches(name, declared, n=1))
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown field {name!r}{hint}")
    problems += [f"missing required field {name!r}" for name in missing]
    if problems:
        raise EventBuildError(cls, problems)
    # A default factory runs once, for both copies (a time stamp would differ otherwise).
    factories: dict[str, Any] = {name: info.default_factory for name, info in declared.items()
                                 if info.default_factory is not None and name not in fields}
    if factories:
        fields = {**fields, **{name: factory() for name, factory in factories.items()}}
    try:
        validated = cls.model_validate(fields)
    except ValidationError as exc:
        raise EventBuildError(cls, [
            f"{'.'.join(map(str, error['loc'])) or '(event)'}: {error['msg']}"
            for error in exc.errors(include_url=False)]) from exc
    event = build_unchecked(cls, fields)
    # Serialised without pydantic's warnings: an unexpected type is reported here, by name.
    if _json_text(event) != _json_text(validated):
        built = event.model_dump(mode="json", warnings=False)
        parsed = validated.model_dump(mode="json", warnings=False)
        raise EventBuildError(cls, [
            f"{name!r} is emitted as {json.dumps(built[name])} but reads back as "
            f"{json.dumps(parsed[name])}" for name in declared
            if json.dumps(built[name]) != json.dumps(parsed[name])
        ] or ["the built event does not serialise as its validated copy"])
    return event


def _json_text(model: BaseModel) -> str:
    """The model's JSON; for text no UTF-8 can hold (a lone surrogate, which sinks write as
    U+FFFD) the same values through :mod:`json`, which escapes it."""
    try:
        return model.model_dump_json(warnings=False)
    except ValueError:
        return json.dumps(model.model_dump(mode="json", warnings=False))


build = build_strict if STRICT else build_unchecked
"""Construct an event (or nested record) from a dict of its fields: the emit hot path,
:func:`build_unchecked`, or :func:`build_strict` under ``PICOFLOW_STRICT_EVENTS=1``."""


def error_info(exc: BaseException) -> ErrorInfo:
    """An exception as events carry it."""
    code = getattr(exc, "code", None)
    extra = getattr(exc, "extra", None)
    return ErrorInfo(
        type=type(exc).__name__,
        code=code if isinstance(code, str) else "internal",
        message=safe_text(str(getattr(exc, "message", exc))),
        extra=safe_value(extra) if isinstance(extra, dict) else {},
    )


_ENDINGS = frozenset({"turn.finished", "turn.failed", "turn.cancelled", "run.interrupted"})
"""Event types after which a run has ended: it cannot be interrupted any more."""


def interruption(last: Mapping[str, Any], *, now: float, silent_for: float, reason: str,
                 worker: str | None = None, revision: int | None = None) -> RunInterrupted:
    """The ``run.interrupted`` event that ends a run whose executor stopped reporting.

    ``last`` is the run's last stored event as a JSON dict (what a server has); ``now`` is
    the wall-clock time (Unix seconds) the interruption is declared at, ``silent_for`` how
    many seconds the run had been silent then, and ``reason`` says why, for people ("no
    events or heartbeats for 30 s"). For a run a dashboard worker held, ``worker`` may name
    that worker and ``revision`` the session revision the session stays at. The event has
    the run's ``run_id`` and ``session_id``, the next ``seq``, ``time`` ``now``, and an
    ``offset`` that advances by the wall-clock time since ``last`` (never backwards); its
    ``path`` is ``""``.

    Built rarely, so validated (the model's constructor, not :func:`build_unchecked`):
    raises ``ValueError`` when ``last`` lacks an envelope field or already ends its run
    (``turn.finished``, ``turn.failed``, ``turn.cancelled``, ``run.interrupted``), and
    pydantic's ``ValidationError`` (a ``ValueError`` too) when a value does not fit the
    event.
    """
    missing = [name for name in ("run_id", "session_id", "seq", "time", "offset")
               if name not in last]
    if missing:
        raise ValueError(f"the last event lacks {', '.join(missing)}: cannot interrupt its run")
    if last.get("type") in _ENDINGS:
        raise ValueError(f"run {last['run_id']} already ended with {last['type']} "
                         f"(seq {last['seq']}): it cannot be interrupted")
    return RunInterrupted(
        run_id=last["run_id"], session_id=last["session_id"], seq=last["seq"] + 1,
        time=now, offset=last["offset"] + max(0.0, now - last["time"]), path="",
        reason=reason, silent_for=silent_for, worker=worker, revision=revision,
    )
