"""The run model: what folding a run's events builds, and what every handler shares.

Plain dataclasses and the small helpers the family modules have in common (recording an
anomaly, finding a named barrier, writing a field), kept apart from the handlers so each
family module depends on the model alone and never on another family.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import schema as ev

State = dict[str, dict[str, Any]]


@dataclass
class Stream:
    """A model attempt between its ``model.started`` and its ``model.finished`` or
    ``model.failed``: what its ``model.delta`` events wrote so far."""

    step: str
    call: int
    attempt: int
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls by their place in the answer: ``{index, arguments, id?, name?}``, with
    the arguments' JSON text written so far."""

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "call": self.call, "attempt": self.attempt,
                "text": self.text, "tool_calls": self.tool_calls}


@dataclass
class Invocation:
    """One branch (or the top level, path ``""``) as the events tell it."""

    path: str
    step: str
    key: str = ""
    index: int = -1
    barrier: str | None = None
    status: str = "queued"
    """queued, running, fulfilled or rejected."""
    interrupted: bool = False
    """The run was interrupted while this branch was running (its status stays running)."""
    cancelled: bool = False
    output: Any = None
    error: dict[str, Any] | None = None
    started: float | None = None
    finished: float | None = None
    barriers: list[str] = field(default_factory=list)
    """Barriers this invocation opened, in order."""
    changes: list[tuple[int, str, str, Any, bool]] = field(default_factory=list)
    """Own drafts and received publications: (seq, step, field, value, deleted)."""
    drafts: list[tuple[int, str, str, Any, bool]] = field(default_factory=list)
    """Own drafts only (what siblings cannot see)."""
    tokens: int = 0
    streaming: Stream | None = None
    """The model attempt it has open, with what the model wrote of it so far."""
    lost_rights: bool = False
    """A ``cancel.grace_expired`` closed it: it outlived the grace period."""
    reused: dict[str, Any] | None = None
    """Of a branch a resumed turn restored from the ledger (``branch.reused``):
    ``{run_id, seq, tokens}`` of where it ran and what it spent there."""


@dataclass(frozen=True)
class Applied:
    """One field a join's publication record lists as applied, and who it came from."""

    step: str
    field: str
    kind: str
    """replacement, removal or contribution."""
    origin: str
    """The invocation path of the writer or contributor."""


@dataclass
class Barrier:
    """One barrier: its fork, branches and join."""

    id: str
    caller: str
    caller_step: str
    policy: str
    checkpoint: str
    base: str
    forked_seq: int
    forked_at: float
    branches: list[str]
    """Branch paths in request order."""
    base_state: State | None = None
    """Canonical state at the fork (root barriers)."""
    outcome: str = "open"
    """open, published or invalidated."""
    published: list[dict[str, Any]] = field(default_factory=list)
    discarded: list[dict[str, Any]] = field(default_factory=list)
    reductions: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    provenance: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_revision: int | None = None
    cancel_reason: str | None = None
    joined_at: float | None = None
    interrupted: bool = False
    """The run was interrupted while this barrier was open (its outcome stays open)."""
    undo: dict[tuple[str, str], tuple[bool, Any]] = field(default_factory=dict)
    target: str | None = None
    """canonical or caller-scope, once published."""
    checkpoint_failed: bool = False
    applied: dict[str, list[Applied]] = field(default_factory=dict)
    """What the join's record applied, under every path from a branch down to its writer."""
    discarded_at: dict[int, dict[str, Any]] = field(default_factory=dict)
    """The ``discarded`` entries by request index."""


@dataclass
class Anomaly:
    """An event the fold could not place (it was applied as far as it could be)."""

    seq: int
    message: str


@dataclass
class Overflow:
    """A ``sink.overflowed`` event: a sink dropped the events ``first`` .. ``last``."""

    seq: int
    sink: str
    first: int
    last: int


@dataclass
class ConcurrentBatch:
    batch: int
    items: list[int]
    started_seq: int
    started_at: float
    finished_seq: int | None = None
    finished_at: float | None = None
    fulfilled: int | None = None
    failed: int | None = None


@dataclass
class ConcurrentChild:
    item: int
    batch: int
    status: str = "queued"
    """queued, running, then how it ended (:data:`~runtime.events.schema.ChildStatus`)."""
    run_id: str | None = None
    session_id: str | None = None
    attempts: int = 0
    started_seq: int | None = None
    started_at: float | None = None
    finished_seq: int | None = None
    finished_at: float | None = None
    duration: float | None = None
    http_status: int | None = None
    completed: bool | None = None
    reply: Any = None
    error: dict[str, Any] | None = None


@dataclass
class ConcurrentGroup:
    """One ``concurrent_steps()`` call of the coordinator."""

    group: str
    flow: str
    batches: int
    total: int
    """Items of the call."""
    batch_size: int
    timeout: float
    retries: int
    caller: str
    """The invocation path it was called from (``""``: the turn)."""
    batch_list: list[ConcurrentBatch] = field(default_factory=list)
    children: dict[int, ConcurrentChild] = field(default_factory=dict)


@dataclass
class RunModel:
    """Everything a view needs to draw one run."""

    run_id: str = ""
    session_id: str = ""
    flow: str = ""
    status: str = "running"
    """running, finished, failed, interrupted or cancelled."""
    reply: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cursor: str | None = None
    state: State = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    invocations: dict[str, Invocation] = field(default_factory=dict)
    barriers: dict[str, Barrier] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    """Ids of barriers whose join was invalidated."""
    last_seq: int = -1
    anomalies: list[Anomaly] = field(default_factory=list)
    """Events the fold could not place, in the order met."""
    overflows: list[Overflow] = field(default_factory=list)
    """Where sinks dropped events."""
    interruption: dict[str, Any] | None = None
    """``{seq, reason, silent_for}`` of the ``run.interrupted`` that ended the run."""
    cancellation: dict[str, Any] | None = None
    """``{seq, reason, requested_by, revision}`` of the ``turn.cancelled`` that ended it."""
    resumes: str | None = None
    """The run this one resumes (``turn.started``'s ``resumes``), if it is a resume."""
    saved: State = field(default_factory=dict)
    """The canonical state as of the last ``session.loaded`` or ``session.saved``: what the
    session store holds."""
    unsaved: list[dict[str, Any]] = field(default_factory=list)
    """Of a stopped turn: the fields published in memory but never saved, ``{step, field,
    value, deleted}`` with the value memory held (``deleted``: memory had removed it)."""
    concurrent: list[ConcurrentGroup] = field(default_factory=list)
    """A coordinator's ``concurrent_steps()`` calls, their batches and children."""
    drafts: bool = True
    """Whether invocations keep their drafts and received publications (what
    :func:`view_at` reads). Without them the fold keeps the canonical state, statuses and
    barriers only."""


def new_run(*, drafts: bool = True) -> RunModel:
    """An empty run model, ready for :func:`apply_event`."""
    return RunModel(invocations={"": Invocation(path="", step="", status="running")},
                    drafts=drafts)


Handler = Callable[[RunModel, Any, Invocation | None], None]
"""What a family module registers for an event type: it applies one event of that type to
the run, given the invocation the event's ``path`` names (None: one no fork announced)."""

Handlers = dict[str, Handler]
"""A family's handlers by event ``type``."""


def anomaly(run: RunModel, event: ev.Event, message: str) -> None:
    """Record what the fold could not place (it goes on)."""
    run.anomalies.append(Anomaly(event.seq, message))


def barrier_of(run: RunModel, event: ev.Event, barrier_id: str) -> Barrier | None:
    """The barrier an event names, or None and an anomaly when no fork announced it."""
    barrier = run.barriers.get(barrier_id)
    if barrier is None:
        anomaly(run, event, f"{event.type} for unknown barrier {barrier_id}")
    return barrier


def set_field(state: State, step: str, name: str, value: Any, deleted: bool) -> None:
    """Write or remove one field, replacing the step's object (views handed out keep theirs)."""
    fields = dict(state.get(step, {}))
    if deleted:
        fields.pop(name, None)
    else:
        fields[name] = copy.deepcopy(value)
    state[step] = fields


def path_depth(path: str) -> int:
    """How many forks deep an invocation path is (the turn, ``""``, is 0)."""
    return 0 if path == "" else path.count(".") + 1


def comparable(state: State) -> State:
    """State without the framework fields events do not carry (``_saveOn``, ``_transient``)."""
    return {step: {k: v for k, v in fields.items() if k not in ("_saveOn", "_transient")}
            for step, fields in state.items()}
