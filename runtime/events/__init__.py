"""The event stream: what the runtime records, how it is emitted, stored and folded.

=================  ========================================================================
``schema``         the pydantic models only: the envelope, every event type, the union
                   :data:`Event`, :func:`parse_event`, :func:`json_schema`, nested records
``ids``            the one definition of a valid run or session id (:data:`ID_PATTERN`,
                   :func:`id_problem`)
``values``         plain-JSON values for events (:func:`safe_value`, truncation),
                   :func:`error_info`, and :func:`build`, the emit hot path (checked under
                   ``PICOFLOW_STRICT_EVENTS=1``)
``makers``         :func:`event_maker` and :func:`record_maker`: a builder compiled per
                   type, what the hottest events are emitted with
``bus``            :class:`EventBus` (stamps and delivers) and the :class:`EventSink` protocol
``sinks``          memory, callback, JSONL and bounded sinks; the JSONL export format
``dashboard``      :class:`DashboardSink`: batches events to a dashboard over HTTP
``ingest_client``  the sink's half that talks to the dashboard: requests (on httpx2, the
                   ``http`` extra, loaded by name), what their answers mean, its warnings
``channels``       the built-in channels' reducer rules, pure: the join and the fold read
                   the same
``fold``           events to a run model, and any invocation's view at any moment: a
                   package, one module per event family
``trace``          the readable text dump (``python -m runtime trace FILE.jsonl``)
=================  ========================================================================

The package imports only the standard library and pydantic (httpx2 is loaded by name when
a :class:`DashboardSink` is made); ``channels`` imports only the standard library; ``fold``
and ``trace`` import only from this package. Everything outside it imports from here
(``from runtime import events as ev``, ``from runtime.events import MemorySink``), not from
the modules; the barrier alone reads ``channels``, whose rules its join applies.

Note that ``runtime.events.fold`` is the function :func:`fold`; the package is reached by
``from runtime.events.fold import ...`` or ``importlib.import_module`` only.
"""

from __future__ import annotations

from .bus import EventBus, EventSink
from .channels import FOLDED_CHANNELS
from .dashboard import MAX_SOURCE_CHARS, DashboardSink, source_problem
from .fold import (
    Anomaly,
    Applied,
    Barrier,
    Invocation,
    Overflow,
    Publication,
    RunModel,
    State,
    apply_event,
    barrier_publication_of,
    comparable,
    fold,
    new_run,
    publication_of,
    runs_of,
    view_at,
)
from .ids import ID_CHARACTERS, ID_PATTERN, MAX_ID_CHARS, id_problem, is_valid_id
from .makers import event_maker, record_maker
from .schema import (
    EVENT_ADAPTER,
    EVENT_TYPES,
    SCHEMA_VERSION,
    BarrierForked,
    BarrierOptions,
    BarrierRequested,
    BranchDirectResult,
    BranchFulfilled,
    BranchRejected,
    BranchRequest,
    BranchReused,
    BranchStarted,
    CancelGraceExpired,
    CancelPropagated,
    CancelRequested,
    CheckpointFailed,
    CheckpointSaved,
    ChildStatus,
    ConcurrentBatchFinished,
    ConcurrentBatchStarted,
    ConcurrentChildFinished,
    ConcurrentChildStarted,
    CursorMoved,
    ErrorInfo,
    Event,
    EventBase,
    JoinInvalidated,
    JoinPublished,
    JoinReduced,
    ListContinued,
    ModelDelta,
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
    json_schema,
    parse_event,
)
from .sinks import BoundedSink, CallbackSink, JsonlSink, MemorySink, dump_event, read_jsonl
from .trace import dump_trace
from .values import (
    FORK_PAGE,
    FORK_PAGE_CHARS,
    LIST_PAGE,
    LIST_PAGE_CHARS,
    MAX_VALUE_CHARS,
    STRICT,
    STRICT_ENV,
    EventBuildError,
    Unpager,
    build,
    build_strict,
    build_unchecked,
    error_info,
    first_fork_page,
    fork_pages,
    interruption,
    list_pages,
    paged_lists,
    safe_list,
    safe_text,
    safe_value,
)

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_TYPES",
    "FOLDED_CHANNELS",
    "FORK_PAGE",
    "FORK_PAGE_CHARS",
    "ID_CHARACTERS",
    "ID_PATTERN",
    "LIST_PAGE",
    "LIST_PAGE_CHARS",
    "MAX_ID_CHARS",
    "MAX_SOURCE_CHARS",
    "MAX_VALUE_CHARS",
    "SCHEMA_VERSION",
    "STRICT",
    "STRICT_ENV",
    "Anomaly",
    "Applied",
    "Barrier",
    "BarrierForked",
    "BarrierOptions",
    "BarrierRequested",
    "BoundedSink",
    "BranchDirectResult",
    "BranchFulfilled",
    "BranchRejected",
    "BranchRequest",
    "BranchReused",
    "BranchStarted",
    "CallbackSink",
    "CancelGraceExpired",
    "CancelPropagated",
    "CancelRequested",
    "CheckpointFailed",
    "CheckpointSaved",
    "ChildStatus",
    "ConcurrentBatchFinished",
    "ConcurrentBatchStarted",
    "ConcurrentChildFinished",
    "ConcurrentChildStarted",
    "CursorMoved",
    "DashboardSink",
    "ErrorInfo",
    "Event",
    "EventBase",
    "EventBuildError",
    "EventBus",
    "EventSink",
    "Invocation",
    "JoinInvalidated",
    "JoinPublished",
    "JoinReduced",
    "JsonlSink",
    "ListContinued",
    "MemorySink",
    "ModelDelta",
    "ModelFailed",
    "ModelFinished",
    "ModelStarted",
    "Overflow",
    "Publication",
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
    "Unpager",
    "apply_event",
    "barrier_publication_of",
    "build",
    "build_strict",
    "build_unchecked",
    "comparable",
    "dump_event",
    "dump_trace",
    "error_info",
    "event_maker",
    "first_fork_page",
    "fold",
    "fork_pages",
    "id_problem",
    "interruption",
    "is_valid_id",
    "json_schema",
    "list_pages",
    "new_run",
    "paged_lists",
    "parse_event",
    "publication_of",
    "read_jsonl",
    "record_maker",
    "runs_of",
    "safe_list",
    "safe_text",
    "safe_value",
    "source_problem",
    "view_at",
]
