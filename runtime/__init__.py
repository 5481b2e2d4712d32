"""PicoFlow runtime: flows, steps, tools, transitions, sessions and models.

Imports only the standard library, pydantic and anyio, so it runs anywhere — inside the
web app, a script or a test — on asyncio or trio.
"""

from __future__ import annotations

from .channels import Channel, ContributionMeta, StepChannels
from .engine import FlowEngine, RunReply
from .errors import (
    BarrierInvalidError,
    BranchBudgetError,
    BranchCancelledError,
    BranchError,
    BranchTimeoutError,
    ExecutionFrameError,
    FlowDefinitionError,
    FlowNotRegisteredError,
    ModelBlockedError,
    ModelCallError,
    ModelError,
    ModelTransportError,
    ParallelCheckpointError,
    ParallelConfigurationError,
    ParallelDuplicateKeyError,
    ParallelError,
    ParallelLimitError,
    ParallelMutationError,
    ParallelOutputError,
    ParallelReducerError,
    ParallelStateConflictError,
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
from .parallel import (
    BranchResult,
    CancelToken,
    DirectResult,
    ParallelBatchResult,
    ParallelConfig,
    ParallelInvocation,
    Publication,
    RunStepRequest,
    direct_result,
)
from .scripted import Rule, ScriptedModel
from .session import SessionDocument
from .step import TERMINATE_SESSION_TOOL, LogicStep, Step
from .stores import MemorySessionStore, SessionStore, SQLiteSessionStore
from .terminate import TerminateSessionStep
from .tools import ToolSpec, define_tool, tool
from .transitions import Transition, direct, go, stay

__all__ = [
    "TERMINATE_SESSION_TOOL",
    "BarrierInvalidError",
    "BranchBudgetError",
    "BranchCancelledError",
    "BranchError",
    "BranchResult",
    "BranchTimeoutError",
    "CancelToken",
    "Channel",
    "ContributionMeta",
    "DirectResult",
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
    "ParallelBatchResult",
    "ParallelCheckpointError",
    "ParallelConfig",
    "ParallelConfigurationError",
    "ParallelDuplicateKeyError",
    "ParallelError",
    "ParallelInvocation",
    "ParallelLimitError",
    "ParallelMutationError",
    "ParallelOutputError",
    "ParallelReducerError",
    "ParallelStateConflictError",
    "PicoFlowError",
    "Publication",
    "Rule",
    "RunReply",
    "RunStepRequest",
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
    "StepChannels",
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
    "direct_result",
    "go",
    "stay",
    "tool",
]
