"""The one error tree of PicoFlow.

Every error the runtime raises on purpose derives from :class:`PicoFlowError`::

    PicoFlowError                       root; never raised directly
    ├─ FlowDefinitionError (TypeError)  the flow or step was written wrong: bad step class,
    │                                   duplicate tool, unknown step or tool name, bad model
    │                                   selection, go/stay/direct used where it cannot be
    ├─ FlowNotRegisteredError           FlowEngine.run() named a flow it does not know
    ├─ FlowInputError (ValueError)      a request does not fit the flow (nothing started)
    │  ├─ MessageRequiredError          the flow needs a message and got an empty one
    │  ├─ ConfigValidationError         the config does not match Flow.config_schema()
    │  ├─ BadRunIdError                 the run id is not a valid id (runtime.events.ids)
    │  └─ BadSessionIdError             the session id is not a valid id
    ├─ ExecutionFrameError              go() from a child execution frame, or a tool-response
    │                                   helper (stay, direct) called outside a tool handler
    ├─ SessionError                     something about the session document
    │  ├─ SessionConflictError          compare-and-swap save lost: the stored revision moved
    │  ├─ SessionFlowMismatchError      the session belongs to another flow
    │  ├─ SessionFlowInvariantError     the stored document is not a one-flow envelope
    │  └─ SessionStoreError             the store itself failed (I/O, corrupt row)
    ├─ ModelError                       a model call failed
    │  ├─ ModelTransportError           transport failure or timeout (retried)
    │  ├─ ModelBlockedError             the provider refused (safety block; not retried)
    │  ├─ ModelCallError                every attempt failed; the turn aborts
    │  └─ ScriptedModelError            the scripted model has no rule for a request
    ├─ ParallelError                    about a run_steps() barrier
    │  ├─ BarrierInvalidError            the join refused to publish; run_steps() raises,
    │  │  │                               nothing is published; carries provenance
    │  │  ├─ ParallelMutationError        a branch wrote shared state (context, session,
    │  │  │                               another step's state, the cursor, completion)
    │  │  ├─ ParallelStateConflictError   two branches replaced one field (or replaced and
    │  │  │                               contributed to it)
    │  │  ├─ ParallelReducerError         a reducer raised; the cause is chained
    │  │  ├─ ParallelOutputError          a branch's output or state is not plain JSON
    │  │  └─ ParallelCheckpointError      the root-join checkpoint failed; rolled back
    │  ├─ ParallelConfigurationError     bad requests or options, before anything forks
    │  │  └─ ParallelDuplicateKeyError    two requests share a branch key
    │  ├─ ParallelLimitError             depth or invocation limit exceeded
    │  └─ BranchError                    why a branch was rejected (data in ``rejected``)
    │     ├─ BranchTimeoutError          the branch ran past its timeout
    │     ├─ BranchCancelledError        cancelled (queued, told, or past the grace period)
    │     └─ BranchBudgetError           the barrier's token budget ran out
    ├─ ConcurrentError                  about a concurrent_steps() coordinator batch
    │  ├─ ConcurrentConfigError          no self URL or token, bad batch size or callbacks
    │  └─ ConcurrentDepthError           a child would fan out past the depth guard
    ├─ ToolArgumentsError               tool arguments failed validation (sent back to the
    │                                   model as a tool error, never raised out of a turn)
    ├─ StateValueError (ValueError)     a state or context value is not plain JSON
    ├─ TurnLimitError                   a turn exceeded its model-call budget (a loop)
    └─ TurnCancelledError               the turn's cancel token fired: top-level code stops
                                        at its next model call or step crossing

Callers of :meth:`runtime.FlowEngine.run` never see these: the engine turns them into
failure replies (a stopped turn's has ``error_code="turn_cancelled"``). They surface when a
flow, step or store is used directly.
"""

from __future__ import annotations

from typing import Any


class PicoFlowError(Exception):
    """Root of every PicoFlow error; never raised directly.

    Attributes:
        message: human-readable text, also the exception's ``str()``.
        code: a stable machine-readable code (used in failure replies and by the web API).
        extra: JSON-safe details for debuggers.
    """

    code = "picoflow_error"

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra: dict[str, Any] = extra or {}


class FlowDefinitionError(PicoFlowError, TypeError):
    """Raised while building or running a flow that was written wrong.

    The fix is in the flow's code (a step class, tool, selection or hook), not in the input.
    """

    code = "flow_definition"


class FlowNotRegisteredError(PicoFlowError):
    """Raised by the engine for a flow name it does not know; the reply says which."""

    code = "flow_not_registered"


class FlowInputError(PicoFlowError, ValueError):
    """A request does not fit the flow it names; raised before the turn touches a session.

    The fix is in the request (its message or config), not in the flow.
    """

    code = "invalid_input"


class MessageRequiredError(FlowInputError):
    """The flow needs a message (``Flow.needs_message()``) and the request's is empty."""

    code = "message_required"


class ConfigValidationError(FlowInputError):
    """The request's config does not validate against ``Flow.config_schema()``.

    ``extra["errors"]`` lists ``{"field", "message"}`` per problem (``field`` is the dotted
    path inside the config; ``""`` for the config as a whole).
    """

    code = "invalid_config"


class BadRunIdError(FlowInputError):
    """The run id given to :meth:`runtime.FlowEngine.run` is not a valid id: 1 to 64
    ASCII letters, digits, ``.``, ``_`` or ``-``, beginning with a letter or a digit
    (:data:`runtime.events.ID_PATTERN`). Refused before any event: every event carries it,
    and a dashboard takes no other."""

    code = "bad_run_id"


class BadSessionIdError(FlowInputError):
    """The session id given to :meth:`runtime.FlowEngine.run` is not a valid id (the same
    definition as a run id's)."""

    code = "bad_session_id"


class ExecutionFrameError(PicoFlowError):
    """Raised when code routes where it must not.

    ``go()`` from inside a child execution frame (``run_step``), or ``stay()``/``direct()``
    outside a tool handler. Return a result to the owning step instead.
    """

    code = "execution_frame"


class SessionError(PicoFlowError):
    """Base of the session-document errors."""

    code = "session_error"


class SessionConflictError(SessionError):
    """A compare-and-swap save found another revision; nothing was overwritten.

    No automatic replay: the caller may reload the session and send the message again.
    """

    code = "session_conflict"

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"Session '{session_id}' was changed or removed by another request.",
            extra={"session_id": session_id},
        )
        self.session_id = session_id


class SessionFlowMismatchError(SessionError):
    """The stored session belongs to another flow than the one requested."""

    code = "session_flow_mismatch"


class SessionFlowInvariantError(SessionError):
    """The stored document is not a valid one-flow session envelope."""

    code = "session_flow_invariant"


class NothingToResumeError(SessionError):
    """``FlowEngine.resume``: the session has no interrupted or failed ledgered turn (no
    barrier of it kept a ledger, or its turn ended), or its store keeps no ledgers."""

    code = "nothing_to_resume"


class SessionStoreError(SessionError):
    """The store failed (I/O, unreadable row); the original error is chained."""

    code = "session_store"


class ModelError(PicoFlowError):
    """Base of the model-call errors."""

    code = "model_error"


class ModelTransportError(ModelError):
    """Transport failure, timeout or a retryable provider status; the runner retries it."""

    code = "model_transport"


class ModelBlockedError(ModelError):
    """The provider refused to answer (safety block); not retried."""

    code = "model_blocked"


class ModelCallError(ModelError):
    """Every attempt of a model call failed and no recovery hook produced a reply."""

    code = "model_call_failed"


class ScriptedModelError(ModelError):
    """The scripted model has no rule matching a request; the message describes the request."""

    code = "scripted_model_unmatched"


class ToolArgumentsError(PicoFlowError):
    """A tool call's arguments failed validation.

    The runner sends the message back to the model as an error tool message, so the model
    can correct itself; it never ends a turn.
    """

    code = "tool_arguments"


class TurnLimitError(PicoFlowError):
    """A turn made more model calls than ``Flow.max_model_calls_per_turn`` (a routing loop)."""

    code = "turn_limit"


class TurnCancelledError(PicoFlowError):
    """The turn's cancel token fired (``FlowEngine.run(..., cancel=token)``).

    Raised in top-level code where it would start new work — the next model call, the next
    step crossing — so a stopped turn spends nothing more. Not a failure: the engine ends
    the turn with ``turn.cancelled`` and leaves the session at its last saved revision.
    ``extra`` holds ``reason`` and ``requested_by``.
    """

    code = "turn_cancelled"

    def __init__(self, reason: str, requested_by: str | None = None) -> None:
        super().__init__(f"The turn was cancelled: {reason}.",
                         extra={"reason": reason, "requested_by": requested_by})
        self.reason = reason
        self.requested_by = requested_by


class StateValueError(PicoFlowError, ValueError):
    """A value written to state, context or a tool result is not plain JSON.

    State is persisted and streamed as JSON; convert dates, sets and objects first.
    """

    code = "state_value"


class ParallelError(PicoFlowError):
    """Base of the errors about ``run_steps()`` barriers."""

    code = "parallel_error"


class BarrierInvalidError(ParallelError):
    """The join refused to publish: ``run_steps()`` raises it and publishes nothing.

    ``extra["provenance"]`` lists, per offending write, the branch (path and key), the
    step and field, the proposed value and the base value the branch saw; the conflict
    debugger shows exactly that.
    """

    code = "barrier_invalid"


class ParallelMutationError(BarrierInvalidError):
    """A branch wrote shared state: the flow context, the session, another step's state,
    the cursor (``go``/``stay``/``direct``), or completed the session.

    Raised inside the branch at the write, and again from ``run_steps()`` even when the
    branch caught it: the barrier is invalid either way.
    """

    code = "parallel_mutation"


class ParallelStateConflictError(BarrierInvalidError):
    """Two branches replaced the same field, or one replaced what another contributed to.

    Use ``contribute_state`` on a declared channel for values that should combine.
    """

    code = "parallel_state_conflict"


class ParallelReducerError(BarrierInvalidError):
    """A channel's reducer raised while joining; the original error is the ``__cause__``."""

    code = "parallel_reducer"


class ParallelOutputError(BarrierInvalidError):
    """A branch returned or saved a value that is not plain JSON."""

    code = "parallel_output"


class ParallelCheckpointError(BarrierInvalidError):
    """The ``root-join`` checkpoint save failed; the publication was rolled back."""

    code = "parallel_checkpoint"


class ParallelConfigurationError(ParallelError, FlowDefinitionError):
    """Bad requests or options (unregistered step, missing key, invalid params, unknown
    channel, bad policy); raised before anything forks, or invalidates the barrier."""

    code = "parallel_configuration"


class ParallelDuplicateKeyError(ParallelConfigurationError):
    """Two requests of one barrier share a branch key."""

    code = "parallel_duplicate_key"


class ParallelLimitError(ParallelError):
    """A barrier would exceed the flow's nesting depth or its invocations per turn."""

    code = "parallel_limit"


class BranchError(ParallelError):
    """Why a branch was rejected, when the runtime rejected it (timeouts, cancellation,
    budgets). Ordinary exceptions from a branch's own code are kept as they are."""

    code = "branch_error"


class BranchTimeoutError(BranchError):
    """The branch ran longer than the barrier's ``branch_timeout``."""

    code = "branch_timeout"


class BranchCancelledError(BranchError):
    """The branch was cancelled: it never started, or it was told and did not finish
    within the grace period. Its writes are dropped."""

    code = "branch_cancelled"


class BranchBudgetError(BranchCancelledError):
    """The barrier's token budget ran out; the branch was cancelled."""

    code = "branch_budget"


class ConcurrentError(PicoFlowError):
    """About a ``Flow.concurrent_steps()`` coordinator batch (children's failures are data,
    in the replies it hands back, never raised)."""

    code = "concurrent_error"


class ConcurrentConfigError(ConcurrentError, FlowDefinitionError):
    """``concurrent_steps()`` cannot send anything: no self URL or token, a batch size
    below 1, callbacks that are not callable, or a child config that is not a JSON object."""

    code = "concurrent_config"


class ConcurrentDepthError(ConcurrentError):
    """A coordinator's children would be coordinators past the depth guard (recursive
    fan-out)."""

    code = "concurrent_depth"
