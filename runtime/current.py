"""What a running Step reaches for: its flow's turn and the model/tool loop.

A Step is the base every other part of the core knows (the turn, the dispatcher and the
runner test for it), so ``step.py`` cannot import them back without making an import
cycle. They provide themselves here instead, when they are imported: the turn its class
(:mod:`runtime.turn`), the runner its loop (:mod:`runtime.runner`). ``runtime/__init__``
imports both, and it runs before any module of the package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .flow import Flow
    from .messages import Message
    from .turn import Turn

SLOT = "__picoflow_turn__"
"""Where a flow instance keeps its turn: in its own ``__dict__``, under a dunder-style
name no subclass would choose, so the turn lives and dies with the flow instance."""

_turn_class: list[Callable[[Flow], Turn]] = []
_loop: list[Callable[[Flow, Message | None], Awaitable[str]]] = []


def provide_turn(make: Callable[[Flow], Turn]) -> None:
    _turn_class[:] = [make]


def provide_loop(loop: Callable[[Flow, Message | None], Awaitable[str]]) -> None:
    _loop[:] = [loop]


def turn_of(flow: Flow) -> Turn:
    """The turn of a flow instance (created on first use)."""
    state = flow.__dict__
    turn: Turn | None = state.get(SLOT)
    if turn is None:
        turn = state[SLOT] = _turn_class[0](flow)
    return turn


def run_loop(flow: Flow, message: Message | None) -> Awaitable[str]:
    """The model/tool loop of the flow's current step (:func:`runtime.runner.run_loop`)."""
    return _loop[0](flow, message)
