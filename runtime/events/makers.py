"""Builders generated per event type: the emit hot path without a dict merge per event.

:func:`build_unchecked` takes any dict of fields and puts it into declaration order; that
is a merge, a key comparison and often a second dict per event. A maker is a function
written for one model: its keyword parameters are the model's fields, so the call binds
them and one dict literal in declaration order becomes the instance's ``__dict__``. This
is how :mod:`dataclasses` writes ``__init__`` (source text compiled once per class), and
for the same reason: it is the cheapest construction Python offers.

* :func:`event_maker` — ``maker(bus, path, **fields)`` stamps the envelope from ``bus``
  (``seq``, wall time, monotonic offset), builds the event and hands it to
  ``bus.deliver``; returns it, or None when the bus has no sink left.
* :func:`record_maker` — ``maker(**fields)`` builds a nested record (a fork's
  :class:`~runtime.events.schema.BranchRequest`, say).

A misspelled or missing field is a ``TypeError`` from the call itself, as with any Python
function; :meth:`EventBus.emit_fields <runtime.events.bus.EventBus.emit_fields>` falls back
to :func:`build_unchecked` then, so an emit never breaks a flow. Under
``PICOFLOW_STRICT_EVENTS=1`` (:data:`~runtime.events.values.STRICT`) a maker takes
``**fields`` and builds through :func:`build_strict`, which names what is wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from .schema import SCHEMA_VERSION, EventBase
from .values import STRICT, build_strict

EventMaker = Callable[..., Any]
"""``(bus, path, **fields) -> Event | None``."""

_M = TypeVar("_M", bound=BaseModel)

ENVELOPE = ("v", "run_id", "session_id", "seq", "time", "offset", "path", "type")
"""The fields a maker stamps itself; every other field of an event is a parameter."""

_STAMPS = {
    "v": "_V", "run_id": "bus.run_id", "session_id": "bus.session_id", "seq": "_seq",
    "time": "bus._wall + _now", "offset": "_now", "path": "path", "type": "_TYPE",
}
"""How a maker fills each envelope field (``bus`` is the :class:`EventBus`)."""

_SLOT_SETTERS = {
    f"_set_{name}": BaseModel.__dict__[f"__{slot}__"].__set__
    for name, slot in (("dict", "dict"), ("fields_set", "pydantic_fields_set"),
                       ("extra", "pydantic_extra"), ("private", "pydantic_private"))
}
"""The setters of a model's four slots, called directly: ``object.__setattr__`` would look
each one up on the class first, on every event."""

_MISSING = object()
"""Default of a parameter whose field has a default factory: the factory runs per call."""

_EVENT_MAKERS: dict[type[BaseModel], EventMaker] = {}
_RECORD_MAKERS: dict[type[BaseModel], Callable[..., Any]] = {}


def event_maker(cls: type[EventBase]) -> EventMaker:
    """The maker of ``cls`` events (compiled on first use, then cached)."""
    maker = _EVENT_MAKERS.get(cls)
    if maker is None:
        maker = _EVENT_MAKERS[cls] = _compile(cls, event=True)
    return maker


def record_maker(cls: type[_M]) -> Callable[..., _M]:
    """The maker of ``cls`` records, ``(**fields) -> cls`` (compiled on first use, then
    cached)."""
    maker = _RECORD_MAKERS.get(cls)
    if maker is None:
        maker = _RECORD_MAKERS[cls] = _compile(cls, event=False)
    return maker


def _compile(cls: type[BaseModel], *, event: bool) -> Callable[..., Any]:
    fields = cls.model_fields
    own = [name for name in fields if not (event and name in ENVELOPE)]
    if event and "bus" in own:  # the maker's first parameter
        raise TypeError(f"{cls.__name__} may not declare a field named 'bus'.")
    namespace: dict[str, Any] = {
        "_cls": cls, "_new": cls.__new__, "_set": object.__setattr__, **_SLOT_SETTERS,
        "_FIELDS": set(fields), "_MISSING": _MISSING, "_build": build_strict,
        "_monotonic": time.monotonic, "_V": SCHEMA_VERSION,
    }
    if event:
        namespace["_TYPE"] = fields["type"].default
    params, prelude = [], []
    for name in own:
        info = fields[name]
        if info.default_factory is not None:
            namespace[f"_factory_{name}"] = info.default_factory
            params.append(f"{name}=_MISSING")
            prelude.append(f"    if {name} is _MISSING: {name} = _factory_{name}()")
        elif info.is_required():
            params.append(name)
        else:
            namespace[f"_default_{name}"] = info.default
            params.append(f"{name}=_default_{name}")
    values = ", ".join(
        f"{name!r}: {_STAMPS[name] if event and name in ENVELOPE else name}" for name in fields)
    head = "bus, path, " if event else ""
    if STRICT:  # every name through build_strict, which says what is wrong
        lines = [f"def make({head}**_fields):"]
        if event:
            lines += _STAMP_LINES
        stamped = ", ".join(f"{name!r}: {_STAMPS[name]}" for name in ENVELOPE) if event else ""
        lines.append(f"    _made = _build(_cls, {{{stamped}{', ' if stamped else ''}**_fields}})")
    else:
        lines = [f"def make({head}*, {', '.join(params)}):" if params else f"def make({head}):"]
        lines += prelude
        if event:
            lines += _STAMP_LINES
        lines += [
            "    _made = _new(_cls)",
            f"    _set_dict(_made, {{{values}}})",
            # One shared set per class: pydantic only reads it (saves an allocation).
            "    _set_fields_set(_made, _FIELDS)",
            "    _set_extra(_made, None)",
            "    _set_private(_made, None)",
        ]
    if event:
        lines += ["    bus.seq = _seq + 1", "    return bus.deliver(_made)"]
    else:
        lines.append("    return _made")
    exec("\n".join(lines), namespace)  # the source names only declared fields
    made: Callable[..., Any] = namespace["make"]
    made.__qualname__ = f"make_{cls.__name__}"
    return made


_STAMP_LINES = [
    "    if not bus.sinks: return None",
    "    _now = _monotonic() - bus._start",
    "    _seq = bus.seq",
]
