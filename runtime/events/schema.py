"""The event schema: one typed record for everything the runtime does.

The pydantic models only: building events (:func:`~runtime.events.values.build`), their
values, emission and folding live in the package's other modules. One pydantic
discriminated union (:data:`Event`, on ``type``) is the only definition of an event. The
runtime emits them, the web app stores and forwards them unchanged, and the browser reads
them through the JSON Schema generated from this module
(``static/picoflow_web/schema/events.schema.json``).

Every event carries the envelope: ``v`` (schema version), ``run_id``, ``session_id``,
``seq`` (per-run, gap-free, from 0), ``time`` (wall clock, Unix seconds), ``offset`` (seconds
on a monotonic clock since the run started) and ``path`` (the invocation path it belongs
to; ``""`` at top level). Start events are emitted before anything inside them, so a live
tree never has orphans. Values are JSON; a very large value is replaced by a
:class:`Truncated` marker saying so and how big it was. Secrets never appear: model params
are stripped of secret-looking keys.

Event types, ``<subject>.<past verb>``:

=========================  =================================================================
``turn.started``           a turn began: flow, user message, new or restored session
``turn.finished``          the reply (success, completed, message, content type)
``turn.failed``            the turn failed: error code and message
``turn.cancelled``         the turn was stopped through its cancel token: reason, who asked,
                           the revision the session stays at
``session.loaded``         the state a turn starts from (cursor, step states, tokens)
``session.saved``          a compare-and-swap save: revision and why
``step.entered``           a step became current, or was entered as a sequential child
``step.exited``            it stopped being current
``cursor.moved``           the durable cursor moved (from, to)
``model.started``          a model attempt: selection, attempt, request messages, tools
``model.delta``            part of the answer as the model writes it (streamed text and
                           tool-call argument chunks, coalesced)
``model.finished``         its answer: text, tool calls, usage, latency
``model.failed``           the attempt failed: error, and whether it is retried
``tool.started``           a tool handler was called with these arguments
``tool.finished``          its result: tool message, status, transition produced
``state.replaced``         a field replaced (canonical, or a branch's draft): value, base
``state.removed``          a field removed
``state.contributed``      a contribution to a channel: value, call order
``barrier.forked``         a barrier began: requests in order (the first page of a wide
                           fork's), how many, policy, limits, view
``barrier.requested``      the next page of a wide fork's requests
``list.continued``         the next page of a per-branch list of the event before it (a
                           wide join's inputs, completion order, discarded branches or
                           provenance; a wide cancellation's paths)
``branch.started``         a branch began running
``branch.fulfilled``       a branch finished with an output
``branch.rejected``        a branch failed (error); ``cancelled`` says if by cancellation
``branch.direct_result``   a branch's tool ended it with a value
``branch.reused``          a resumed turn restored a fulfilled branch from the ledger
                           instead of running it: output, tokens, where it first ran
``join.reduced``           one channel reduced: inputs in request-path order, completion
                           order, result
``join.published``         what the join published, and where
``join.invalidated``       the join refused to publish: error kind and provenance
``cancel.requested``       a barrier's cancel token fired
``cancel.propagated``      which running branches were told
``cancel.grace_expired``   which branches lost publication rights
``checkpoint.saved``       the root-join checkpoint saved: revision
``checkpoint.failed``      the checkpoint failed and the join was rolled back
``concurrent.batch_started``   a ``concurrent_steps()`` batch began: its items, the
                           children's flow, timeout and retries
``concurrent.child_started``   a child request was sent: the child's run and session ids,
                           the attempt
``concurrent.child_finished``  a child ended: status, duration, attempts, reply or error
``concurrent.batch_finished``  every child of the batch ended: how many were fulfilled
``sink.overflowed``        a sink shed load: which sequence numbers it dropped
``run.interrupted``        the run's executor stopped reporting before its turn ended:
                           why it was declared, after how long a silence (and, for a run
                           a dashboard worker held, which worker and the session revision)
=========================  =================================================================

``run.interrupted`` is the one type the runtime never emits: the dashboard records it for a
remote run that sent nothing (no events, no heartbeats) for ``PICOFLOW_REMOTE_TIMEOUT``
seconds, so it is the last event of such a run. It is built with
:func:`~runtime.events.values.interruption` from the run's last stored event.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1


class Truncated(BaseModel):
    """Stands for a value too large to carry in an event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    truncated: Literal[True] = True
    size: int
    """Length of the value's JSON, in characters."""
    preview: str
    """The first characters of that JSON."""


def _absent(value: object) -> bool:
    """Optional fields added after the first schema are left out while unset, so events
    without them serialise exactly as before."""
    return value is None


class EventBase(BaseModel):
    """The fields every event carries; each event type is a subclass with its own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    v: int = SCHEMA_VERSION
    """Schema version."""
    run_id: str
    session_id: str
    seq: int = Field(ge=0)
    """Per-run, gap-free sequence number."""
    time: float
    """Wall-clock time, Unix seconds."""
    offset: float
    """Seconds since the run started, on a monotonic clock."""
    path: str = ""
    """Invocation path the event belongs to; ``""`` at top level."""


class ErrorInfo(BaseModel):
    """An error, as events carry it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str
    """Exception class name."""
    code: str
    """PicoFlowError code, or ``internal``."""
    message: str
    extra: dict[str, Any] = Field(default_factory=dict)


class TurnStarted(EventBase):
    """A turn began."""

    type: Literal["turn.started"] = "turn.started"
    flow: str
    message: str | None
    resumes: str | None = Field(None, exclude_if=_absent)
    """The run whose interrupted (or failed) turn this one resumes (absent: not a
    resume)."""


class TurnFinished(EventBase):
    """A turn replied."""

    type: Literal["turn.finished"] = "turn.finished"
    success: bool
    completed: bool
    message: str
    content_type: str


class TurnFailed(EventBase):
    """A turn failed; the reply carries the same message."""

    type: Literal["turn.failed"] = "turn.failed"
    error: ErrorInfo


class TurnCancelled(EventBase):
    """A turn stopped because its cancel token fired (``FlowEngine.run(..., cancel=token)``).

    The last event of such a turn (``path`` is ``""``). Not a failure: the session's run
    status is left as it was, and nothing is saved after the token fired except the
    root-join checkpoints barriers make by their own rules, so the session can take its
    next turn from ``revision``.
    """

    type: Literal["turn.cancelled"] = "turn.cancelled"
    reason: str
    """The reason given to :meth:`CancelToken.cancel`."""
    requested_by: str | None
    """Who asked (``cancel(reason, by)``), when the caller said."""
    revision: int
    """The session's last saved revision, the one it stays at; 0 when none was saved."""


class SessionLoaded(EventBase):
    """The state a turn starts from (after restore or creation)."""

    type: Literal["session.loaded"] = "session.loaded"
    new_session: bool
    revision: int
    current_step: str | None
    steps: dict[str, dict[str, Any]]
    """Step states by step name."""
    context: dict[str, Any]
    tokens: dict[str, int]


class SessionSaved(EventBase):
    """A compare-and-swap save of the session document."""

    type: Literal["session.saved"] = "session.saved"
    revision: int
    reason: Literal["created", "started", "restored", "crossing", "final", "aborted",
                    "checkpoint"]
    """Why it saved. A turn does not save when it loads a session (a turn that then loses
    the race for it has saved nothing); ``restored`` is read in records of versions that
    did."""


class StepEntered(EventBase):
    """A step became current, or was entered as a sequential child (``run_step``)."""

    type: Literal["step.entered"] = "step.entered"
    step: str
    level: int
    how: Literal["start", "goto", "child"]


class StepExited(EventBase):
    """A step stopped being current (or its child frame or branch ended)."""

    type: Literal["step.exited"] = "step.exited"
    step: str


class CursorMoved(EventBase):
    """The durable cursor moved."""

    type: Literal["cursor.moved"] = "cursor.moved"
    from_step: str | None
    to_step: str


class ModelStarted(EventBase):
    """One model attempt began."""

    type: Literal["model.started"] = "model.started"
    step: str
    call: int
    """Model call number within the turn (attempts of one call share it)."""
    attempt: int
    model: dict[str, Any]
    """The model that answers, secrets stripped: the selection, or what the answering model
    says of itself (``describe``; a named scripted model adds the ``requested`` selection)."""
    messages: list[dict[str, Any]]
    tools: list[str]


class ModelDelta(EventBase):
    """Part of an attempt's answer as the model writes it (a streaming adapter).

    What arrived since the attempt's previous ``model.delta``: chunks are coalesced so an
    attempt emits at most about twenty a second, and its last text is emitted before its
    ``model.finished`` or ``model.failed``. Appending every delta's ``text`` gives the
    text so far; ``model.finished`` still carries the whole answer, which is what counts.
    """

    type: Literal["model.delta"] = "model.delta"
    step: str
    call: int
    attempt: int
    text: str
    """Text written since the previous delta of this attempt."""
    tool_calls: list[dict[str, Any]]
    """Tool-call chunks since the previous delta, one per call written to, by ``index``
    (the call's place in the answer): ``{"index", "arguments"}`` (the arguments' JSON text
    written since), plus ``id`` and ``name`` once known."""
    chunks: int
    """How many chunks the model streamed into this delta."""


class ModelFinished(EventBase):
    """One model attempt answered."""

    type: Literal["model.finished"] = "model.finished"
    step: str
    call: int
    attempt: int
    latency: float
    """Seconds."""
    content: Any
    tool_calls: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    total_tokens: int
    finish_reason: str
    accepted: bool
    """False when the answer was blank or rejected by ``check_response``."""


class ModelFailed(EventBase):
    """One model attempt failed."""

    type: Literal["model.failed"] = "model.failed"
    step: str
    call: int
    attempt: int
    latency: float
    error: ErrorInfo
    retrying: bool


class ToolStarted(EventBase):
    """A tool handler is about to run."""

    type: Literal["tool.started"] = "tool.started"
    step: str
    name: str
    call_id: str
    args: Any


class ToolFinished(EventBase):
    """A tool call was answered."""

    type: Literal["tool.finished"] = "tool.finished"
    step: str
    name: str
    call_id: str
    status: Literal["success", "error"]
    result: Any
    """The tool message's text, or a direct result's value."""
    transition: dict[str, Any] | None
    """``{kind: go|stay|direct|direct_result, target}`` when the call routed."""
    outcome: Literal["handled", "hallucinated", "unhandled", "invalid_arguments"]


class StateReplaced(EventBase):
    """A top-level field was replaced: canonically (path "") or as a branch's draft."""

    type: Literal["state.replaced"] = "state.replaced"
    step: str
    field: str
    value: Any
    base: Any
    """The value the writer saw before (for a branch: at its fork)."""
    draft: bool
    """True in a branch: proposed, published only by a join."""


class StateRemoved(EventBase):
    """A top-level field was removed (canonically or as a draft)."""

    type: Literal["state.removed"] = "state.removed"
    step: str
    field: str
    base: Any
    draft: bool


class StateContributed(EventBase):
    """A contribution to a reduced channel."""

    type: Literal["state.contributed"] = "state.contributed"
    step: str
    field: str
    value: Any
    order: int
    """Call order within the contributing invocation."""
    draft: bool
    channel: str | None = None
    """The channel's kind when a fold reduces this contribution itself — one of
    :data:`~runtime.events.channels.FOLDED_CHANNELS`, into the contributor's view as it
    was just before — and ``result`` is null. Carrying the value instead would make every
    contribution cost the size of the field, which grows with the session's history."""
    result: Any = None
    """With no ``channel``: the field's value in the contributor's view after this
    contribution (reduced in request-path order), so a fold need not know the reducer.
    That is a custom reducer's, a draft reduced after an inner join's contributions, a
    reducer that failed, or a contribution outside any barrier."""


class BranchRequest(BaseModel):
    """One request of a fork, in request order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int
    path: str
    step: str
    key: str
    params: Any
    user_message: str | None = None
    after: list[str] | None = Field(None, exclude_if=lambda v: v is None)
    """The keys of the previous barrier's requests (the same caller's) this request was
    triggered by, when the recorder knows them: the LangGraph tracer's, from the graph's
    edges. Absent when unknown; our runtime's requests never carry it (in a sequence the
    fork itself is the dependency)."""


class BarrierOptions(BaseModel):
    """The options of one ``run_steps()`` barrier, as ``barrier.forked`` reports them.

    The barrier driver validates its keyword arguments by constructing this model, so an
    option is declared (with its constraint) in one place; :class:`BarrierForked` carries
    the same fields.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Literal["retain-successes", "atomic"] = "retain-successes"
    """``retain-successes``: the join publishes the fulfilled branches' writes; ``atomic``:
    one rejected branch discards every branch's writes."""
    checkpoint: Literal["none", "root-join"] = "none"
    """``root-join``: a root barrier's join saves the session once it published, and is
    rolled back when that save fails."""
    max_concurrency: int | None = Field(None, ge=1)
    """At most this many branches run at once (None: all of them)."""
    branch_timeout: float | None = Field(None, gt=0)
    """Seconds each branch may run before it is cancelled (None: no limit)."""
    token_budget: int | None = Field(None, ge=1)
    """Model tokens the barrier's branches may spend together (None: no budget)."""
    ledger: bool | None = Field(None, exclude_if=_absent)
    """Write fulfilled branches to the branch ledger so a resumed turn reuses them (None:
    the flow's ``ParallelConfig.ledger``)."""


class _BarrierForkHead(EventBase):
    """The fields of ``barrier.forked`` that come before the options (serialised order)."""

    type: Literal["barrier.forked"] = "barrier.forked"
    barrier: str
    """Barrier id, unique in the run (the caller's path and the barrier's ordinal)."""
    caller_step: str
    requests: list[BranchRequest]


# The options (policy … token_budget) are BarrierOptions' fields. Pydantic orders fields by
# reversed MRO (EventBase's, _BarrierForkHead's, BarrierOptions', then this class's own), so
# they serialise after ``requests`` and before ``base``, as they always have.
class BarrierForked(BarrierOptions, _BarrierForkHead):
    """A barrier began. ``path`` is the caller's path; branches are ``requests[i].path``.

    A fork wider than one page (:data:`~runtime.events.values.FORK_PAGE` requests, or
    :data:`~runtime.events.values.FORK_PAGE_CHARS` of them) carries its first page and says
    how many requests there are (``count``); ``barrier.requested`` events bring the rest, in
    order, before any of its branches starts (other barriers' events may come between
    them). ``count`` is absent when ``requests`` is every request (as in every fork
    recorded before pages existed)."""

    base: str
    """What the branches see: ``canonical`` (the session state as of this event), or the
    caller's invocation path (its view as of this event: its fork-time base, its drafts
    and the publications it received)."""
    count: int | None = Field(None, ge=0, exclude_if=_absent)
    """How many requests the fork has, when ``requests`` holds only the first page."""


class BarrierRequested(EventBase):
    """The next page of a wide fork's requests (``path`` is the caller's, as the fork's)."""

    type: Literal["barrier.requested"] = "barrier.requested"
    barrier: str
    first: int = Field(ge=0)
    """The index of the page's first request."""
    requests: list[BranchRequest]


class BranchStarted(EventBase):
    """A branch began (``path`` is the branch)."""

    type: Literal["branch.started"] = "branch.started"
    barrier: str
    index: int
    key: str
    step: str
    rerun: str | None = Field(None, exclude_if=_absent)
    """Why a resumed turn runs this branch again although the ledger holds it (its
    request changed since); absent otherwise."""


class BranchFulfilled(EventBase):
    """A branch finished with an output."""

    type: Literal["branch.fulfilled"] = "branch.fulfilled"
    barrier: str
    index: int
    key: str
    output: Any


class BranchRejected(EventBase):
    """A branch failed; its drafts will not publish."""

    type: Literal["branch.rejected"] = "branch.rejected"
    barrier: str
    index: int
    key: str
    error: ErrorInfo
    cancelled: bool
    started: bool


class BranchReused(EventBase):
    """A resumed turn restored a fulfilled branch from the branch ledger, in place of its
    ``branch.started`` and ``branch.fulfilled``: its drafts join as if it had run."""

    type: Literal["branch.reused"] = "branch.reused"
    barrier: str
    index: int
    key: str
    step: str
    output: Any
    original_run_id: str
    """The run in which the branch ran."""
    original_seq: int | None
    """The ``seq`` of its ``branch.fulfilled`` there (None when nothing recorded it)."""
    input_tokens: int
    output_tokens: int
    total_tokens: int
    """Tokens the branch and its descendants spent there: what the reuse saved. The
    session counts them as spent, as an uninterrupted run would have."""


class BranchDirectResult(EventBase):
    """A branch's tool returned ``direct_result(value)``: the branch ends."""

    type: Literal["branch.direct_result"] = "branch.direct_result"
    barrier: str
    tool: str
    value: Any


class JoinReduced(EventBase):
    """One channel reduced at a join (``path`` is the caller's)."""

    type: Literal["join.reduced"] = "join.reduced"
    barrier: str
    step: str
    field: str
    channel: str
    initial: Any
    inputs: list[dict[str, Any]]
    """Contributions in request-path order: ``{path, key, value}``."""
    completion_order: list[str]
    """Paths of the contributing branches in the order they finished."""
    result: Any
    counts: dict[str, int] | None = Field(None, exclude_if=_absent)
    """How many items each list holds, when one of them carries only its first page
    (``list.continued`` events bring the rest); absent when every list is whole."""


class PublishedField(BaseModel):
    """One field a join published."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: str
    field: str
    value: Any = None
    deleted: bool = False
    writer: str | None = None
    """Path of the replacing branch; None for reduced channels."""


class JoinPublished(EventBase):
    """What a valid join applied, and where."""

    type: Literal["join.published"] = "join.published"
    barrier: str
    target: Literal["canonical", "caller-scope"]
    fields: list[PublishedField]
    discarded: list[dict[str, Any]]
    """Branches whose drafts did not publish: ``{index, key, reason}``."""
    counts: dict[str, int] | None = Field(None, exclude_if=_absent)
    """How many items each list holds, when one of them carries only its first page
    (``list.continued`` events bring the rest); absent when every list is whole."""


class JoinInvalidated(EventBase):
    """The join refused to publish; ``run_steps`` raises."""

    type: Literal["join.invalidated"] = "join.invalidated"
    barrier: str
    error: ErrorInfo
    provenance: list[dict[str, Any]]
    counts: dict[str, int] | None = Field(None, exclude_if=_absent)
    """How many items each list holds, when one of them carries only its first page
    (``list.continued`` events bring the rest); absent when every list is whole."""


class CancelRequested(EventBase):
    """A barrier's cancel token fired."""

    type: Literal["cancel.requested"] = "cancel.requested"
    barrier: str
    reason: str


class CancelPropagated(EventBase):
    """Running branches were told to stop; queued ones will not start."""

    type: Literal["cancel.propagated"] = "cancel.propagated"
    barrier: str
    running: list[str]
    queued: list[str]
    counts: dict[str, int] | None = Field(None, exclude_if=_absent)
    """How many items each list holds, when one of them carries only its first page
    (``list.continued`` events bring the rest); absent when every list is whole."""


class CancelGraceExpired(EventBase):
    """Branches still running after the grace period lost their publication rights."""

    type: Literal["cancel.grace_expired"] = "cancel.grace_expired"
    barrier: str
    closed: list[str]
    counts: dict[str, int] | None = Field(None, exclude_if=_absent)
    """How many items each list holds, when one of them carries only its first page
    (``list.continued`` events bring the rest); absent when every list is whole."""

class ListContinued(EventBase):
    """The next page of a per-branch list of the paged event just before it (``type`` of
    ``of``, same ``barrier``; for ``join.reduced``, the latest reduction): ``items`` are
    that list's entries from index ``first`` on."""

    type: Literal["list.continued"] = "list.continued"
    barrier: str
    of: str
    """The type of the event whose list this continues."""
    name: str
    """The name of the list (``inputs``, ``completion_order``, ``discarded``,
    ``provenance``, ``running``, ``queued`` or ``closed``)."""
    first: int = Field(ge=0)
    """The index of the page's first item."""
    items: list[Any]


class CheckpointSaved(EventBase):
    """The root-join checkpoint saved the session."""

    type: Literal["checkpoint.saved"] = "checkpoint.saved"
    barrier: str
    revision: int


class CheckpointFailed(EventBase):
    """The root-join checkpoint failed; the publication was rolled back."""

    type: Literal["checkpoint.failed"] = "checkpoint.failed"
    barrier: str
    error: ErrorInfo


class SinkOverflowed(EventBase):
    """A sink could not keep up and dropped events: it says which."""

    type: Literal["sink.overflowed"] = "sink.overflowed"
    sink: str
    first_seq: int
    last_seq: int
    dropped: int


ChildStatus = Literal["fulfilled", "failed", "refused", "timed_out", "unreachable",
                      "malformed", "error"]
"""How a ``concurrent_steps()`` child ended: ``fulfilled`` (its turn succeeded), ``failed``
(its turn ran and failed), ``refused`` (the app refused the request: token, scope, input,
or still busy after the retries), ``timed_out`` (no reply in time; it may have run),
``unreachable`` (no connection, after the retries), ``malformed`` (a reply that is not the
contract's), ``error`` (the coordinator's ``on_config`` raised, or the app failed with a 5xx
or dropped the connection after the request was sent)."""


class ConcurrentBatchStarted(EventBase):
    """A ``concurrent_steps()`` batch began: its items are sent at once."""

    type: Literal["concurrent.batch_started"] = "concurrent.batch_started"
    group: str
    """Which ``concurrent_steps()`` call of the turn (``c0``, ``c1``, ...)."""
    batch: int = Field(ge=0)
    batches: int = Field(ge=1)
    total: int = Field(ge=1)
    """Items of the whole call."""
    items: list[int]
    """The item indices of this batch, in order."""
    flow: str
    """The children's flow."""
    batch_size: int = Field(ge=1)
    timeout: float
    retries: int = Field(ge=0)


class ConcurrentChildStarted(EventBase):
    """One child request was sent (again, for a retry: ``attempt`` counts)."""

    type: Literal["concurrent.child_started"] = "concurrent.child_started"
    group: str
    batch: int = Field(ge=0)
    item: int = Field(ge=0)
    child_run_id: str
    """The child's run id, chosen by the coordinator (the app refuses a second run of it)."""
    child_session_id: str
    """The child's new session."""
    flow: str
    attempt: int = Field(ge=1)


class ConcurrentChildFinished(EventBase):
    """One child ended, however: its status, reply or error, time and attempts."""

    type: Literal["concurrent.child_finished"] = "concurrent.child_finished"
    group: str
    batch: int = Field(ge=0)
    item: int = Field(ge=0)
    child_run_id: str
    child_session_id: str
    status: ChildStatus
    duration: float = Field(ge=0)
    """Seconds from the first attempt to the end."""
    attempts: int = Field(ge=0)
    """Requests sent (0: ``on_config`` raised before any)."""
    http_status: int | None = None
    completed: bool | None = None
    """The child's reply said its session completed (None without a reply)."""
    reply: Any = None
    """The child's reply message (may be truncated), None without a reply."""
    error: ErrorInfo | None = None


class ConcurrentBatchFinished(EventBase):
    """Every child of the batch ended."""

    type: Literal["concurrent.batch_finished"] = "concurrent.batch_finished"
    group: str
    batch: int = Field(ge=0)
    fulfilled: int = Field(ge=0)
    failed: int = Field(ge=0)
    """Children of the batch that did not end fulfilled."""
    duration: float = Field(ge=0)


class RunInterrupted(EventBase):
    """The run's executor stopped reporting (killed, lost) before its turn ended.

    Never emitted by the runtime: the dashboard records it when a remote run sent no events
    and no heartbeats for ``PICOFLOW_REMOTE_TIMEOUT`` seconds, as the run's last event
    (``path`` is ``""``; ``seq`` follows the last stored event). Nothing may follow it.
    """

    type: Literal["run.interrupted"] = "run.interrupted"
    reason: str
    """Why the run was declared interrupted, for people: "no events or heartbeats for 30 s"."""
    silent_for: float = Field(ge=0)
    """Seconds the run had been silent when it was declared interrupted."""
    worker: str | None = None
    """Which dashboard worker held the run, for runs the dashboard's workers executed."""
    revision: int | None = Field(None, ge=0)
    """The session revision the session stays at, when the recorder knows it."""


Event = Annotated[
    TurnStarted | TurnFinished | TurnFailed | TurnCancelled | SessionLoaded | SessionSaved
    | StepEntered | StepExited | CursorMoved | ModelStarted | ModelDelta | ModelFinished
    | ModelFailed | ToolStarted
    | ToolFinished | StateReplaced | StateRemoved | StateContributed | BarrierForked
    | BarrierRequested | BranchStarted | BranchFulfilled | BranchRejected | BranchReused
    | BranchDirectResult
    | JoinReduced
    | JoinPublished | JoinInvalidated | ListContinued | CancelRequested | CancelPropagated
    | CancelGraceExpired | CheckpointSaved | CheckpointFailed | ConcurrentBatchStarted
    | ConcurrentChildStarted | ConcurrentChildFinished | ConcurrentBatchFinished
    | SinkOverflowed | RunInterrupted,
    Field(discriminator="type"),
]
"""Any event."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_TYPES: dict[str, type[EventBase]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(Event)[0])
}
"""Every event class by its ``type``, in the union's order."""


def parse_event(data: str | bytes | dict[str, Any]) -> Event:
    """Validate one event strictly (JSON text or a dict); raises ``ValidationError``."""
    if isinstance(data, dict):
        return EVENT_ADAPTER.validate_python(data)
    return EVENT_ADAPTER.validate_json(data)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :data:`Event`, for the browser."""
    schema = EVENT_ADAPTER.json_schema()
    schema["title"] = "PicoFlow event"
    schema["$comment"] = (
        f"Generated from runtime/events/schema.py; schema version {SCHEMA_VERSION}.")
    return schema

