"""Flows recorded only as goldens: what the demos never do, so every event type has a trace.

* :class:`CatalogueFlow` (golden ``checkpoints``) — a model attempt that fails with a
  transport error and is retried; then a tool runs root-join checkpointed barriers: one
  saves, the next meets a store outage and is rolled back; removals, canonical and in a
  branch.
* :class:`OutageFlow` (golden ``turn_failure``) — the model is down: every attempt fails,
  the last one is not retried, and the turn fails.
* :class:`TallyFlow` (golden ``sink_overflow``) — two barriers watched by a bounded sink
  whose consumer catches up only after each join (so it drops events and says which), and
  by a sink that breaks at the first fulfilled branch (so the bus drops it and says so).
* the demos' ``ResearchFlow`` (golden ``interrupted``, :func:`killed_research_flow`) — its
  executor dies mid-turn (:class:`ProcessKilled`) with branches of both barriers still
  running; the recording then appends the ``run.interrupted`` a dashboard would record.
* :class:`ArchiveFlow` (golden ``cancelled``) — a root-join checkpoint saves, then a nested
  fan-out is stopped through the turn's cancel token (the dashboard's Stop button) while
  some scanners run and others are queued; the next turn continues from the checkpoint.
* :class:`ScoutFlow` (golden ``obeyed_cancel``) — a branch finds the answer and cancels its
  own barrier: a sibling waiting on the token obeys it at once (fulfilled after the
  request), a sibling's model call is cut (rejected, cancelled), a queued one never starts.
* :class:`CoordinatorFlow` (golden ``coordinator``) — coordinator mode: five items sent as
  independent child requests in batches of two to a stand-in of the app's ``/ai/run``;
  children that answer, fail, are refused, and are retried after a 503.
* :class:`StreamFlow` (golden ``streamed``) — two branches whose model answers stream
  (``model.delta``): one attempt breaks mid-answer and is retried; the other answer is a
  tool call whose arguments stream.

Each ``xxx_flow(latency)`` returns ``(flow_class, model)`` like the demo factories;
:func:`outage_store` and :func:`overflow_sinks` make the store and the extra sinks a
recording uses.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import anyio

from picoflow_web.demos.parallel import ResearchFlow, research_flow
from runtime import (
    Channel,
    DirectResult,
    Flow,
    LogicStep,
    MemorySessionStore,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ModelTransportError,
    ParallelCheckpointError,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    SessionDocument,
    SessionStoreError,
    Step,
    StepChannels,
    ToolCall,
    Transition,
    direct_result,
    stay,
    tool,
)
from runtime.concurrent import ChildReply
from runtime.events import BoundedSink, CallbackSink, Event, EventSink
from runtime.streaming import stream_delta
from tests.self_app import SelfApp, start_self_app


class GoldenFlow(Flow):
    """Base of these flows: a scripted selection, no pause between model attempts."""

    retry_delay = 0.0
    unit: ClassVar[float] = 0.05

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="golden-model")

    def on_branch_exit(self, step: Step) -> None:
        """A branch succeeded (called in its private view); the recordings hook in."""


class GoldenBranch(Step):
    """A step that runs as a branch: reports its end to the flow's hook."""

    async def on_exit(self) -> None:
        await super().on_exit()
        cast(GoldenFlow, self.flow).on_branch_exit(self)


def _scaled(flow: type[GoldenFlow], latency: float) -> type[GoldenFlow]:
    return type(flow.__name__, (flow,), {"id": flow.id, "unit": latency,
                                         "__doc__": flow.__doc__})


# -- checkpoints ---------------------------------------------------------------------------


class OutageStore(MemorySessionStore):
    """A memory store whose saves fail while :attr:`down` is set (a full disk, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        if self.down:
            raise SessionStoreError("the session store is down: no space left on device")
        return await super().save(doc, expected_revision)


def outage_store() -> OutageStore:
    """A fresh :class:`OutageStore` (up)."""
    return OutageStore()


class Pricer(GoldenBranch):
    """Prices the catalogue for one region (a model call); contributes the price."""

    def get_prompt(self) -> str:
        return f"Price the catalogue for region '{self.parallel_invocation().key}'."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"prices": StepChannels.keyed_by_branch()}

    async def on_response(self, result: Any) -> Routable:
        self.contribute_state("prices", str(result))
        return str(result)


class Pruner(LogicStep, GoldenBranch):
    """Drops the stale listing and marks the catalogue as pruned (drafts, in a branch)."""

    async def run_logic(self) -> Routable:
        self.remove_state("stale")
        self.save_state({"pruned": True})
        return "pruned"


class CatalogueDesk(Step):
    """The coordinator: its model calls ``sync_catalogue``, which runs two checkpointed
    root barriers; the second meets a store outage and is rolled back."""

    def get_prompt(self) -> str:
        return "You keep the shop's catalogue. Call sync_catalogue, then report the result."

    @tool
    async def sync_catalogue(self) -> Transition:
        """Price the catalogue for every region and prune stale listings."""
        self.save_state({"synced": 0, "scratch": "draft notes"})
        self.remove_state("scratch")  # a canonical removal
        self.flow.save_step_state(Pruner, {"stale": "winter listing", "pruned": False})
        batch = await self.run_steps(
            [RunStepRequest(Pricer, key="eu", user_message="Price for eu"),
             RunStepRequest(Pruner)],
            checkpoint="root-join")
        saved = batch.publication.revision
        store = cast(OutageStore, self.flow.require_engine().store)
        store.down = True
        try:
            await self.run_steps([RunStepRequest(Pricer, key="us", user_message="Price for us")],
                                 checkpoint="root-join")
        except ParallelCheckpointError:
            outcome = "rolled back"
        else:
            outcome = "saved"
        finally:
            store.down = False
        self.save_state({"synced": 1, "second_checkpoint": outcome})
        return stay(f"The eu prices and the pruning were checkpointed at revision {saved}; "
                    f"the us prices were {outcome}: the store was down.")


class CatalogueFlow(GoldenFlow):
    """Root-join checkpoints that save and fail; removals; a retried model attempt."""

    def define_steps(self) -> list[Step]:
        return [CatalogueDesk(self), Pricer(self), Pruner(self)]


def catalogue_flow(latency: float) -> tuple[type[GoldenFlow], ScriptedModel]:
    """:class:`CatalogueFlow` at time unit ``latency``, with its model."""

    def reset(request: ModelRequest) -> ModelResponse:
        raise ModelTransportError("connection reset by peer")

    def report(request: ModelRequest) -> str:
        last = request.last_message
        return f"Synced. {last.content if last is not None else ''}"

    model = ScriptedModel([
        # The desk's first attempt fails in transport; the retry is answered.
        Rule(step="CatalogueDesk", times=1, latency=latency, respond=reset),
        Rule(step="CatalogueDesk", last_type="tool", latency=latency, respond=report),
        Rule(step="CatalogueDesk", latency=latency, tools=[("sync_catalogue", {})]),
        Rule(step="Pricer", prompt=r"region 'eu'", latency=latency, text="eu: 12.40 EUR"),
        Rule(step="Pricer", latency=latency, text="us: 13.10 USD"),
    ])
    return _scaled(CatalogueFlow, latency), model


# -- turn failure --------------------------------------------------------------------------


class Concierge(Step):
    """Answers the guest with one model call."""

    def get_prompt(self) -> str:
        return "You are the hotel concierge. Answer the guest briefly."


class OutageFlow(GoldenFlow):
    """One model step whose model is down: the turn fails after its attempts run out."""

    def define_steps(self) -> list[Step]:
        return [Concierge(self)]


def outage_flow(latency: float) -> tuple[type[GoldenFlow], ScriptedModel]:
    """:class:`OutageFlow` at time unit ``latency``, with a model that never answers."""

    def down(request: ModelRequest) -> ModelResponse:
        raise ModelTransportError("503 Service Unavailable: the model is overloaded")

    return _scaled(OutageFlow, latency), ScriptedModel([Rule(latency=latency, respond=down)])


# -- sink overflow ---------------------------------------------------------------------------


class Counter(LogicStep, GoldenBranch):
    """Counts one shelf: contributes its count to the tally."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"total": StepChannels.sum(), "shelves": StepChannels.append()}

    async def run_logic(self) -> Routable:
        count = self.parallel_invocation().params["count"]
        self.contribute_state("total", count)
        self.contribute_state("shelves", self.parallel_invocation().key)
        return f"{count} items"


class Stocktake(LogicStep):
    """Counts the shelves in two rounds, three shelves a round."""

    async def run_logic(self) -> Routable:
        counts = {"a1": 3, "a2": 5, "a3": 2, "b1": 7, "b2": 6, "b3": 4}
        for round_ in ("a", "b"):
            await self.run_steps([RunStepRequest(Counter, key=key, params={"count": n})
                                  for key, n in counts.items() if key.startswith(round_)])
        total = self.flow.get_step_state(Counter, "total")
        self.save_state({"total": total})
        return f"Counted {total} items on {len(counts)} shelves."


class TallyFlow(GoldenFlow):
    """Two fan-outs of logic steps: enough events in a burst to overflow a small buffer."""

    def define_steps(self) -> list[Step]:
        return [Stocktake(self), Counter(self)]


def tally_flow(latency: float) -> tuple[type[GoldenFlow], None]:
    """:class:`TallyFlow` (logic steps only: no model)."""
    return _scaled(TallyFlow, latency), None


OVERFLOW_CAPACITY = 6
"""Events the bounded sink holds before its consumer catches up."""


class BrokenSinkError(RuntimeError):
    """What the broken sink raises."""


def overflow_sinks() -> list[EventSink]:
    """A bounded sink drained after every join (so it overflows in between), its consumer,
    and a sink that raises at the first fulfilled branch (the bus drops and reports it)."""
    bounded = BoundedSink("dashboard", capacity=OVERFLOW_CAPACITY)

    def consume(event: Event) -> None:
        if event.type == "join.published":  # a consumer catching up after each barrier
            bounded.drain()

    def break_down(event: Event) -> None:
        if event.type == "branch.fulfilled":
            raise BrokenSinkError("the audit log is full")

    return [bounded, CallbackSink(consume, "consumer"), CallbackSink(break_down, "audit")]


# -- interrupted -----------------------------------------------------------------------------


class ProcessKilled(BaseException):
    """The executor dying under a run (SIGKILL, a lost machine), as a test can cause it.

    A ``BaseException``: neither a branch (which catches ``Exception``) nor the engine
    catches it, so the turn stops where it is — no ``branch.rejected``, no join, no
    ``turn.finished`` or ``turn.failed`` — and the recording keeps what was emitted before.
    """


def killed_research_flow(latency: float) -> tuple[type[ResearchFlow], ScriptedModel]:
    """The demos' ``ResearchFlow`` at time unit ``latency``, killed mid-turn.

    Its model plays the demo's script, except that the news finder's model call kills the
    process (after 5 units) and the archive finder's would answer only after 8. Counted
    from the outer fork: the planner forks the papers and news finders at 1u, the papers
    finder reports at 3u, the process dies at 6u — with the planner, the archive finder and
    the news finder running, both barriers open.
    """

    def die(request: ModelRequest) -> ModelResponse:
        raise ProcessKilled("the executor was killed")

    flow, model = research_flow(latency)
    return flow, ScriptedModel([
        Rule(step="Finder", prompt=r"^Finder 'news'", latency=5 * latency, respond=die),
        Rule(step="Finder", prompt=r"^Finder 'archive'", latency=8 * latency,
             text="1 source in the archive"),
        *model.rules,
    ])


# -- cancelled -------------------------------------------------------------------------------

STOP_AFTER = ("branch.started", "1:0.1", 1)
"""When the recording presses Stop: one time unit after the east wing's second box starts
(8u after the scanners began), so the east wing's first box is scanned and its second is on
its first page (till 12u); the west wing's first box is on its second page (6u..12u); four
boxes are still queued. Timed from the scan, not from the turn's start, it keeps three
units from every contender however long the catalogue took."""
BOXES = {"east": (2, 4), "west": (3, 6)}
"""Per wing: pages per box and time units per page; each wing has three boxes."""


class Cataloguer(LogicStep, GoldenBranch):
    """Catalogues one collection at once."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"catalogued": StepChannels.append()}

    async def run_logic(self) -> Routable:
        collection = self.parallel_invocation().key
        self.contribute_state("catalogued", collection)
        return f"{collection} catalogued"


class Scanner(LogicStep, GoldenBranch):
    """Scans one box page by page; when told to stop, it stops at once with what it has."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"pages": StepChannels.keyed_by_branch()}

    async def run_logic(self) -> Routable:
        invocation = self.parallel_invocation()
        total, units = invocation.params["pages"], invocation.params["units"]
        cancel = invocation.cancel
        pages = 0
        while pages < total:
            with anyio.move_on_after(units * cast(GoldenFlow, self.flow).unit):
                await cancel.wait()  # a page takes its time unless the stop comes first
            if cancel.cancelled:
                break
            pages += 1
        self.contribute_state("pages", pages)
        return {"pages": pages, "complete": pages == total}


class Wing(LogicStep, GoldenBranch):
    """Scans the wing's three boxes one at a time (a nested barrier, two boxes queued)."""

    async def run_logic(self) -> Routable:
        wing = self.parallel_invocation().key
        pages, units = BOXES[wing]
        batch = await self.run_steps(
            [RunStepRequest(Scanner, key=f"{wing}-{n}", params={"pages": pages, "units": units})
             for n in (1, 2, 3)], max_concurrency=1)
        return {"boxes": [b.key for b in batch.fulfilled],
                "never_started": [b.key for b in batch.rejected if not b.started]}


class Archivist(LogicStep):
    """Catalogues (checkpointed), then digitises both wings; asked what is left, it says
    what the session holds."""

    async def run_logic(self) -> Routable:
        last = self.get_last_message()
        if last is not None and "left" in str(last.content):
            catalogued = self.flow.get_step_state(Cataloguer, "catalogued") or []
            scanned = self.flow.get_step_state(Scanner, "pages") or {}
            return (f"Catalogued: {', '.join(catalogued) or 'nothing'}. Scanned: "
                    f"{scanned or 'nothing yet'}.")
        catalogue = await self.run_steps(
            [RunStepRequest(Cataloguer, key=key) for key in ("maps", "letters")],
            checkpoint="root-join")
        self.save_state({"catalogued_at": catalogue.publication.revision})
        scan = await self.run_steps([RunStepRequest(Wing, key=wing) for wing in BOXES])
        self.save_state({"wings": {b.key: b.output for b in scan.fulfilled},
                         "stopped": scan.cancelled})
        return f"Digitised {len(scan.fulfilled)} wings."


class ArchiveFlow(GoldenFlow):
    """A checkpointed catalogue, then a nested fan-out stopped through the turn's token."""

    def define_steps(self) -> list[Step]:
        return [Archivist(self), Cataloguer(self), Wing(self), Scanner(self)]


def archive_flow(latency: float) -> tuple[type[GoldenFlow], None]:
    """:class:`ArchiveFlow` (logic steps only: no model)."""
    return _scaled(ArchiveFlow, latency), None


# -- a branch cancels its barrier; its siblings obey ----------------------------------------


class Searcher(LogicStep, GoldenBranch):
    """The ``finder`` finds the answer after two units and cancels its barrier (the rest
    of the search is moot); any other searcher waits for a lead and obeys the token: it
    stops at once, fulfilled with what it has."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"found": StepChannels.keyed_by_branch()}

    async def run_logic(self) -> Routable:
        invocation = self.parallel_invocation()
        unit = cast(GoldenFlow, self.flow).unit
        if invocation.key == "finder":
            await anyio.sleep(2 * unit)
            self.contribute_state("found", "tide tables at the harbour office")
            invocation.cancel.cancel("answer found")
            return {"found": True}
        with anyio.move_on_after(40 * unit):
            await invocation.cancel.wait()
        return {"found": False, "stopped": invocation.cancel.reason}


class Reader(GoldenBranch):
    """Reads the archive through one slow model call; the token stops the call at once."""

    def get_prompt(self) -> str:
        return "Read the tide archive."


class Scout(LogicStep):
    """Searches four ways at once (three at a time) until one finds the answer."""

    async def run_logic(self) -> Routable:
        batch = await self.run_steps(
            [RunStepRequest(Searcher, key="finder"), RunStepRequest(Searcher, key="watcher"),
             RunStepRequest(Reader, key="reader"), RunStepRequest(Searcher, key="spare")],
            max_concurrency=3)
        self.save_state({"cancelled": batch.cancelled,
                         "fulfilled": [b.key for b in batch.fulfilled],
                         "rejected": [b.key for b in batch.rejected]})
        return f"Found it; {len(batch.rejected)} searches stopped."


class ScoutFlow(GoldenFlow):
    """A branch cancels its own barrier; a sibling obeys the token, a model call is cut,
    a queued search never starts."""

    def define_steps(self) -> list[Step]:
        return [Scout(self), Searcher(self), Reader(self)]


def scout_flow(latency: float) -> tuple[type[GoldenFlow], ScriptedModel]:
    """:class:`ScoutFlow` with the reader's slow model."""
    model = ScriptedModel([Rule(step="Reader", latency=40 * latency, text="tides read")])
    return _scaled(ScoutFlow, latency), model


# -- coordinator -----------------------------------------------------------------------------


_SELF_APP: SelfApp | None = None


def self_app_url() -> str:
    """The URL of the process's stand-in for the app's own /ai/run (started once): the
    ``coordinator`` golden's children answer in a fixed order (item ``i`` of a batch after
    ``2 + 2 i`` time units of :data:`GOLDEN_UNIT`), with a fixed outcome per item."""
    global _SELF_APP
    if _SELF_APP is None:
        _SELF_APP, _ = start_self_app()  # serves as long as the process runs
        _SELF_APP.behaviour = {2: ["fail"], 3: ["401"], 4: ["503", "ok"]}
        _SELF_APP.delay = {i: GOLDEN_UNIT * (2 + 2 * (i % 2)) for i in range(5)}
    return _SELF_APP.url


GOLDEN_UNIT = 0.05
"""The coordinator golden's time unit (the stand-in answers by it)."""


class Dispatch(LogicStep):
    """Not reached: the coordinator's turns run ``spawn_steps()``."""

    async def run_logic(self) -> Routable:
        return "Ask with config _concurrent to coordinate."


class CoordinatorFlow(GoldenFlow):
    """Sends five survey questions as independent child requests, two at a time: two
    answer, one child's turn fails, one is refused (its token), one is retried after a
    503 and answers."""

    def define_steps(self) -> list[Step]:
        return [Dispatch(self)]

    async def spawn_steps(self) -> str:
        answers: dict[int, str] = {}

        def keep(item: int, reply: ChildReply) -> None:
            answers[item] = reply.message if reply.ok and reply.message else reply.status

        result = await self.concurrent_steps(
            list(range(5)), batch_size=2, on_config=lambda item: {"question": f"q{item}"},
            on_response=keep, timeout=30.0, retries=1, backoff=GOLDEN_UNIT,
            flow_name="Survey")
        self.save_step_state(Dispatch, {"answers": {str(k): v for k, v in sorted(answers.items())}})
        return f"{len(result.fulfilled)} of {len(result.replies)} children answered"


def coordinator_flow(latency: float) -> tuple[type[GoldenFlow], None]:
    """:class:`CoordinatorFlow` (no model: its work is its children's)."""
    return _scaled(CoordinatorFlow, latency), None


def coordinator_engine() -> dict[str, Any]:
    """What the coordinator golden's engine needs: the stand-in app and a token."""
    return {"self_url": self_app_url(), "self_token": "pf_golden"}


# -- a streamed answer ---------------------------------------------------------------------


class Drafter(GoldenBranch):
    """Drafts one paragraph of the tide note with the model (which streams)."""

    def get_prompt(self) -> str:
        return f"Draft the {self.parallel_invocation().key} of the tide note."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"paragraphs": StepChannels.keyed_by_branch()}

    @tool
    async def tide_table(self, harbour: str) -> DirectResult:
        """The next high tide at ``harbour``: the branch's paragraph."""
        paragraph = f"High tide at {harbour} is at 06:10."
        self.contribute_state("paragraphs", paragraph)
        return direct_result(paragraph)

    async def on_response(self, result: Any) -> Routable:
        self.contribute_state("paragraphs", str(result))
        return str(result)


class Editor(LogicStep):
    """Has the intro and the outro drafted at once."""

    async def run_logic(self) -> Routable:
        batch = await self.run_steps([RunStepRequest(Drafter, key="intro"),
                                      RunStepRequest(Drafter, key="outro")])
        self.save_state({"drafted": [b.key for b in batch.fulfilled]})
        return "The tide note is drafted."


class StreamFlow(GoldenFlow):
    """Two branches whose model answers stream: one attempt breaks mid-answer and is
    retried; the other answer is a tool call whose arguments stream."""

    def define_steps(self) -> list[Step]:
        return [Editor(self), Drafter(self)]


class Dictation(ScriptedModel):
    """Streams fixed answers chunk by chunk, at fixed times.

    The intro writes at every fourth time unit (0, 4; its first attempt then loses its
    connection at 8 and the retry writes at 8, 12, 16) and the outro's tool call two units
    later (2, 6): contenders stay two units apart, and chunks of one attempt four apart —
    far over the runtime's interval between two deltas — so every chunk is its own
    ``model.delta`` and the order of events does not depend on the machine.
    """

    def __init__(self, unit: float) -> None:
        super().__init__(name=None)
        self.unit = unit
        self.intro_attempts = 0

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        unit = self.unit
        if "intro" in request.system_prompt:
            self.intro_attempts += 1
            if self.intro_attempts == 1:
                stream_delta("The tide ")
                await anyio.sleep(4 * unit)
                stream_delta("comes in tw")
                await anyio.sleep(4 * unit)
                raise ModelTransportError("connection dropped mid-answer")
            for piece in ("The tide ", "comes in ", "twice a day."):
                if piece != "The tide ":
                    await anyio.sleep(4 * unit)
                stream_delta(piece)
            return ModelResponse(content="The tide comes in twice a day.")
        await anyio.sleep(2 * unit)
        stream_delta("", [{"index": 0, "id": "call_tide", "name": "tide_table",
                           "arguments": '{"harbour": '}])
        await anyio.sleep(4 * unit)
        stream_delta("", [{"index": 0, "arguments": '"Brest"}'}])
        return ModelResponse(tool_calls=[ToolCall(id="call_tide", name="tide_table",
                                                  args={"harbour": "Brest"})],
                             finish_reason="tool_calls")


def stream_flow(latency: float) -> tuple[type[GoldenFlow], ScriptedModel]:
    """:class:`StreamFlow` at time unit ``latency``, with its streaming model."""
    return _scaled(StreamFlow, latency), Dictation(latency)
