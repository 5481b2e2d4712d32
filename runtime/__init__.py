"""PicoFlow runtime: flows, steps, tools, transitions, sessions and models.

Imports only the standard library, pydantic and anyio, so it runs anywhere — inside the
web app, a script or a test — on asyncio or trio.
"""

from __future__ import annotations

from typing import Any

# Provides the model/tool loop a Step runs (runtime.current): a Step may run before
# anything else imports the runner.
from . import runner as runner
from .barrier import (
    BarrierOptions,
    BranchResult,
    CancelToken,
    Channel,
    ContributionMeta,
    DirectResult,
    LedgerEntry,
    ParallelBatchResult,
    ParallelConfig,
    ParallelInvocation,
    Publication,
    RunStepRequest,
    StepChannels,
    direct_result,
)
from .concurrent import ChildReply, ConcurrentResult
from .engine import FlowEngine, FlowInfo, Resumable, RunReply
from .errors import (
    BadRunIdError,
    BadSessionIdError,
    BarrierInvalidError,
    BranchBudgetError,
    BranchCancelledError,
    BranchError,
    BranchTimeoutError,
    ConcurrentConfigError,
    ConcurrentDepthError,
    ConcurrentError,
    ConfigValidationError,
    ExecutionFrameError,
    FlowDefinitionError,
    FlowInputError,
    FlowNotRegisteredError,
    MessageRequiredError,
    ModelBlockedError,
    ModelCallError,
    ModelError,
    ModelTransportError,
    NothingToResumeError,
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
    TurnCancelledError,
    TurnLimitError,
)
from .flow import Flow
from .llm import Model, ModelRequest, ModelResponse, ModelSelection, TokenUsage, ToolSchema
from .messages import Message, ToolCall, human_message, now_iso
from .scripted import Rule, ScriptedModel
from .session import SessionDocument
from .step import TERMINATE_SESSION_TOOL, LogicStep, Routable, Step, TerminateSessionStep
from .stores import (
    BranchLedgerStore,
    LedgerTurn,
    MemorySessionStore,
    SessionStore,
    SQLiteSessionStore,
)
from .tools import ToolSpec, define_tool, tool
from .transitions import Transition, direct, go, stay

__all__ = [
    "TERMINATE_SESSION_TOOL",
    "BadRunIdError",
    "BadSessionIdError",
    "BarrierInvalidError",
    "BarrierOptions",
    "BranchBudgetError",
    "BranchCancelledError",
    "BranchError",
    "BranchLedgerStore",
    "BranchResult",
    "BranchTimeoutError",
    "CancelToken",
    "Channel",
    "ChildReply",
    "ConcurrentConfigError",
    "ConcurrentDepthError",
    "ConcurrentError",
    "ConcurrentResult",
    "ConfigValidationError",
    "ContributionMeta",
    "DirectResult",
    "ExecutionFrameError",
    "Flow",
    "FlowDefinitionError",
    "FlowEngine",
    "FlowInfo",
    "FlowInputError",
    "FlowNotRegisteredError",
    "LedgerEntry",
    "LedgerTurn",
    "LogicStep",
    "MemorySessionStore",
    "Message",
    "MessageRequiredError",
    "Model",
    "ModelBlockedError",
    "ModelCallError",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSelection",
    "ModelTransportError",
    "NothingToResumeError",
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
    "Resumable",
    "Routable",
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
    "TurnCancelledError",
    "TurnLimitError",
    "define_tool",
    "direct",
    "direct_result",
    "go",
    "human_message",
    "now_iso",
    "stay",
    "tool",
]


def __getattr__(name: str) -> Any:
    # OpenAICompatibleModel lives on the openai SDK (an extra): loaded when first asked
    # for, so importing the runtime needs neither; without the extra this names it.
    if name == "OpenAICompatibleModel":
        from .openai_compat import load_openai_model

        return load_openai_model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
