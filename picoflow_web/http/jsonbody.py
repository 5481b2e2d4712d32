"""Reading a JSON request body: bounded in size, depth and text, or refused whole.

Refused before anything is stored, each with its own ``error_code``:

* sent as another media type than ``application/json`` (``; charset=utf-8`` may follow) —
  415 ``unsupported_media_type``: a browser's form or a ``text/plain`` fetch cannot pass
  for the API's JSON;
* larger than :data:`MAX_BODY_BYTES` — 413 ``body_too_large`` (read from the stream, so
  Django's own cap and its HTML error never apply);
* not UTF-8 JSON — 400 ``malformed_json``; that includes ``NaN``, ``Infinity`` and
  ``-Infinity``, which Python's parser takes but JSON (the store, every browser) has not;
* a number of more than :data:`MAX_NUMBER_DIGITS` characters, or one too large for a
  float (``1e400``) — 400 ``number_too_large``;
* nested deeper than :data:`MAX_DEPTH` — 400 ``too_deep`` (Python's parser gives up
  with a RecursionError far below what a small body can nest, and values nested a few
  hundred deep still break the database's JSON functions and the runtime's copies);
* text with a lone surrogate escape (``"\\ud800"``, which no UTF-8 store can hold) or a
  NUL character (which PostgreSQL cannot) — 400 ``invalid_text``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from picoflow_web.data.strict_json import DECODER, MAX_NUMBER_DIGITS, NumberTooLarge
from picoflow_web.errors import InputError

MAX_BODY_BYTES = 64 * 1024
"""Largest JSON body of the API (ingest has its own, larger limit)."""
MAX_DEPTH = 32
"""Deepest nesting of objects and arrays a JSON body may have (the body itself is 1)."""
MEDIA_TYPE = "application/json"


def require_json(request: HttpRequest) -> None:
    """Refuse (415) a body sent as another media type than JSON in UTF-8."""
    # None only on a bare HttpRequest: Django's handlers always parse the header.
    params = request.content_params or {}
    charset = params.get("charset", "utf-8").strip('"').lower()
    if request.content_type != MEDIA_TYPE or charset not in ("utf-8", "utf8"):
        sent = request.META.get("CONTENT_TYPE") or "no Content-Type"
        raise InputError(f"Send the body as {MEDIA_TYPE} (UTF-8), not {sent[:100]}.",
                         code="unsupported_media_type", status=415)


def read_body(request: HttpRequest, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, refused (413) when larger than ``limit``."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise InputError(f"Body of {length} bytes is larger than {limit}.",
                         code="body_too_large", status=413)
    body = request.read(limit + 1)
    if len(body) > limit:
        raise InputError(f"Body is larger than {limit} bytes.", code="body_too_large",
                         status=413)
    return body


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate escape (\\ud800-\\udfff without its pair)"
    return None


def check_value(value: Any, what: str = "Body") -> None:
    """Refuse a parsed value that nests deeper than :data:`MAX_DEPTH` or holds text no
    store can keep; iterative, so no value can exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                raise InputError(f"{what} has text with {problem}.", error_code="invalid_text")
            continue
        if not isinstance(item, dict | list):
            continue
        if depth + 1 > MAX_DEPTH:
            raise InputError(f"{what} nests deeper than {MAX_DEPTH} levels.",
                             error_code="too_deep")
        if isinstance(item, dict):
            stack.extend((key, depth + 1) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        else:
            stack.extend((child, depth + 1) for child in item)


def parse(raw: bytes) -> Any:
    """Parse a JSON body, refusing what :func:`check_value` refuses."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("Body is not JSON (not UTF-8).", error_code="malformed_json") from None
    try:
        data = DECODER.decode(text or "{}")
    except RecursionError:
        raise InputError(f"Body nests deeper than {MAX_DEPTH} levels.",
                         error_code="too_deep") from None
    except NumberTooLarge as exc:
        raise InputError(f"Body has {exc}.", error_code="number_too_large") from None
    except ValueError as exc:
        raise InputError(f"Body is not JSON: {exc}", error_code="malformed_json") from None
    check_value(data)
    return data


def read_json(request: HttpRequest, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """The request's JSON object body of at most ``limit`` bytes (see the module docstring
    for what is refused)."""
    raw = read_body(request, limit)  # a body too large is that first, whatever its type
    require_json(request)
    data = parse(raw)
    if not isinstance(data, dict):
        raise InputError("Body must be a JSON object.", error_code="wrong_type")
    return data


__all__ = ["DECODER", "MAX_BODY_BYTES", "MAX_DEPTH", "MAX_NUMBER_DIGITS", "MEDIA_TYPE",
           "NumberTooLarge", "check_value", "parse", "read_body", "read_json", "require_json"]
