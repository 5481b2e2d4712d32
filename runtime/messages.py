"""Chat messages: the records kept in a memory namespace and sent to models.

The shape follows PicoFlow's persisted message records (``type``, ``id``, ``tool_call_id``,
``tool_calls``, ``additional_kwargs``) so session documents read the same in both runtimes.
"""

from __future__ import annotations

import random
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .events import record_maker

MessageType = Literal["system", "human", "ai", "tool"]


def now_iso() -> str:
    """Current UTC time as an ISO-8601 string with milliseconds: ``2026-12-02T14:09:55.123Z``.

    Every message is stamped, several per model call: the text up to the second is formatted
    once per second, not once per message (cheaper than a datetime's isoformat each time).
    """
    global _second
    now = time.time()
    whole = int(now)
    second, text = _second
    if whole != second:
        _second = second, text = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{text}.{int((now - whole) * 1000):03d}Z"


_second: tuple[int, str] = (-1, "")
"""The last second :func:`now_iso` formatted, and its text."""


def gen_message_id(step_name: str, stamp: str | None = None) -> str:
    """A step-attributed message id: ``<StepName>|<ISO time>|<10 digits>``.

    The step prefix is what ``Step.on_crossing`` reads to tell whether the last message
    in a namespace was produced by that step. ``stamp`` is the time to put in (now when
    None).
    """
    return f"{step_name}|{stamp or now_iso()}|{random.randrange(10**9, 10**10)}"


def _attributed(step_name: str, **fields: Any) -> Message:
    # One clock read: the id's time and the timestamp are the same instant.
    stamp = now_iso()
    # Content that is not text comes from user code: validated, and refused.
    make = _message if type(fields.get("content", "")) is str else Message
    return make(id=gen_message_id(step_name, stamp), timestamp=stamp, **fields)


class ToolCall(BaseModel):
    """One tool call requested by the model."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Provider-assigned call id; every call gets exactly one tool message in reply."""
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class Message(BaseModel):
    """One chat message.

    ``content`` is text; structured outputs are stored JSON-encoded.
    """

    model_config = ConfigDict(extra="forbid")

    type: MessageType
    content: str = ""
    id: str = ""
    timestamp: str = Field(default_factory=now_iso)
    name: str | None = None
    """Tool name, on tool messages."""
    tool_call_id: str | None = None
    """Required on tool messages: the call this message answers."""
    status: Literal["success", "error"] | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Hints such as ``direct: true`` on a direct reply."""

    @property
    def step_name(self) -> str | None:
        """The step that produced the message, from its id, if attributed."""
        head, sep, _ = self.id.partition("|")
        return head if sep else None

    @property
    def is_direct(self) -> bool:
        """Whether this AI message is a direct reply that ends the turn without a model call."""
        return bool(self.additional_kwargs.get("direct"))


_message = record_maker(Message)
"""Builds the runtime's own messages, several per model call, without validating them
again: their values come from validated requests, responses and prompts (the test suite
builds them strictly, ``PICOFLOW_STRICT_EVENTS=1``)."""


def system_message(content: str) -> Message:
    """The slot-0 system message of a namespace."""
    # A prompt that is not text comes from user code: validated, and refused.
    make = _message if type(content) is str else Message
    return make(type="system", content=content, id="system")


def human_message(step_name: str, content: str) -> Message:
    """A human message attributed to ``step_name``."""
    return _attributed(step_name, type="human", content=content,
                       additional_kwargs={"direct": False})


def ai_message(step_name: str, content: str, tool_calls: list[ToolCall] | None = None) -> Message:
    """An AI message attributed to ``step_name``."""
    return _attributed(step_name, type="ai", content=content, tool_calls=tool_calls or [])


def direct_message(step_name: str, content: str) -> Message:
    """An AI message that is returned to the user as-is, without another model call."""
    return _attributed(step_name, type="ai", content=content,
                       additional_kwargs={"direct": True})


def tool_message(
    step_name: str, call: ToolCall, content: str, *, status: Literal["success", "error"]
) -> Message:
    """The reply to one tool call."""
    return _attributed(step_name, type="tool", content=content, name=call.name,
                       tool_call_id=call.id, status=status)
