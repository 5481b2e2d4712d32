"""PicoFlow runtime: flows, steps, tools, transitions, sessions and models.

Imports only the standard library, pydantic and anyio, so it runs anywhere — inside the
web app, a script or a test — on asyncio or trio.
"""

from __future__ import annotations

from .engine import FlowEngine, RunReply
from .errors import (
    ExecutionFrameError,
    FlowDefinitionError,
    FlowNotRegisteredError,
    ModelBlockedError,
    ModelCallError,
    ModelError,
    ModelTransportError,
    PicoFlowError,
    ScriptedModelError,
    SessionConflictError,
    SessionError,
    SessionFlowInvariantError,
    SessionFlowMismatchError,
    SessionStoreError,
    StateValueError,
    ToolArgumentsError,
    TurnLimitError,
)
from .flow import Flow
from .messages import Message, ToolCall
from .models import Model, ModelRequest, ModelResponse, ModelSelection, TokenUsage, ToolSchema
from .openai_compat import OpenAICompatibleModel
from .scripted import Rule, ScriptedModel
from .session import SessionDocument
from .step import TERMINATE_SESSION_TOOL, LogicStep, Step
from .stores import MemorySessionStore, SessionStore, SQLiteSessionStore
from .terminate import TerminateSessionStep
from .tools import ToolSpec, define_tool, tool
from .transitions import Transition, direct, go, stay

__all__ = [
    "TERMINATE_SESSION_TOOL",
    "ExecutionFrameError",
    "Flow",
    "FlowDefinitionError",
    "FlowEngine",
    "FlowNotRegisteredError",
    "LogicStep",
    "MemorySessionStore",
    "Message",
    "Model",
    "ModelBlockedError",
    "ModelCallError",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSelection",
    "ModelTransportError",
    "OpenAICompatibleModel",
    "PicoFlowError",
    "Rule",
    "RunReply",
    "SQLiteSessionStore",
    "ScriptedModel",
    "ScriptedModelError",
    "SessionConflictError",
    "SessionDocument",
    "SessionError",
    "SessionFlowInvariantError",
    "SessionFlowMismatchError",
    "SessionStore",
    "SessionStoreError",
    "StateValueError",
    "Step",
    "TerminateSessionStep",
    "TokenUsage",
    "ToolArgumentsError",
    "ToolCall",
    "ToolSchema",
    "ToolSpec",
    "Transition",
    "TurnLimitError",
    "define_tool",
    "direct",
    "go",
    "stay",
    "tool",
]
