"""Plain-JSON helpers shared by state, context and tool results."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import StateValueError
from .events.values import MAX_DEPTH, SURROGATE, too_deep


def json_copy(value: Any, what: str = "value") -> Any:
    """A detached deep copy of ``value`` that is guaranteed to be plain JSON.

    Raises:
        StateValueError: naming ``what`` when the value is not JSON (a set, a date, NaN…).
    """
    kind = type(value)
    if kind is str:
        if value.isascii() or not SURROGATE.search(value):
            return value  # immutable and already JSON: the common case, kept cheap
        raise _lone_surrogate(what, value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is float and math.isfinite(value):
        return value
    if (kind is dict or kind is list) and not value:
        return kind()  # a fresh empty container: what a branch's params usually are
    try:
        text = json.dumps(value, allow_nan=False, default=_plain, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise StateValueError(f"{what} must be plain JSON: {exc}") from None
    except RecursionError:
        raise _too_deep(what) from None
    if not text.isascii() and SURROGATE.search(text):
        raise _lone_surrogate(what, text)
    copy = json.loads(text)
    if too_deep(copy, text):  # no store or serialiser takes it whole
        raise _too_deep(what)
    return copy


def _too_deep(what: str) -> StateValueError:
    return StateValueError(f"{what} must be plain JSON: nested deeper than {MAX_DEPTH} levels.")


def _lone_surrogate(what: str, text: str) -> StateValueError:
    return StateValueError(f"{what} must be plain JSON: {lone_surrogate_in(text)}.")


def lone_surrogate_in(text: str) -> str | None:
    """What is wrong with ``text`` if it holds a lone surrogate (None if it does not)."""
    at = None if text.isascii() else SURROGATE.search(text)
    if at is None:
        return None
    around = text[max(0, at.start() - 20):at.start()]
    return (f"text with a lone surrogate (U+{ord(at.group()):04X} after {around!r}), which "
            "no UTF-8 store can hold")


def replace_lone_surrogates(value: Any) -> Any:
    """``value`` (parsed JSON) with U+FFFD for every lone surrogate in its strings and keys.

    ``json.loads`` turns a ``"\\ud800"`` escape into a code point no UTF-8 can hold; text
    from outside (a model's reply) is repaired as a UTF-8 decoder would repair it, rather
    than failing the session's save later.
    """
    kind = type(value)
    if kind is str:
        return value if value.isascii() else SURROGATE.sub("\ufffd", value)
    if kind is list:
        return [replace_lone_surrogates(item) for item in value]
    if kind is dict:
        return {replace_lone_surrogates(key): replace_lone_surrogates(item)
                for key, item in value.items()}
    return value


def _plain(value: Any) -> Any:
    # Frozen params (read-only mappings) are JSON in all but type.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def is_json(value: Any) -> bool:
    """Whether ``value`` is plain JSON (no sets, dates, NaN, objects…)."""
    try:
        json_copy(value)
    except StateValueError:
        return False
    return True


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """Merge ``top`` into a copy of ``base``; nested dicts merge, everything else replaces."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def get_path(data: Any, path: str | None) -> Any:
    """Read a dotted path (``a.b.0``) from nested dicts and lists; None when absent."""
    if not path:
        return data
    current = data
    for part in path.split("."):
        if isinstance(current, dict):
            current = current.get(part)
        elif isinstance(current, list) and part.lstrip("-").isdigit():
            index = int(part)
            current = current[index] if -len(current) <= index < len(current) else None
        else:
            return None
        if current is None:
            return None
    return current
