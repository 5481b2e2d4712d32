"""The golden runs: what each committed trace records, and how to record it again.

Shared by ``regenerate.py`` (which writes ``<name>.jsonl`` and ``<name>.txt`` here) and by
the contract tests (which re-run the same definitions and compare). Every run uses the
asyncio backend, a fixed time unit, fixed run ids and a fixed session id, so two
recordings differ only in wall-clock fields — which :func:`normalise` masks in the text
dumps (the JSONL keeps the real clock: offsets are what a timing view replays).

A golden's turn may be *interrupted*: its executor dies mid-run (``ProcessKilled``, which
nothing catches), and the recording appends the ``run.interrupted`` a dashboard records
after :data:`REMOTE_TIMEOUT` seconds without word, built from the run's last event. A turn
may also be *stopped*: the recording fires the turn's cancel token a number of time units
after a given event (:class:`Stop`), as the dashboard's Stop button does, and the turn ends
with ``turn.cancelled``. The stop is timed from an event of the run, not from the turn's
start, so that a slow start on a busy machine cannot move it relative to the branches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from picoflow_web.demos.hotel.flow import HotelFlow
from picoflow_web.demos.hotel.script import CURRENT_DATE, REFERENCE_TURNS, hotel_model
from picoflow_web.demos.parallel import (
    atomic_flow,
    bus_flow,
    cancel_flow,
    conflict_flow,
    expense_flow,
    research_flow,
    timing_flow,
)
from runtime import (
    CancelToken,
    Flow,
    FlowEngine,
    RunReply,
    ScriptedModel,
    SessionDocument,
    SessionStore,
    Step,
)
from runtime.current import turn_of
from runtime.events import (
    Event,
    EventSink,
    MemorySink,
    dump_event,
    dump_trace,
    interruption,
    runs_of,
)
from runtime.events import values as ev_values
from tests.golden.flows import (
    STOP_AFTER,
    ProcessKilled,
    archive_flow,
    catalogue_flow,
    coordinator_engine,
    coordinator_flow,
    killed_research_flow,
    outage_flow,
    outage_store,
    overflow_sinks,
    scout_flow,
    stream_flow,
    tally_flow,
)
from tests.golden.ledger_flow import survey_flow

GOLDEN_DIR = Path(__file__).resolve().parent
GOLDEN_LATENCY = 0.05
"""Seconds per demo time unit. Where the order of concurrent events depends on timing, the
demos keep at least two units (100 ms) between the contenders — far more than scheduling
jitter on a busy machine — so the order of events is fixed. (A grossly oversubscribed CPU
can still reorder them: a mismatching dump is worth one re-run before it is believed.)"""
REMOTE_TIMEOUT = 30.0
"""Seconds of silence after which the recording declares an interrupted turn's run
interrupted, as a dashboard does after ``PICOFLOW_REMOTE_TIMEOUT``."""
INTERRUPTION_REASON = f"no events or heartbeats for {REMOTE_TIMEOUT:g} s"

Factory = Callable[[float], tuple[type[Flow], ScriptedModel | None]]


def _hotel(latency: float) -> tuple[type[Flow], ScriptedModel | None]:
    return HotelFlow, hotel_model(latency=latency)


@dataclass(frozen=True)
class Stop:
    """A turn stopped through its cancel token ``after`` time units past the first event
    of type ``event`` at invocation path ``path``, with ``reason`` and ``by`` as the
    dashboard's Stop button gives them."""

    event: str
    path: str
    after: float
    reason: str
    by: str | None = None


class _Watch:
    """A sink that sets ``seen`` at the first event of one type and path of one run."""

    name = "stop-watch"

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.stop: Stop | None = None
        self.seen = anyio.Event()

    def arm(self, run_id: str, stop: Stop) -> None:
        self.run_id, self.stop, self.seen = run_id, stop, anyio.Event()

    def receive(self, event: Event) -> None:
        stop = self.stop
        if (stop is not None and event.run_id == self.run_id and event.type == stop.event
                and event.path == stop.path):
            self.seen.set()  # only a flag: the stop itself runs in its own task, after
        return None


@dataclass(frozen=True)
class Golden:
    """One golden: a flow, its model and the turns played against one session."""

    name: str
    build: Factory
    turns: tuple[str, ...]
    config: dict[str, Any] | None = None
    latency: float = GOLDEN_LATENCY
    """The time unit it is recorded at."""
    store: Callable[[], SessionStore] | None = None
    """Makes the session store it runs against (default: a memory store)."""
    sinks: Callable[[], list[EventSink]] | None = None
    """Makes the sinks that watch it beside the recording one (their events are recorded:
    a sink that overflows or breaks shows in the trace)."""
    fails: frozenset[int] = frozenset()
    """Turns (from 1) that are meant to fail."""
    interrupted: frozenset[int] = frozenset()
    """Turns (from 1) whose executor dies mid-run (the flow raises ``ProcessKilled``): they
    end with the ``run.interrupted`` the recording appends, and have no reply."""
    stops: dict[int, Stop] = field(default_factory=dict)
    """Turns (from 1) the recording stops through their cancel token."""
    resumes: frozenset[int] = frozenset()
    """Turns (from 1) that are ``FlowEngine.resume`` of the session's interrupted turn."""
    engine: Callable[[], dict[str, Any]] | None = None
    """More arguments of its ``FlowEngine`` (a coordinator's self URL and token)."""
    fork_page: int | None = None
    """Requests per page of a fork's events while it is recorded (default: the runtime's
    :data:`~runtime.events.FORK_PAGE`): small, so that a golden of a few branches pages."""
    list_page: int | None = None
    """Items per page of an event's per-branch lists while it is recorded (default: the
    runtime's :data:`~runtime.events.LIST_PAGE`): small, so that a few branches page."""

    @property
    def session_id(self) -> str:
        """The fixed session id of the run."""
        return f"golden-{self.name}"

    def run_id(self, turn: int) -> str:
        """The fixed run id of turn ``turn`` (from 1)."""
        return f"{self.name}-{turn}"

    @property
    def jsonl_path(self) -> Path:
        """The committed event log."""
        return GOLDEN_DIR / f"{self.name}.jsonl"

    @property
    def txt_path(self) -> Path:
        """The committed readable dump."""
        return GOLDEN_DIR / f"{self.name}.txt"


DEMO_GOLDENS: tuple[Golden, ...] = (
    # Sequential: its order of events does not depend on time, so it can play fast.
    Golden("hotel", _hotel, REFERENCE_TURNS, {"current_date": CURRENT_DATE}, latency=0.005),
    Golden("nested_fanout", research_flow, ("Research tide pools",)),
    Golden("conflict", conflict_flow, ("Plan the team offsite",)),
    Golden("shared_mutation", expense_flow, ("Audit the report",)),
    Golden("reducer_failure", bus_flow, ("Book the bus",)),
    Golden("atomic_failure", atomic_flow, ("Book the trip",)),
    Golden("cancellation", cancel_flow, ("Watch prices until the deadline",)),
    Golden("ab_timing", timing_flow, ("pipelined", "batched")),
)
"""The goldens of the dashboard's demo flows (``picoflow_web/demos/``)."""

GOLDENS: tuple[Golden, ...] = (
    *DEMO_GOLDENS,
    # What the demos never do, so that every event type has a golden (tests/golden/flows.py).
    Golden("checkpoints", catalogue_flow, ("Sync the catalogue",), store=outage_store),
    Golden("turn_failure", outage_flow, ("Is breakfast included?",), fails=frozenset({1})),
    Golden("sink_overflow", tally_flow, ("Count the shelves",), sinks=overflow_sinks),
    Golden("interrupted", killed_research_flow, ("Research tide pools",),
           interrupted=frozenset({1})),
    Golden("cancelled", archive_flow, ("Digitise the archive", "What is left?"),
           stops={1: Stop(*STOP_AFTER, "Stop pressed in the dashboard", "ada")}),
    Golden("coordinator", coordinator_flow, ("Survey the teams",), {"_concurrent": True},
           engine=coordinator_engine),
    # The seed's A/B flow stopped as the user did: A's chain done, B1 running.
    Golden("stopped_turn", timing_flow, ("pipelined",),
           stops={1: Stop("branch.fulfilled", "0.1:0", 1, "Stop pressed in the dashboard",
                          "ada")}),
    Golden("obeyed_cancel", scout_flow, ("Where are the tide tables?",)),
    Golden("streamed", stream_flow, ("Draft the tide note",)),
    # A ledgered fan-out killed mid-way, then resumed: two branches reused, two run.
    Golden("resumed", survey_flow, ("Survey the sites", ""), interrupted=frozenset({1}),
           resumes=frozenset({2})),
    # A fork wider than a page: its head carries two requests and the count, a
    # barrier.requested the third, before any branch starts.
    Golden("paged_fork", atomic_flow, ("Book the trip",), fork_page=2),
    # A cancellation and its join wider than a page: the cancellation's running and
    # queued paths, the reduction's inputs and completion order and the discarded
    # branches in pages of one (list.continued after each head).
    Golden("paged_cancellation", cancel_flow, ("Watch prices until the deadline",),
           list_page=1),
    # An invalidated join whose provenance is in pages of one.
    Golden("paged_conflict", conflict_flow, ("Plan the team offsite",), list_page=1),
)
"""Every golden: the demos', then those of ``tests/golden/flows.py``."""
BY_NAME = {golden.name: golden for golden in GOLDENS}


@dataclass(frozen=True)
class BranchView:
    """What one branch could read as it finished, as the runtime had it."""

    run_id: str
    path: str
    state: dict[str, dict[str, Any]]


@dataclass
class Recorded:
    """One recording of a golden."""

    events: list[Event]
    replies: list[RunReply | None] = field(default_factory=list)
    """The reply of each turn; None for an interrupted one."""
    docs: list[SessionDocument] = field(default_factory=list)
    """The stored session document after each turn (an interrupted turn's: the last one it
    saved before its executor died)."""
    views: list[BranchView] = field(default_factory=list)


def recording(flow: type[Flow], views: list[BranchView]) -> type[Flow]:
    """``flow`` under the same id, capturing each demo branch's view as it finishes.

    The demos call ``on_branch_exit`` at the end of every successful branch; the default
    does nothing, so only recordings pay for the capture.
    """

    def on_branch_exit(self: Flow, step: Step) -> None:
        bus = turn_of(self).bus
        assert bus is not None
        views.append(BranchView(
            run_id=bus.run_id,
            path=step.parallel_invocation().path_str,
            state={name: self.read_step_state(name) for name in self.steps},
        ))

    return type(flow.__name__, (flow,), {"id": flow.id, "on_branch_exit": on_branch_exit})


async def record(golden: Golden) -> Recorded:
    """Play ``golden``'s turns on a fresh engine and return everything observed.

    Run it on asyncio: the committed order of concurrent events is asyncio's.
    """
    flow, model = golden.build(golden.latency)
    views: list[BranchView] = []
    sink = MemorySink()  # first, so it has every event in emission order
    extra = golden.sinks() if golden.sinks else []
    watch = _Watch()  # last: it reacts after every other sink has the event
    engine = FlowEngine(flows=[recording(flow, views)], model_override=model,
                        sinks=[sink, *extra, watch], store=golden.store() if golden.store else None,
                        **(golden.engine() if golden.engine else {}))
    recorded = Recorded(events=sink.events, views=views)
    with _fork_page(golden.fork_page), _list_page(golden.list_page):
        await _turns(engine, flow, golden, recorded, watch)
    return recorded


@contextmanager
def _fork_page(page: int | None) -> Iterator[None]:
    """Fork events paged every ``page`` requests while the block runs (None: as ever)."""
    if page is None:
        yield
        return
    before, ev_values.FORK_PAGE = ev_values.FORK_PAGE, page
    try:
        yield
    finally:
        ev_values.FORK_PAGE = before


@contextmanager
def _list_page(page: int | None) -> Iterator[None]:
    """Per-branch lists paged every ``page`` items while the block runs (None: as ever)."""
    if page is None:
        yield
        return
    before, ev_values.LIST_PAGE = ev_values.LIST_PAGE, page
    try:
        yield
    finally:
        ev_values.LIST_PAGE = before


async def _turns(engine: FlowEngine, flow: type[Flow], golden: Golden, recorded: Recorded,
                 watch: _Watch) -> None:
    session_id = golden.session_id
    for turn, message in enumerate(golden.turns, 1):
        reply: RunReply | None = None
        try:
            reply = await _play(engine, flow.id, message, session_id, golden, turn, watch)
        except* ProcessKilled:
            pass
        assert (reply is None) == (turn in golden.interrupted), (
            f"{golden.name}: turn {turn} {'was' if reply is None else 'was not'} interrupted")
        if reply is None:
            interrupt(recorded.events, golden.run_id(turn))
        else:
            session_id = reply.session_id
        doc = await engine.store.load(session_id)
        assert doc is not None, f"{golden.name}: turn {turn} left no session document"
        recorded.replies.append(reply)
        recorded.docs.append(doc)


async def _play(engine: FlowEngine, flow_id: str, message: str, session_id: str,
                golden: Golden, turn: int, watch: _Watch) -> RunReply:
    """One turn of ``golden``; a stopped one with its Stop pressed beside it."""
    if turn in golden.resumes:
        return await engine.resume(session_id, run_id=golden.run_id(turn))
    stop = golden.stops.get(turn)
    if stop is None:
        return await engine.run(flow_id, message, session_id, golden.config,
                                run_id=golden.run_id(turn))
    token = CancelToken()
    watch.arm(golden.run_id(turn), stop)

    async def press_stop() -> None:
        await watch.seen.wait()
        await anyio.sleep(stop.after * golden.latency)
        token.cancel(stop.reason, stop.by)

    async with anyio.create_task_group() as buttons:
        buttons.start_soon(press_stop)
        reply = await engine.run(flow_id, message, session_id, golden.config,
                                 run_id=golden.run_id(turn), cancel=token)
        buttons.cancel_scope.cancel()
    return reply


def interrupt(events: list[Event], run_id: str) -> None:
    """Append the ``run.interrupted`` a dashboard records when run ``run_id`` — whose last
    event is the last of ``events`` — stays silent for :data:`REMOTE_TIMEOUT` seconds."""
    last = events[-1]
    assert last.run_id == run_id, f"{run_id} emitted nothing before it was interrupted"
    events.append(interruption(last.model_dump(mode="json"), now=last.time + REMOTE_TIMEOUT,
                               silent_for=REMOTE_TIMEOUT, reason=INTERRUPTION_REASON))


_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_MESSAGE_ID = re.compile(r"\|<time>\|\d{10}\b")


def normalise(text: str) -> str:
    """Mask what differs between two recordings of one golden: wall-clock stamps (the
    ``_saveOn`` of ``session.loaded`` states), random uuids and message-id suffixes."""
    text = _ISO_TIME.sub("<time>", text)
    text = _UUID.sub("<uuid>", text)
    return _MESSAGE_ID.sub("|<time>|<n>", text)


def dump_text(events: Sequence[Event]) -> str:
    """The normalised readable dump: each run's ``dump_trace``, separated by a blank line."""
    return normalise("\n".join(dump_trace(run) for run in runs_of(events).values()))


def dump_jsonl(events: Sequence[Event]) -> str:
    """The event log as JSON Lines (one ``dump_event`` per line)."""
    return "".join(dump_event(event) + "\n" for event in events)


def write(golden: Golden, recorded: Recorded) -> None:
    """Write ``golden``'s committed files from ``recorded``."""
    golden.jsonl_path.write_text(dump_jsonl(recorded.events), encoding="utf-8")
    golden.txt_path.write_text(dump_text(recorded.events), encoding="utf-8")
