"""The event stream: what the runtime records, how it is emitted, stored and folded.

=================  ========================================================================
``schema``         the pydantic models only: the envelope, every event type, the union
                   :data:`Event`, :func:`parse_event`, :func:`json_schema`, nested records
``values``         plain-JSON values for events (:func:`safe_value`, truncation),
                   :func:`error_info`, and :func:`build`, the emit hot path (checked under
                   ``PICOFLOW_STRICT_EVENTS=1``)
``bus``            :class:`EventBus` (stamps and delivers) and the :class:`EventSink` protocol
``sinks``          memory, callback, JSONL and bounded sinks; the JSONL export format
``dashboard``      :class:`DashboardSink`: batches events to a dashboard over HTTP
``fold``           events to a run model, and any invocation's view at any moment
``trace``          the readable text dump (``python -m runtime trace FILE.jsonl``)
=================  ========================================================================

The package imports only the standard library and pydantic; ``fold`` and ``trace`` import
only from this package. Everything outside it imports from here (``from runtime import
events as ev``, ``from runtime.events import MemorySink``), not from the modules.

Note that ``runtime.events.fold`` is the function :func:`fold`; the module is imported as
``runtime.events.fold`` by ``from runtime.events.fold import ...`` only.
"""

from __future__ import annotations

from .bus import EventBus, EventSink
from .dashboard import DashboardSink
from .fold import (
    Anomaly,
    Barrier,
    Invocation,
    Overflow,
    RunModel,
    State,
    apply_event,
    comparable,
    fold,
    new_run,
    runs_of,
    view_at,
)
from .schema import (
    EVENT_ADAPTER,
    EVENT_TYPES,
    SCHEMA_VERSION,
    BarrierForked,
    BarrierOptions,
    BranchDirectResult,
    BranchFulfilled,
    BranchRejected,
    BranchRequest,
    BranchStarted,
    CancelGraceExpired,
    CancelPropagated,
    CancelRequested,
    CheckpointFailed,
    CheckpointSaved,
    CursorMoved,
    ErrorInfo,
    Event,
    JoinInvalidated,
    JoinPublished,
    JoinReduced,
    ModelFailed,
    ModelFinished,
    ModelStarted,
    PublishedField,
    RunInterrupted,
    SessionLoaded,
    SessionSaved,
    SinkOverflowed,
    StateContributed,
    StateRemoved,
    StateReplaced,
    StepEntered,
    StepExited,
    ToolFinished,
    ToolStarted,
    Truncated,
    TurnCancelled,
    TurnFailed,
    TurnFinished,
    TurnStarted,
    _Event,
    json_schema,
    parse_event,
)
from .sinks import BoundedSink, CallbackSink, JsonlSink, MemorySink, dump_event, read_jsonl
from .trace import dump_trace
from .values import (
    MAX_VALUE_CHARS,
    STRICT,
    STRICT_ENV,
    EventBuildError,
    build,
    build_strict,
    build_unchecked,
    error_info,
    interruption,
    safe_list,
    safe_value,
)

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "MAX_VALUE_CHARS",
    "SCHEMA_VERSION",
    "STRICT",
    "STRICT_ENV",
    "Anomaly",
    "Barrier",
    "BarrierForked",
    "BarrierOptions",
    "BoundedSink",
    "BranchDirectResult",
    "BranchFulfilled",
    "BranchRejected",
    "BranchRequest",
    "BranchStarted",
    "CallbackSink",
    "CancelGraceExpired",
    "CancelPropagated",
    "CancelRequested",
    "CheckpointFailed",
    "CheckpointSaved",
    "CursorMoved",
    "DashboardSink",
    "ErrorInfo",
    "Event",
    "EventBuildError",
    "EventBus",
    "EventSink",
    "Invocation",
    "JoinInvalidated",
    "JoinPublished",
    "JoinReduced",
    "JsonlSink",
    "MemorySink",
    "ModelFailed",
    "ModelFinished",
    "ModelStarted",
    "Overflow",
    "PublishedField",
    "RunInterrupted",
    "RunModel",
    "SessionLoaded",
    "SessionSaved",
    "SinkOverflowed",
    "State",
    "StateContributed",
    "StateRemoved",
    "StateReplaced",
    "StepEntered",
    "StepExited",
    "ToolFinished",
    "ToolStarted",
    "Truncated",
    "TurnCancelled",
    "TurnFailed",
    "TurnFinished",
    "TurnStarted",
    "_Event",
    "apply_event",
    "build",
    "build_strict",
    "build_unchecked",
    "comparable",
    "dump_event",
    "dump_trace",
    "error_info",
    "fold",
    "interruption",
    "json_schema",
    "new_run",
    "parse_event",
    "read_jsonl",
    "runs_of",
    "safe_list",
    "safe_value",
    "view_at",
]
