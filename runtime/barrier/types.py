"""The public types of ``run_steps()``: requests, options, results and the cancel token.

:class:`BarrierOptions` is the one definition of a barrier's options: ``run_steps``
validates its keyword arguments by building one, the driver reads it, and the
``barrier.forked`` event carries its fields (the event model inherits them, which is why
it lives in :mod:`runtime.events`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ParallelConfigurationError
from ..events import BarrierOptions as BarrierOptions

FailurePolicy = Literal["retain-successes", "atomic"]
Checkpoint = Literal["none", "root-join"]
BranchStatus = Literal["fulfilled", "rejected"]


def barrier_options(**options: Any) -> BarrierOptions:
    """Validate ``run_steps`` options; a bad one is a configuration error, before any fork."""
    try:
        return BarrierOptions(**options)
    except ValidationError as exc:
        raise ParallelConfigurationError(
            "Invalid run_steps() options: " + "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()),
            extra={"errors": exc.errors(include_url=False, include_context=False)},
        ) from None


InvocationPath = tuple[tuple[int, int], ...]
"""One ``(barrier ordinal, request index)`` pair per nesting level.

The ordinal counts the barriers its caller has opened (0 for the first), so two
sequential barriers in one branch give distinct, correctly ordered paths. Tuples sort in
request-path order: that is the order contributions reduce in.
"""


def format_path(path: InvocationPath) -> str:
    """The one string form of an invocation path.

    Levels are joined with ``.``; a level is its request index, prefixed ``<ordinal>:``
    when it belongs to its caller's second or later barrier: ``0.2.1``, ``1.1:0``.
    """
    if len(path) == 1:  # a root barrier's branch: most paths, and every branch forks one
        b, i = path[0]
        return str(i) if b == 0 else f"{b}:{i}"
    return ".".join([str(i) if b == 0 else f"{b}:{i}" for b, i in path])


@dataclass(frozen=True)
class RunStepRequest:
    """One branch to fork: a registered step class, an optional key, params and message."""

    step: type[Any] | str
    """A registered ``Step`` subclass, or its registered name."""
    key: str | None = None
    params: Mapping[str, Any] | None = None
    user_message: str | None = None


class ParallelConfig(BaseModel):
    """Flow-wide limits for barriers (``Flow.config_parallel_execution()``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_depth: int = Field(default=8, ge=1)
    """Deepest nesting of barriers (a root barrier's branches are depth 1)."""
    max_invocations: int = Field(default=256, ge=1)
    """Branches one turn may fork in total."""
    cancellation_grace: float = Field(default=2.0, ge=0)
    """Seconds a told branch may keep running before it loses publication rights."""
    model_call_limit: int | None = Field(default=None, ge=1)
    """Model calls in flight at once across every branch of a turn (provider quota)."""
    ledger: bool = False
    """Barriers write their fulfilled branches to the branch ledger unless they say
    ``run_steps(..., ledger=False)`` (``FlowEngine.resume`` reuses them)."""


class CancelToken:
    """Cooperative cancellation for a barrier, a turn, and everything forked under them.

    A token is linked to its ``parents``: cancelling any of them cancels it. Create one,
    pass it as ``run_steps(..., cancel=token)`` (one barrier) or
    ``FlowEngine.run(..., cancel=token)`` (a whole turn: every root barrier links to it)
    and call :meth:`cancel`. Nested barriers link their tokens to the calling branch's,
    so cancelling an outer barrier reaches every descendant. Branches read
    :attr:`cancelled` or await :meth:`wait`; model calls in a cancelled branch stop at
    once.

    A token belongs to the event loop that awaits it: from another thread, cancel it
    through that loop, e.g. ``loop.call_soon_threadsafe(token.cancel, reason, by)`` or
    ``anyio.from_thread.run_sync(token.cancel, reason, by)`` (``by`` is positional for
    exactly this: neither passes keyword arguments).
    """

    def __init__(self, *parents: CancelToken | None) -> None:
        self._event: anyio.Event | None = None
        self._children: list[CancelToken] = []
        # By a number of their own: a barrier's branches share one token, so a thousand
        # model calls may each hold one and take it back in any order.
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._next_callback = 0
        self.reason: str | None = None
        self.requested_by: str | None = None
        """Who asked for the cancellation (a user name, a worker), when the caller said."""
        self.cancelled = False
        for parent in parents:
            if parent is None:
                continue
            parent._children.append(self)
            if parent.cancelled and not self.cancelled:
                self.cancel(parent.reason or "cancelled", parent.requested_by)

    def cancel(self, reason: str = "cancelled", by: str | None = None) -> None:
        """Request cancellation (idempotent: the first request's reason and ``by`` stay);
        propagates to linked tokens with the same reason and ``by``."""
        if self.cancelled:
            return
        self.cancelled, self.reason, self.requested_by = True, reason, by
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, {}
        failed: Exception | None = None
        # A callback that raises must not keep the others, or the linked tokens, from
        # being told: its error is raised once everyone was.
        for callback in callbacks.values():
            try:
                callback()
            except Exception as exc:
                failed = failed or exc
        for child in self._children:
            try:
                child.cancel(reason, by)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` (on the token's event loop) when cancellation is requested, at
        once if it was already; returns a function that takes it back. For whoever must
        stop something the moment the token is cancelled without a task to wait for it
        (a waiting task per model call would cost more than the call's own bookkeeping
        in a model-calling fan-out)."""
        if self.cancelled:
            callback()
            return no_callback
        number = self._next_callback
        self._next_callback += 1
        self._callbacks[number] = callback

        def remove() -> None:
            self._callbacks.pop(number, None)

        return remove

    async def wait(self) -> None:
        """Return once cancellation is requested."""
        if self.cancelled:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


def no_callback() -> None:
    """What takes back a callback that was never kept (or calls nothing): a shared
    no-op, not a closure per call."""
    return None


_Frozen = TypeVar("_Frozen")


def build_frozen(cls: type[_Frozen], **fields: Any) -> _Frozen:
    """An instance of the frozen dataclass ``cls`` from all of its fields, without its
    ``__init__``, which pays an ``object.__setattr__`` per field: for the records a barrier
    makes per branch, where that is a large part of making one. Only for classes without
    ``__post_init__`` or ``__slots__``, given every field."""
    made = object.__new__(cls)
    _set(made, "__dict__", fields)  # the keyword arguments' own dict, made for this call
    return made


_set = object.__setattr__


@dataclass(frozen=True)
class ParallelInvocation:
    """What a branch knows about itself (``step.parallel_invocation()``)."""

    params: Mapping[str, Any]
    """The request's params, frozen."""
    key: str
    index: int
    """Request index within its barrier."""
    path: InvocationPath
    cancel: CancelToken
    session_id: str

    @property
    def path_str(self) -> str:
        """The invocation path as text (``0.2.1``)."""
        return format_path(self.path)

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of the same turn: session, invocation path and branch key.

        Give it to external services (email, payments): no state rollback can undo them.
        """
        raw = f"{self.session_id}\x00{self.path_str}\x00{self.key}"
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class BranchResult:
    """One branch's outcome, in request order."""

    index: int
    key: str
    step: str
    path: InvocationPath
    status: BranchStatus
    output: Any = None
    error: BaseException | None = None
    started: bool = True
    """False for a branch that was cancelled (or over budget) before it started."""

    @property
    def path_str(self) -> str:
        """The invocation path as text."""
        return format_path(self.path)


@dataclass(frozen=True)
class DiscardedBranch:
    """A branch whose state was not published, and why."""

    index: int
    key: str
    reason: str


@dataclass(frozen=True)
class Publication:
    """What a join published, and where."""

    policy: FailurePolicy
    published: bool
    """Whether any application state was published."""
    target: Literal["canonical", "caller-scope"]
    """Canonical session state (root join) or the calling branch's private scope."""
    fields: tuple[tuple[str, str], ...] = ()
    """``(step, field)`` pairs that changed, in publication order."""
    discarded: tuple[DiscardedBranch, ...] = ()
    checkpoint: Checkpoint = "none"
    checkpointed: bool = False
    revision: int | None = None
    """Session revision after the root-join checkpoint, when one was saved."""


@dataclass(frozen=True)
class ParallelBatchResult:
    """What ``run_steps()`` returns: every branch in request order, plus the publication."""

    branches: tuple[BranchResult, ...]
    publication: Publication
    cancelled: bool = False
    """Cancellation was requested while the barrier ran."""

    @property
    def fulfilled(self) -> tuple[BranchResult, ...]:
        """Fulfilled branches, in request order (``.index`` is the request index)."""
        return tuple(b for b in self.branches if b.status == "fulfilled")

    @property
    def rejected(self) -> tuple[BranchResult, ...]:
        """Rejected branches, in request order."""
        return tuple(b for b in self.branches if b.status == "rejected")


@dataclass(frozen=True)
class DirectResult:
    """Returned by a tool handler in a branch: end the branch with ``value`` as output."""

    value: Any


def direct_result(value: Any) -> DirectResult:
    """End the current parallel branch with ``value`` (plain JSON) as its output.

    No second model call, no ``on_response``, no cursor change. Save the branch's own
    state before returning it: the state publishes at the join if the branch is accepted.
    """
    return DirectResult(value)


@dataclass
class BarrierUsage:
    """Token use of one barrier and its descendants, for its optional budget."""

    budget: int | None
    tokens: int = 0
    exhausted: bool = False
    on_exhausted: list[Any] = field(default_factory=list)
