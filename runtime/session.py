"""The session document: everything a flow persists between turns.

One document per session, one flow per document, guarded by an integer ``revision`` that
every store compares and swaps. A :class:`Flow` instance lives for one turn; this
document is all that survives it.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .llm import TokenUsage
from .messages import Message, now_iso

SESSION_DOC_VERSION = "1.5"
"""Version stamped on every saved document; ``Flow.on_restore_session_doc`` resets others."""

RunStatus = Literal["running", "completed", "aborted"]


class MemorySpace(BaseModel):
    """One memory namespace: slot 0 is the system message, rewritten before each call."""

    model_config = ConfigDict(extra="forbid")

    messages: list[Message] = Field(default_factory=list)
    summary: str | None = None


class StepRecord(BaseModel):
    """Persisted state of one step (transient state is never persisted)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    state: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] | None = None
    """The step's model selection when it differs from the flow's (secrets stripped)."""


class SequenceEntry(BaseModel):
    """One entry of the execution trail: top-level gotos at level 1, children deeper.

    Frozen: a turn shares one entry among the branches that append equal ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: int = Field(ge=1)
    step_name: str


class FlowRecord(BaseModel):
    """The flow part of the envelope."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    memory: dict[str, MemorySpace] = Field(default_factory=dict)
    steps: list[StepRecord] = Field(default_factory=list)
    current_step: str | None = None
    """The one durable cursor."""
    sequence: list[SequenceEntry] = Field(default_factory=list)


class LogEntry(BaseModel):
    """A session log line (``log``, ``warn``, ``error`` arrays)."""

    model_config = ConfigDict(extra="allow")

    timestamp: str = Field(default_factory=now_iso)
    level: Literal["log", "warn", "error", "debug"]
    message: str


class SessionDocument(BaseModel):
    """The persisted session envelope."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    revision: int = 0
    """Compare-and-swap token: a save must name the revision it read."""
    version: str = SESSION_DOC_VERSION
    run_status: RunStatus = "running"
    created_on: str = Field(default_factory=now_iso)
    save_on: str = Field(default_factory=now_iso)
    flow: FlowRecord
    tokens: TokenUsage = Field(default_factory=TokenUsage)
    log: list[LogEntry] = Field(default_factory=list)
    warn: list[LogEntry] = Field(default_factory=list)
    error: list[LogEntry] = Field(default_factory=list)

    def step_record(self, name: str) -> StepRecord | None:
        """The persisted record of step ``name``, if any."""
        return next((s for s in self.flow.steps if s.name == name), None)
