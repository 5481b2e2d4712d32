"""Secrets out of what is stored and shown: values under secret-looking names, and
credentials inside text, become a marker.

A client's ``config`` and message, a session's context, step state and messages, a run's
reply and every event (tool arguments, model messages, state changes) are redacted before
they are stored, broadcast or rendered, whichever door they came in by.

**Names.** A name is split into words (at ``_``, ``-``, ``.``, spaces and camelCase humps,
lowercased: ``aws_secret_access_key`` and ``awsSecretAccessKey`` are *aws secret access
key*). It looks like a secret when its words hold the words of one of :data:`BUILTIN_KEYS`
or of the names ``PICOFLOW_REDACT_KEYS`` adds, in a row, each word as it is or in the plural
(``apiKeys``, ``credentials``), a ``*`` ending a prefix (``passw*``: ``password``,
``passwd``); or when one of its words ends with that name glued together (``clientsecret``,
``xapikey``). Under such a name, text is hidden, and so is everything in a list or an
object (every item of ``apiKeys``, ``credentials.pass``). A number is hidden too, unless
the name measures something: its last word is one of :data:`MEASURES` or ends with
``tokens`` (``total_tokens``, ``max_tokens``, ``token_budget``, ``tokens_used``,
``password_min_length``), so usage accounting stays readable. Booleans, null and empty text
are never hidden. Events that name a state field (``{"field": "password", "value": ...}``:
``state.replaced``, ``state.contributed``, ``join.reduced``, a join's published fields)
have that field's values redacted as if they were under its name.

**Text.** In any text, under any name, the password of a URL (``postgres://u:pw@h/db``
becomes ``postgres://u:[redacted]@h/db``) and a bearer token (``Bearer sk-…``: a run of at
least 8 token characters with a digit or one of ``-_~+/``, so prose such as "Bearer
authentication" stays) are masked.

Redacted means gone: a turn started with a secret in its config or its message runs with
the marker, so flows take their credentials from the server's environment, not from the
client.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from pydantic import BaseModel

from picoflow_web.config import app_settings
from runtime.events import Event, dump_event

MARKER = "[redacted]"

BUILTIN_KEYS: tuple[str, ...] = ("secret", "passw*", "private_key", "token", "credential",
                                 "cookie", "api_key", "bearer", "authorization")
"""The names always redacted; ``PICOFLOW_REDACT_KEYS`` adds to them."""

MEASURES = frozenset({"tokens", "count", "counts", "total", "used", "usage", "budget",
                      "limit", "max", "min", "size", "length", "len", "age", "ttl",
                      "version", "expires", "expiry", "seconds", "days"})
"""Last words of a name that measures something: a number under it is kept."""

_NONE, _MEASURE, _SECRET = 0, 1, 2
"""How a name looks: no secret; a measure of one (text hidden, numbers kept); a secret."""

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W\d_A-Za-z]+")

_URL = re.compile(r"://(?<=[A-Za-z0-9+.\-]://)([^\s/?#@:]*):([^\s/?#]+)@")
"""A URL's ``user:password@``. The password runs to the last ``@`` of the authority (an
unescaped ``@`` in it is common); the literal ``://`` first lets the search skip ahead."""

_BEARER = re.compile(r"\b(bearer\s+)(?=[a-z0-9._~+/-]*[0-9_~+/-])[a-z0-9._~+/-]{8,}=*",
                     re.IGNORECASE)

_FIELD_VALUES = frozenset({"value", "base", "result", "initial"})
"""What an event says about a named state field's value (and ``inputs[].value``)."""

_CACHED = 4096
"""Names remembered per list of secret names (the same few repeat in every event)."""


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(name)]


class _Names:
    """One list of secret names, compiled: how a given name looks against it."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.names: list[tuple[tuple[str, ...], bool, str]] = []
        for key in keys:
            prefix = key.strip().endswith("*")
            words = tuple(_words(key.strip().rstrip("*")))
            if words:
                self.names.append((words, prefix, "".join(words)))
        # Every name that matches holds each of a secret name's words: a text without one
        # of them (its longest) holds no such name.
        self.stems = tuple(sorted({max(words, key=len) for words, _, _ in self.names}))
        self._kinds: dict[str, int] = {}
        self.classes: dict[type[BaseModel], bool] = {}
        """Event classes by whether none of their fields has a secret-looking name."""

    def kind(self, name: str) -> int:
        known = self._kinds.get(name, -1)
        if known >= 0:
            return known
        found = self._classify(name)
        if len(name) <= 64:  # a hostile stream of huge names is not remembered
            if len(self._kinds) >= _CACHED:
                self._kinds.clear()
            self._kinds[name] = found
        return found

    def _classify(self, name: str) -> int:
        words = _words(name)
        if not words or not any(self._holds(words, *n) for n in self.names):
            return _NONE
        last = words[-1]
        return _MEASURE if last in MEASURES or last.endswith("tokens") else _SECRET

    @staticmethod
    def _holds(words: list[str], secret: tuple[str, ...], prefix: bool, glued: str) -> bool:
        for word in words:
            if word.endswith(glued) or word.endswith(glued + "s") or (prefix and glued in word):
                return True
        size = len(secret)
        if size == 1:
            return False  # a one-word name is a glued name: looked at above
        for start in range(len(words) - size + 1):
            for offset, part in enumerate(secret):
                word = words[start + offset]
                if not (word == part or word == part + "s"
                        or (prefix and offset == size - 1 and word.startswith(part))):
                    break
            else:
                return True
        return False


@lru_cache(maxsize=8)
def _compiled(keys: tuple[str, ...]) -> _Names:
    return _Names(keys)


_KEYS: tuple[str, ...] | None = None
_CURRENT: _Names | None = None


def secret_keys() -> tuple[str, ...]:
    """The secret names: :data:`BUILTIN_KEYS`, then those ``PICOFLOW_REDACT_KEYS`` adds."""
    global _KEYS
    # Read once: it is asked for every event a worker stores, and reading a setting costs
    # more than the check it feeds. A changed setting (tests) forgets it, below.
    if _KEYS is None:
        added = app_settings.get("REDACT_KEYS")
        if isinstance(added, str):  # a project's PICOFLOW dict may give the variable's form
            added = added.split(",")
        names = [name.strip() for name in added if name.strip()]
        _KEYS = BUILTIN_KEYS + tuple(dict.fromkeys(n for n in names if n not in BUILTIN_KEYS))
    return _KEYS


def _names(keys: tuple[str, ...] | None) -> _Names:
    """``keys`` compiled; without them (every caller but tests) the configured ones."""
    global _CURRENT
    if keys:
        return _compiled(keys)
    if _CURRENT is None:
        _CURRENT = _compiled(secret_keys())
    return _CURRENT


@receiver(setting_changed)
def _forget_keys(*, setting: str, **_: Any) -> None:
    global _KEYS, _CURRENT
    if setting in ("PICOFLOW", "PICOFLOW_REDACT_KEYS"):
        _KEYS = _CURRENT = None


def is_secret(key: str, keys: tuple[str, ...] | None = None) -> bool:
    """Whether ``key`` names a secret: whatever is under it is hidden. A name that only
    measures one (``max_tokens``) is not: text under it is hidden, a number is not."""
    return _names(keys).kind(key) == _SECRET


def redact(value: Any, keys: tuple[str, ...] | None = None) -> Any:
    """A copy of ``value`` with every secret replaced by :data:`MARKER` (``value`` itself
    when there is nothing to redact, so clean payloads cost no copy)."""
    found, copy = _walk(value, _names(keys))
    return copy if found else value


def redact_json(text: str, keys: tuple[str, ...] | None = None) -> str:
    """:func:`redact` of a JSON text (an event as the recorder serialised it), parsed only
    when :func:`may_hold_secret` says it may hold one: most events hold none, and stay the
    text they are, serialised once."""
    return _redact_text(text, _names(keys))


def _redact_text(text: str, names: _Names) -> str:
    if not _may_hold(text, names):
        return text
    found, copy = _walk(json.loads(text), names)
    return json.dumps(copy, ensure_ascii=False, separators=(",", ":")) if found else text


def event_text(event: Event, keys: tuple[str, ...] | None = None) -> str:
    """An event's JSON as it is stored and shown: :func:`redact_json` of its serialised
    text, or that text itself, unscanned, when the event cannot hold a secret.

    It cannot when every value it carries is a string, a number, a boolean or None (no
    name inside a value to look at), no text of it holds a URL with a password or a bearer
    token, no field of its type has a secret-looking name, and the state field it names
    (``field``), if any, has none either: most events of a run (a branch starting or
    ending, a contribution of a number) are of that kind, and a few scans of their text
    cost less than parsing it.
    """
    names = _names(keys)
    text = dump_event(event)
    return text if _plain(event, text, names) else _redact_text(text, names)


def _plain(event: BaseModel, text: str, names: _Names) -> bool:
    """Whether ``event`` (``text`` its JSON) carries scalars only and no credential: read
    off its text in a few scans (in C), not off its values one by one in Python."""
    cls = type(event)
    clean = names.classes.get(cls)
    if clean is None:
        clean = names.classes[cls] = not any(names.kind(name) for name in cls.model_fields)
    if not clean:
        return False
    named = event.__dict__.get("field")  # not getattr: a pydantic model's miss raises
    if type(named) is str and names.kind(named):
        return False
    # The gates of _mask_text, over the whole line: a line that passes them holds no text
    # they would change (JSON escapes neither these characters nor letters).
    if ("@" in text and "://" in text) or "earer" in text or "EARER" in text:
        return False
    # A list or an object inside the line shows a bracket or a second brace (as does a
    # text holding one: that event is looked at closely, no harm done).
    return "[" not in text and text.count("{") == 1


def may_hold_secret(text: str, keys: tuple[str, ...] | None = None) -> bool:
    """Whether :func:`redact` of what the JSON ``text`` encodes may change something
    (False: it need not be parsed and walked).

    True when a text in it may hold a URL with a password or a bearer token, or when a
    secret-looking name in it is a key with something hideable under it (text, a list or
    an object; a number unless the name measures something: ``"total_tokens":3`` and
    ``"token_budget":null``, in every model call and fork, stay on the fast path), or is the
    state field an event names. Where the text does not say for sure (a ``\\u`` or
    ``\\"`` escape near a name, many occurrences), it says True.
    """
    return _may_hold(text, _names(keys))


def _may_hold(text: str, names: _Names) -> bool:
    if "\\u" in text:
        return True
    if "@" in text and ("\\/" in text or _URL.search(text) is not None):
        return True
    flat = text.lower()
    if "bearer" in flat:
        return True
    for stem in names.stems:
        if stem in flat:
            break
    else:
        return False
    if len(flat) != len(text):  # lowercasing moved offsets (a rare non-ASCII letter)
        return True
    return _names_may_hide(text, flat, names)


_LOOKED_AT = 64
"""Occurrences of secret words looked at one by one before a text is walked instead."""


def _names_may_hide(text: str, flat: str, names: _Names) -> bool:
    budget = _LOOKED_AT
    for stem in names.stems:
        at = flat.find(stem)
        while at >= 0:
            budget -= 1
            start = text.rfind('"', 0, at)
            end = text.find('"', at)
            if budget < 0 or start <= 0 or end < 0 or text[start - 1] == "\\" \
                    or text[end - 1] == "\\":
                return True
            name = text[start + 1:end]
            if "\\" in name:
                return True
            kind = names.kind(name)
            if kind:
                after = _skip(text, end + 1)
                if text.startswith(":", after):
                    if _may_hide_value(text, _skip(text, after + 1), kind):
                        return True
                elif _names_a_field(text, start):
                    return True
            at = flat.find(stem, end + 1)
    return False


_JSON_SPACE = " \t\n\r"
_LITERAL = r"(?:-?[0-9][0-9.eE+-]*|true|false|null)"
_NUMBERS_ONLY = re.compile(
    rf'\[\s*(?:{_LITERAL}(?:\s*,\s*{_LITERAL})*)?\s*\]'
    rf'|\{{\s*(?:"[^"\\]*"\s*:\s*{_LITERAL}(?:\s*,\s*"[^"\\]*"\s*:\s*{_LITERAL})*)?\s*\}}')
_EMPTY = re.compile(r"\[\s*\]|\{\s*\}")


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _JSON_SPACE:
        at += 1
    return at


def _may_hide_value(text: str, at: int, kind: int) -> bool:
    first = text[at:at + 1]
    if first == '"':
        return not (text.startswith('""', at) or text.startswith(f'"{MARKER}"', at))
    if first in ("[", "{"):
        # Under a measure, numbers stay: a flat list or object of them hides nothing (a
        # secret-looking name inside it is an occurrence of its own).
        shape = _NUMBERS_ONLY if kind == _MEASURE else _EMPTY
        return shape.match(text, at) is None
    if first == "-" or first.isdigit():
        return kind == _SECRET
    return False  # true, false, null


def _names_a_field(text: str, start: int) -> bool:
    """Whether the string at ``start`` is the value of a ``"field"`` key."""
    at = start - 1
    while at >= 0 and text[at] in _JSON_SPACE:
        at -= 1
    if at < 0 or text[at] != ":":
        return False
    at -= 1
    while at >= 0 and text[at] in _JSON_SPACE:
        at -= 1
    return text.endswith('"field"', 0, at + 1)


def _walk(value: Any, names: _Names) -> tuple[bool, Any]:
    """``value`` (under a name that is no secret) redacted: whether anything changed, and
    the copy (``value`` itself when nothing did)."""
    if isinstance(value, str):
        masked = _mask_text(value)
        return masked is not value, masked
    if isinstance(value, dict):
        return _walk_dict(value, names, _NONE)
    if isinstance(value, list):
        return _walk_list(value, names, _NONE)
    return False, value


def _hide(value: Any, kind: int, names: _Names) -> tuple[bool, Any]:
    """``value`` under a secret-looking name of ``kind``, redacted."""
    if isinstance(value, str):
        return (True, MARKER) if value and value != MARKER else (False, value)
    if isinstance(value, bool) or value is None:
        return False, value
    if isinstance(value, int | float):
        return (True, MARKER) if kind == _SECRET else (False, value)
    if isinstance(value, dict):
        return _walk_dict(value, names, kind)
    if isinstance(value, list):
        return _walk_list(value, names, kind)
    return False, value


def _walk_list(value: list[Any], names: _Names, kind: int) -> tuple[bool, Any]:
    pairs = [_hide(item, kind, names) if kind else _walk(item, names) for item in value]
    if any(found for found, _ in pairs):
        return True, [copied for _, copied in pairs]
    return False, value


def _walk_dict(value: dict[Any, Any], names: _Names, inherited: int,
               field: int = _NONE) -> tuple[bool, Any]:
    """A dict under a name of kind ``inherited`` (its entries are judged by their own names
    first); ``field``: the kind of the state field an enclosing event names."""
    named = value.get("field")
    if type(named) is str:
        field = names.kind(named)
    changed, out = False, {}
    for key, item in value.items():
        kind = names.kind(key) if type(key) is str else _NONE
        if not kind:
            kind = field if field and key in _FIELD_VALUES else inherited
        if kind:
            found, copied = _hide(item, kind, names)
        elif field and key == "inputs" and isinstance(item, list):
            # join.reduced: each contribution's value is the field's, its path and key not.
            pairs = [_walk_dict(x, names, _NONE, field) if isinstance(x, dict) else _walk(x, names)
                     for x in item]
            found = any(f for f, _ in pairs)
            copied = [c for _, c in pairs] if found else item
        else:
            found, copied = _walk(item, names)
        changed |= found
        out[key] = copied
    return changed, (out if changed else value)


def _mask_text(text: str) -> str:
    """``text`` with URL passwords and bearer tokens masked (``text`` itself when it has
    none)."""
    masked = text
    if "@" in text and "://" in text:
        masked = _URL.sub(_masked_url, masked)
    if "earer" in masked or "EARER" in masked:
        masked = _BEARER.sub(lambda m: m[1] + MARKER, masked)
    return text if masked == text else masked


def _masked_url(match: re.Match[str]) -> str:
    return f"://{match[1]}:{MARKER}@" if match[2] != MARKER else match[0]


__all__ = ["BUILTIN_KEYS", "MARKER", "MEASURES", "event_text", "is_secret", "may_hold_secret",
           "redact", "redact_json", "secret_keys"]
