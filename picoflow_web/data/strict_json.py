"""The strict JSON parser of every request body and event line.

Python's parser takes what JSON (the store, every browser) has not: ``NaN``,
``Infinity`` and ``-Infinity``; and numbers of any length, which then cost the parser, the
store and every reader of the value. :data:`DECODER` refuses both, so the HTTP API's
bodies (:mod:`picoflow_web.http.jsonbody`) and the events ingest and import store
(:mod:`picoflow_web.record.ingest`) hold the same values.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_NUMBER_DIGITS = 1000
"""Longest number literal (digits, sign, point and exponent) a JSON text may hold."""


class NumberTooLarge(ValueError):
    """A number no JSON reader here should be asked to hold (raised by :data:`DECODER`)."""


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _integer(text: str) -> int:
    # Checked before int(): past Python's own limit its error names its internals.
    if len(text) > MAX_NUMBER_DIGITS:
        raise NumberTooLarge(f"a number too large (more than {MAX_NUMBER_DIGITS} digits)")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise NumberTooLarge(f"a number too large (more than {MAX_NUMBER_DIGITS} digits)")
    value = float(text)
    if value in (math.inf, -math.inf):
        raise NumberTooLarge(f"a number too large for a float ({text[:20]})")
    return value


DECODER = json.JSONDecoder(parse_constant=_constant, parse_int=_integer, parse_float=_float)
"""The JSON parser of every body and event line: ``NaN``/``Infinity`` refused
(``ValueError``), numbers bounded (:class:`NumberTooLarge`)."""


__all__ = ["DECODER", "MAX_NUMBER_DIGITS", "NumberTooLarge"]
