"""Secrets out of what is stored and shown: values under secret-looking keys become a marker.

A client's ``config``, a session's context and step state, and every event are redacted
before they are stored, broadcast or rendered. A key looks like a secret when, lowercased
and without ``-`` and ``_``, it is or ends with one of ``PICOFLOW_REDACT_KEYS`` (default
``api_key, apikey, token, secret, password, authorization``): ``api_key``, ``X-Api-Key``,
``client_secret``, ``access_token`` and ``headers.Authorization`` are redacted; ``tokens``
(the session's token usage) and ``max_tokens`` are not. Events that name a state field
(``{"field": "password", "value": ..., "base": ...}``: ``state.replaced``,
``state.contributed``, a join's published fields) have their ``value``, ``base`` and
``result`` redacted when the field's name looks like a secret.

Redacted means gone: a turn started with a secret in its config runs with the marker, so
flows take their credentials from the server's environment, not from the client.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from pydantic import BaseModel

from picoflow_web import app_settings
from runtime.events import dump_event

MARKER = "[redacted]"


def _normal(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


@lru_cache(maxsize=8)
def _suffixes(keys: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted({_normal(k) for k in keys if k.strip()}))


_KEYS: tuple[str, ...] | None = None


def secret_keys() -> tuple[str, ...]:
    """The configured key names (``PICOFLOW_REDACT_KEYS``)."""
    global _KEYS
    # Read once: it is asked for every event a worker stores, and reading a setting costs
    # more than the check it feeds. A changed setting (tests) forgets it, below.
    if _KEYS is None:
        _KEYS = tuple(app_settings.get("REDACT_KEYS"))
    return _KEYS


@receiver(setting_changed)
def _forget_keys(*, setting: str, **_: Any) -> None:
    global _KEYS
    if setting in ("PICOFLOW", "PICOFLOW_REDACT_KEYS"):
        _KEYS = None


def is_secret(key: str, keys: tuple[str, ...] | None = None) -> bool:
    """Whether a value under ``key`` is a secret."""
    suffixes = _suffixes(keys or secret_keys())
    # The same few names repeat in every event (a fork's requests: thousands of times);
    # only short ones are remembered, so a hostile stream of huge keys cannot fill memory.
    return _key_is_secret(key, suffixes) if len(key) <= 64 else _ends_with(key, suffixes)


@lru_cache(maxsize=4096)
def _key_is_secret(key: str, suffixes: tuple[str, ...]) -> bool:
    return _ends_with(key, suffixes)


def _ends_with(key: str, suffixes: tuple[str, ...]) -> bool:
    normal = _normal(key)
    return any(normal.endswith(suffix) for suffix in suffixes)


def redact(value: Any, keys: tuple[str, ...] | None = None) -> Any:
    """A copy of ``value`` with every secret replaced by :data:`MARKER` (``value`` itself
    when there is nothing to redact, so clean payloads cost no copy)."""
    chosen = keys or secret_keys()
    found, copy = _redact(value, chosen)
    return copy if found else value


def redact_json(text: str, keys: tuple[str, ...] | None = None) -> str:
    """:func:`redact` of a JSON text (an event as the recorder serialised it), parsed only
    when a secret-looking name appears in it at all: most events hold none, and stay the
    text they are, serialised once."""
    chosen = keys or secret_keys()
    if not may_hold_secret(text, chosen):
        return text
    found, copy = _redact(json.loads(text), chosen)
    return json.dumps(copy, ensure_ascii=False, separators=(",", ":")) if found else text


def event_text(event: BaseModel, keys: tuple[str, ...] | None = None) -> str:
    """An event's JSON as it is stored and shown: :func:`redact_json` of its serialised
    text, or that text itself, unscanned, when the event cannot hold a secret.

    It cannot when every value it carries is a string, a number, a boolean or None (no
    name inside a value to look at), no field of its type has a secret-looking name, and
    the state field it names (``field``), if any, has none either: most events of a run
    (a branch starting or ending, a contribution of a number) are of that kind, and a
    look at their values costs less than scanning their text.
    """
    chosen = keys or secret_keys()
    text = dump_event(event)  # type: ignore[arg-type]
    return text if _plain(event, chosen) else redact_json(text, chosen)


def _plain(event: BaseModel, keys: tuple[str, ...]) -> bool:
    fields = event.__dict__  # not getattr: a pydantic model's miss costs an exception
    named = fields.get("field")
    if not _fields_clean(type(event), keys) or (isinstance(named, str)
                                                and is_secret(named, keys)):
        return False
    for value in fields.values():  # noqa: SIM110 - a loop is faster than all(genexpr)
        if type(value) not in _SCALARS:
            return False
    return True


_SCALARS = frozenset({str, int, float, bool, type(None)})


@lru_cache(maxsize=256)
def _fields_clean(cls: type[BaseModel], keys: tuple[str, ...]) -> bool:
    return not any(is_secret(name, keys) for name in cls.model_fields)


def may_hold_secret(text: str, keys: tuple[str, ...] | None = None) -> bool:
    """Whether a secret-looking name may appear in the JSON ``text`` (False: :func:`redact`
    of what it encodes would change nothing, so it need not be walked).

    A name is a JSON string, so a secret-looking one ends in ``<suffix>"``: ``tokens``,
    ``max_tokens`` or ``token_budget`` (in every fork) do not, and their events stay on the
    fast path. A ``\\u`` escape could spell a name the text does not show: walked.
    """
    if "\\u" in text:
        return True
    flat = _normal(text)
    for ending in _endings(_suffixes(keys or secret_keys())):  # noqa: SIM110 - hot path
        if ending in flat:
            return True
    return False


@lru_cache(maxsize=8)
def _endings(suffixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(suffix + '"' for suffix in suffixes)


_FIELD_VALUES = ("value", "base", "result")
"""What an event says about a named state field's value."""


def _redact(value: Any, keys: tuple[str, ...]) -> tuple[bool, Any]:
    if isinstance(value, dict):
        changed, out = False, {}
        named = value.get("field")
        hidden = _FIELD_VALUES if isinstance(named, str) and is_secret(named, keys) else ()
        for key, item in value.items():
            secret = key in hidden or (isinstance(key, str) and is_secret(key, keys))
            if secret and item not in (None, "", MARKER):
                out[key], changed = MARKER, True
                continue
            found, copied = _redact(item, keys)
            changed |= found
            out[key] = copied
        return changed, (out if changed else value)
    if isinstance(value, list):
        pairs = [_redact(item, keys) for item in value]
        if any(found for found, _ in pairs):
            return True, [copied for _, copied in pairs]
        return False, value
    return False, value


__all__ = ["MARKER", "event_text", "is_secret", "may_hold_secret", "redact", "redact_json",
           "secret_keys"]
