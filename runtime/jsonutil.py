"""Plain-JSON helpers shared by state, context and tool results."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .errors import StateValueError


def json_copy(value: Any, what: str = "value") -> Any:
    """A detached deep copy of ``value`` that is guaranteed to be plain JSON.

    Raises:
        StateValueError: naming ``what`` when the value is not JSON (a set, a date, NaN…).
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value  # immutable and already JSON: the common case, kept cheap
    if kind is float and math.isfinite(value):
        return value
    if (kind is dict or kind is list) and not value:
        return kind()  # a fresh empty container: what a branch's params usually are
    try:
        return json.loads(json.dumps(value, allow_nan=False, default=_plain))
    except (TypeError, ValueError) as exc:
        raise StateValueError(f"{what} must be plain JSON: {exc}") from None


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
