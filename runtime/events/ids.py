"""Run and session ids: the one definition every door checks.

An id is 1 to :data:`MAX_ID_CHARS` ASCII letters, digits, ``.``, ``_`` and ``-``, and
begins with a letter or a digit. Ids travel further than the runtime: a dashboard
stores them in 64-character columns, puts them in URL paths, HTTP headers
(``PicoFlow-Run-Id``, ``Chat-Session-Id``), download names and channel-layer group names,
and Channels takes only ASCII letters, digits, hyphens, underscores and periods there.
The first character rules out ``.`` and ``..`` (path segments) and an id that reads as a
command-line option. The ids the runtime makes itself (``uuid4().hex`` runs, ``uuid4()``
sessions, ``concurrent_steps()`` children) all fit.

Standard library only: the runtime, its sinks and the web app share it.
"""

from __future__ import annotations

import re

MAX_ID_CHARS = 64
"""The longest run or session id: what a dashboard stores (and its ingest takes)."""

ID_CHARACTERS = "ASCII letters, digits, '.', '_' and '-'"
"""The characters of an id, as messages say it."""

ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_CHARS - 1}}}")
"""A valid id, whole (use ``fullmatch``)."""

_ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def is_valid_id(value: object) -> bool:
    """Whether ``value`` is a valid run or session id."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def id_problem(value: object, what: str = "run id") -> str | None:
    """Why ``value`` is not a valid id (a sentence naming it as ``what``), or None."""
    if is_valid_id(value):
        return None
    if not isinstance(value, str):
        return f"The {what} must be a string, not {type(value).__name__}."
    if not value:
        return f"The {what} is empty."
    if len(value) > MAX_ID_CHARS:
        return f"The {what} must be at most {MAX_ID_CHARS} characters, not {len(value)}."
    at, bad = next(((i, ch) for i, ch in enumerate(value) if ch not in _ALLOWED),
                   (0, value[0]))
    if at == 0 and bad in _ALLOWED:
        return f"The {what} must begin with a letter or a digit, not {bad!r}."
    return (f"The {what} may hold only {ID_CHARACTERS}, not {bad!r} (character {at + 1}).")


__all__ = ["ID_CHARACTERS", "ID_PATTERN", "MAX_ID_CHARS", "id_problem", "is_valid_id"]
