"""Tool-driven transitions: ``go``, ``stay`` and ``direct``.

A :class:`Transition` is an immutable builder. The runner applies one in this order
(PicoFlow's documented order; tests pin it):

1. move the cursor (``on_exit`` of the old step, ``on_enter`` of the new one);
2. save ``with_prompt`` as the destination's ``_prompt``;
3. save ``with_state`` on the destination;
4. set the destination's content type;
5. reply to each tool call with the feedback text (default "input validated");
6. deliver ``with_message``: right after the tool messages when the destination is the
   step that made the call, else carried across the crossing to the destination.

So a destination's ``on_enter`` cannot see ``with_state``/``with_prompt`` values.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from .errors import ExecutionFrameError, FlowDefinitionError, StateValueError
from .messages import Message, direct_message

if TYPE_CHECKING:
    from .messages import ToolCall
    from .step import Step

DEFAULT_TOOL_FEEDBACK = "input validated"


@dataclass(frozen=True)
class ToolContext:
    """What a running tool handler may route relative to."""

    step: Step
    call: ToolCall


tool_context: ContextVar[ToolContext | None] = ContextVar("picoflow_tool_context", default=None)


@dataclass(frozen=True)
class Transition:
    """Where the turn goes next and what travels with it. Build with go/stay/direct."""

    target: str
    kind: Literal["go", "stay", "direct"] = "go"
    tool_feedback: str | None = None
    state: dict[str, Any] | None = None
    prompt: str | None = None
    message: Message | str | None = None
    content_type: str | None = None

    def with_tool_feedback(self, text: str) -> Transition:
        """Text of the tool message(s) answering the call that produced this transition."""
        return replace(self, tool_feedback=text)

    def with_state(self, state: dict[str, Any]) -> Transition:
        """State saved on the destination (after its ``on_enter``)."""
        return replace(self, state=dict(state))

    def with_prompt(self, prompt: str) -> Transition:
        """Prompt stored as the destination's ``_prompt``."""
        return replace(self, prompt=prompt)

    def with_message(self, message: Message | str) -> Transition:
        """A message delivered to the destination (a string becomes a human message)."""
        return replace(self, message=message)

    def with_content_type(self, content_type: str) -> Transition:
        """Content type of the destination's replies (e.g. ``text/markdown``)."""
        return replace(self, content_type=content_type)


def step_name_of(target: str | type[Step]) -> str:
    """Normalise a go() target to a step name."""
    if isinstance(target, str):
        name = target.strip()
        if not name:
            raise FlowDefinitionError("go() requires a non-empty Step name.")
        return name
    step_id: object = getattr(target, "id", None)
    if not isinstance(step_id, str) or not step_id:
        raise FlowDefinitionError("go() requires a Step class with a non-empty id.")
    return step_id


def go(target: str | type[Step]) -> Transition:
    """Move the cursor to ``target`` (a step class or its name)."""
    return Transition(target=step_name_of(target))


def _handler_context(helper: str) -> ToolContext:
    ctx = tool_context.get()
    if ctx is None:
        raise ExecutionFrameError(
            f"{helper}() can only be used while a tool handler is running."
        )
    from .barrier import current_view

    view = current_view.get()
    if view is not None:
        raise view.violate(f"route with {helper}() (use direct_result() in a branch)")
    return ctx


def stay(feedback: str | None = None) -> Transition:
    """Stay on the executing step; the model is called again with ``feedback``."""
    ctx = _handler_context("stay")
    return Transition(target=ctx.step.name, kind="stay",
                      tool_feedback=feedback or DEFAULT_TOOL_FEEDBACK)


def direct(content: Any) -> Transition:
    """End the turn with ``content`` as the reply, without another model call.

    Objects are JSON-encoded. The cursor stays where it is.
    """
    ctx = _handler_context("direct")
    if not isinstance(content, str):
        try:
            content = json.dumps(content)
        except (TypeError, ValueError) as exc:
            raise StateValueError(f"direct() content is not JSON-serialisable: {exc}") from exc
    return Transition(target=ctx.step.name, kind="direct",
                      message=direct_message(ctx.step.name, content))
