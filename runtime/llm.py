"""The model port: what a model adapter implements and what the runner sends it.

Adapters (the scripted model, the OpenAI-compatible client) implement :class:`Model`.
Flows name models by :class:`ModelSelection`; the engine maps the selection's ``provider``
to a registered :class:`Model`, which reads ``selection.name`` and ``selection.params``
from each request. No vendor SDK is imported here.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from .jsonutil import deep_merge
from .messages import Message, ToolCall

_SECRET_KEY = re.compile(
    r"^(api[-_]?key|authorization|credentials?|password|secret|token|access[-_]?token)$",
    re.IGNORECASE,
)


def strip_secrets(value: Any) -> Any:
    """Return ``value`` with secret-looking keys removed, recursively.

    Used wherever model params are persisted or shown, so API keys never reach a session
    document, an event or a page.
    """
    if isinstance(value, dict):
        return {k: strip_secrets(v) for k, v in value.items() if not _SECRET_KEY.match(str(k))}
    if isinstance(value, list):
        return [strip_secrets(v) for v in value]
    return value


class ModelSelection(BaseModel):
    """Which model a flow or step uses: ``{provider, name, params, retry_attempts}``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1)
    name: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    retry_attempts: int | None = Field(default=None, ge=1, le=20)

    def merged_with(self, override: ModelSelection | None) -> ModelSelection:
        """Resolve a step override against this (the flow's) selection.

        Same provider and name: params are deep-merged (the step's win); otherwise the
        override stands alone, as PicoFlow resolves step models.
        """
        if override is None:
            return self
        if override.provider == self.provider and override.name == self.name:
            return override.model_copy(
                update={
                    "params": deep_merge(self.params, override.params),
                    "retry_attempts": override.retry_attempts or self.retry_attempts,
                }
            )
        return override

    def public(self) -> dict[str, Any]:
        """JSON form with secrets stripped, for persistence and display."""
        data = self.model_dump(exclude_none=True)
        data["params"] = strip_secrets(self.params)
        return data


class ToolSchema(BaseModel):
    """A tool as offered to a model: name, description and JSON Schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class TokenUsage(BaseModel):
    """Token counts of one model attempt or of a whole session."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: TokenUsage) -> None:
        """Add ``other`` into this record in place."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.total_tokens += other.total_tokens


class ModelRequest(BaseModel):
    """Everything one model call sends. Adapters must not mutate it."""

    model_config = ConfigDict(frozen=True)

    selection: ModelSelection
    messages: list[Message]
    tools: list[ToolSchema] = Field(default_factory=list)
    flow: str = ""
    """The flow's name, so one scripted model can serve several flows."""
    step: str = ""
    """The executing step's name."""
    output_schema: dict[str, Any] | None = None
    """JSON Schema for structured output, when the step declares one."""

    @property
    def system_prompt(self) -> str:
        """Text of the slot-0 system message."""
        first = self.messages[0] if self.messages else None
        return first.content if first is not None and first.type == "system" else ""

    @property
    def last_message(self) -> Message | None:
        """The newest message, the one the model is answering."""
        return self.messages[-1] if self.messages else None


class ModelResponse(BaseModel):
    """One model answer: text and/or tool calls, plus usage."""

    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    finish_reason: Literal["stop", "tool_calls", "length", "content_filter", "other"] = "stop"

    @property
    def is_blank(self) -> bool:
        """No text and no tool calls: the runner asks again."""
        return not self.tool_calls and not self.content.strip()


@runtime_checkable
class Model(Protocol):
    """A chat model adapter.

    Raise :class:`~runtime.errors.ModelTransportError` for retryable failures,
    :class:`~runtime.errors.ModelBlockedError` for refusals; anything else fails the call.

    An adapter may also define ``describe(selection) -> dict | None``: how it names itself
    when it answers ``selection`` (see :func:`describe_model`); without it, or when it
    returns None, events name the selection.
    """

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Answer one request."""
        ...


def describe_model(model: Model, selection: ModelSelection) -> dict[str, Any]:
    """What a ``model.started`` event names: the answering model's own description.

    A model that answers in place of what the selection asks for (a scripted model playing
    a flow written for a real provider, an engine's model override) says so through an
    optional ``describe(selection)`` method; otherwise the selection names it. Secrets are
    stripped either way.
    """
    describe = getattr(model, "describe", None)
    described = describe(selection) if callable(describe) else None
    if described is None:
        return selection.public()
    return cast(dict[str, Any], strip_secrets(dict(described)))
