"""The fold's dispatch: every family's handlers, by event type, in one table."""

from __future__ import annotations

import typing

import pytest

from runtime.events import EVENT_TYPES
from runtime.events.fold import apply


def test_every_handler_is_registered_under_the_type_of_the_event_it_takes() -> None:
    assert apply.HANDLERS, "no handler registered"
    for type_, handler in apply.HANDLERS.items():
        assert type_ in EVENT_TYPES, type_
        hints = typing.get_type_hints(handler)
        assert hints["event"] is EVENT_TYPES[type_], (type_, handler.__qualname__)


def test_an_event_type_handled_by_two_families_is_refused() -> None:
    def handler(*args: object) -> None:
        return None

    with pytest.raises(ValueError, match=r"\['turn.started'\]"):
        apply._union({"turn.started": handler}, {"turn.started": handler})
