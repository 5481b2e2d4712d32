"""Parallel demo flows: every kind of barrier the runtime has, played by scripted models.

Each ``xxx_flow(latency)`` returns ``(flow_class, model)``; ``latency`` is the time unit
``u`` in seconds (about 0.005 for fast tests, 0.3 for a watchable dashboard). Concurrent
work gets distinct durations — two units apart where a chain of waits races another — so
on one event loop the order of events, and every final state, is the same each time.

* :class:`ResearchFlow` — nested fan-out (the seed's B/C, with B forking D/E).
* :class:`ConflictFlow` — two branches replace one field; the conflict is caught.
* :class:`AtomicFlow` — an atomic batch where one branch raises: nothing publishes.
* :class:`ExpenseFlow` — a branch writes its caller's state (an invalid shared mutation).
* :class:`BusFlow` — contributions that each fit but together overflow a custom reducer.
* :class:`CancelFlow` — a deadline cancels a bounded barrier: cooperative, stubborn and
  queued branches.
* :class:`TimingFlow` — the seed's A/B example: pipelined workers, or batched stages.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, TypeVar, cast

import anyio

from runtime import (
    CancelToken,
    Channel,
    DirectResult,
    Flow,
    LogicStep,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ParallelConfig,
    ParallelMutationError,
    ParallelReducerError,
    ParallelStateConflictError,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    Step,
    StepChannels,
    ToolCall,
    Transition,
    direct_result,
    stay,
    tool,
)

from .hotel.flow import HotelFlow
from .hotel.script import hotel_model
from .scale import FanOutFlow

PROVIDER = "scripted"  # the demos' model provider (an engine may also override the model)
DEFAULT_LATENCY = 0.3  # the time unit the dashboard plays the demos at, in seconds

F = TypeVar("F", bound="DemoFlow")


class DemoFlow(Flow):
    """Base of the parallel demos: the scripted provider and a time unit."""

    unit: ClassVar[float] = DEFAULT_LATENCY
    """Seconds per time unit; the factories bake the requested latency in."""
    retry_delay = 0.0

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider=PROVIDER, name="demo-model")

    def on_branch_exit(self, step: Step) -> None:
        """A demo branch succeeded (called in its private view); tests and debuggers hook in."""


class BranchStep(Step):
    """A step of the demos that runs as a branch: reports its end to the flow's hook."""

    async def on_exit(self) -> None:
        await super().on_exit()
        if isinstance(self.flow, DemoFlow):
            self.flow.on_branch_exit(self)


def _scaled(flow: type[F], latency: float) -> type[F]:
    """``flow`` with its time unit set to ``latency``, under the same flow id."""
    namespace = {"id": flow.id, "unit": latency, "__doc__": flow.__doc__}
    return cast(type[F], type(flow.__name__, (flow,), namespace))


def _call(name: str, args: dict[str, Any], call_id: str) -> ModelResponse:
    """A scripted answer that calls one tool."""
    return ModelResponse(tool_calls=[ToolCall(id=call_id, name=name, args=args)],
                         finish_reason="tool_calls")


def _last_text(request: ModelRequest) -> str:
    last = request.last_message
    return "" if last is None else last.content


# -- a. nested fan-out -----------------------------------------------------------------------

FINDS = {"papers": 2, "news": 3, "archive": 1}  # sources each finder reports


class Finder(BranchStep):
    """Searches one query (a repeated step: branch key and params say which)."""

    def get_prompt(self) -> str:
        invocation = self.parallel_invocation()
        plan = self.flow.get_step_state(Planner, "plan")
        seen = json.dumps(plan, sort_keys=True) if plan else "none visible"
        return (f"Finder '{invocation.key}'. Search: {invocation.params['query']}. "
                f"Research plan: {seen}.")

    def parallel_state_channels(self) -> dict[str, Channel]:
        # Every finder writes these fields: contributions combine, replacements would conflict.
        return {"findings": StepChannels.keyed_by_branch(), "sources": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        invocation = self.parallel_invocation()
        self.contribute_state("findings", str(result))
        self.contribute_state("sources", {"finder": invocation.key,
                                          "query": invocation.params["query"]})
        return str(result)


class Planner(BranchStep):
    """Plans the research, saves the plan, then forks two finders that inherit it."""

    @tool
    async def plan_queries(self, papers: str, news: str) -> DirectResult:
        """Search papers and news with these queries, in parallel."""
        # Saved before the fork, so the finders (forked from this view) can read it.
        self.save_state({"plan": {"papers": papers, "news": news}})
        batch = await self.run_steps([
            RunStepRequest(Finder, key="papers", params={"query": papers}, user_message=papers),
            RunStepRequest(Finder, key="news", params={"query": news}, user_message=news),
        ])
        found = self.flow.get_step_state(Finder, "findings") or {}
        self.save_state({"status": f"{len(batch.fulfilled)}/{len(batch.branches)} reported"})
        return direct_result({"planned": ["papers", "news"], "visible_findings": sorted(found)})


class ResearchDesk(Step):
    """The coordinator: its model calls ``research``, which runs the outer barrier."""

    def get_prompt(self) -> str:
        return ("You coordinate research. Call research(topic) with the user's topic, then "
                "report what was published.")

    @tool
    async def research(self, topic: str) -> Transition:
        """Research a topic: a planner (forking finders) and an archive finder, in parallel."""
        self.save_state({"topic": topic})
        batch = await self.run_steps([
            RunStepRequest(Planner, user_message=f"Plan research on {topic}"),
            RunStepRequest(Finder, key="archive", params={"query": f"{topic} in the archive"},
                           user_message=f"Search the archive for {topic}"),
        ])
        findings: dict[str, str] = self.flow.get_step_state(Finder, "findings") or {}
        summary = "; ".join(f"{key}: {text}" for key, text in findings.items())
        self.save_state({"summary": summary,
                         "branches": {b.key: b.status for b in batch.branches}})
        return stay(f"Published findings from {len(findings)} finders. {summary}")


class ResearchFlow(DemoFlow):
    """Nested fan-out: a planner forks finders while a sibling finder runs beside it."""

    def define_steps(self) -> list[Step]:
        return [ResearchDesk(self), Planner(self), Finder(self)]

    def example_messages(self) -> list[str]:
        return ["research tide pools", "research about coral reefs"]

    def needs_message(self) -> bool:
        return True  # the message is the topic


def research_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[ResearchFlow], ScriptedModel]:
    """:class:`ResearchFlow` at time unit ``latency``, with its model."""

    def ask(request: ModelRequest) -> ModelResponse:
        text = _last_text(request)
        match = re.search(r"(?i)research\s+(?:on\s+|about\s+)?(.+)", text)
        topic = (match.group(1) if match else text).strip(" .?!") or "tide pools"
        return _call("research", {"topic": topic}, f"call_research_{len(request.messages)}")

    def plan(request: ModelRequest) -> ModelResponse:
        topic = _last_text(request).removeprefix("Plan research on ")
        return _call("plan_queries", {"papers": f"field studies of {topic}",
                                      "news": f"recent news on {topic}"}, "call_plan")

    def find(request: ModelRequest) -> str:
        match = re.search(r"^Finder '(.+?)'\. Search: (.+?)\. Research plan", request.system_prompt)
        key, query = match.groups() if match else ("?", "?")
        count = FINDS.get(key, 1)
        return f"{count} source{'s' if count != 1 else ''} on {query}"

    model = ScriptedModel([
        Rule(step="ResearchDesk", last_type="tool", latency=latency,
             respond=lambda request: f"Research done. {_last_text(request)}"),
        Rule(step="ResearchDesk", latency=latency, respond=ask),
        Rule(step="Planner", latency=latency, respond=plan),
        # D (papers) ends at 3u, C (archive) at 5u, E (news) at 7u: C finishes between
        # B's children, so completion order and request-path order differ visibly.
        Rule(step="Finder", prompt=r"^Finder 'papers'", latency=2 * latency, respond=find),
        Rule(step="Finder", prompt=r"^Finder 'news'", latency=6 * latency, respond=find),
        Rule(step="Finder", latency=5 * latency, respond=find),
    ])
    return _scaled(ResearchFlow, latency), model


# -- b. replacement conflict -------------------------------------------------------------------


class VenueScout(BranchStep):
    """Finds a venue in one area and replaces ``venue`` — as does its sibling."""

    def get_prompt(self) -> str:
        area = self.parallel_invocation().params["area"]
        return f"Scout '{area}': find an offsite venue in the {area} of town. Answer its name."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"shortlist": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        # The shortlist contribution is compatible, yet nothing publishes: the replacement
        # conflict on `venue` invalidates the whole barrier.
        self.contribute_state("shortlist", str(result))
        self.save_state({"venue": str(result)})
        return str(result)


class OffsitePlanner(LogicStep):
    """Sends two scouts; both replace the venue, so the join refuses to publish."""

    async def run_logic(self) -> Routable:
        try:
            await self.run_steps([RunStepRequest(VenueScout, key=area, params={"area": area},
                                                 user_message="Find a venue")
                                  for area in ("north", "south")])
        except ParallelStateConflictError as exc:
            writers = exc.extra.get("provenance", [])
            target = f"{exc.extra.get('step')}.{exc.extra.get('field')}"
            named = " and ".join(f"{w['key']} (branch {w['path']}, {w['value']!r})"
                                 for w in writers)
            self.save_state({"conflict": {"field": target,
                                          "branches": [w["key"] for w in writers]}})
            return (f"Conflict: {named} both replaced {target}, so nothing was published. "
                    "Pick one venue, or collect them through a channel.")
        self.save_state({"conflict": None})
        return "The scouts agreed on a venue."


class ConflictFlow(DemoFlow):
    """Two branches replace the same field: the barrier is invalidated and reported."""

    def define_steps(self) -> list[Step]:
        return [OffsitePlanner(self), VenueScout(self)]


def conflict_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[ConflictFlow], ScriptedModel]:
    """:class:`ConflictFlow` at time unit ``latency``, with its model."""
    model = ScriptedModel([
        Rule(step="VenueScout", prompt=r"^Scout 'north'", latency=latency, text="Lakeside Lodge"),
        Rule(step="VenueScout", latency=3 * latency, text="Riverside Hall"),
    ])
    return _scaled(ConflictFlow, latency), model


# -- b2. invalid shared mutation ---------------------------------------------------------------


class Auditor(BranchStep):
    """Checks one expense category; the meals auditor also approves the whole report,
    which is its caller's state, not its own."""

    def get_prompt(self) -> str:
        return f"Auditor '{self.parallel_invocation().key}': total the expenses. Answer the sum."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"totals": StepChannels.keyed_by_branch()}

    async def on_response(self, result: Any) -> Routable:
        # The contribution is valid; the write to ExpenseDesk below is what invalidates the
        # barrier (a branch may write only its own step's state).
        self.contribute_state("totals", str(result))
        if self.parallel_invocation().key == "meals":
            self.flow.save_step_state("ExpenseDesk", {"approved": True})
        return str(result)


class ExpenseDesk(LogicStep):
    """Sends two auditors over the report; one of them writes the desk's own state."""

    async def run_logic(self) -> Routable:
        self.save_state({"approved": False})
        try:
            await self.run_steps([RunStepRequest(Auditor, key=key, user_message="Total it")
                                  for key in ("travel", "meals")])
        except ParallelMutationError as exc:
            who = [p["key"] for p in exc.extra.get("provenance", [])]
            self.save_state({"mutation": {"branches": who}})
            return (f"Invalid shared mutation: {', '.join(who)} wrote ExpenseDesk's state "
                    "from inside a branch, so nothing was published.")
        return "The auditors finished."


class ExpenseFlow(DemoFlow):
    """A branch writes its caller's state: the barrier is invalidated and reported."""

    def define_steps(self) -> list[Step]:
        return [ExpenseDesk(self), Auditor(self)]


def expense_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[ExpenseFlow], ScriptedModel]:
    """:class:`ExpenseFlow` at time unit ``latency``, with its model."""
    model = ScriptedModel([
        Rule(step="Auditor", prompt=r"^Auditor 'travel'", latency=latency, text="$1,240"),
        Rule(step="Auditor", latency=3 * latency, text="$310"),
    ])
    return _scaled(ExpenseFlow, latency), model


# -- b3. reducer failure ------------------------------------------------------------------------

BUS_SEATS = 10


def _board(seats: Any, group: Any, meta: Any) -> Any:
    """Seats taken on the bus: refuses to overbook."""
    total = seats + group
    if total > BUS_SEATS:
        raise ValueError(f"{total} seats booked, the bus has {BUS_SEATS}")
    return total


class SeatBooker(BranchStep):
    """Books seats for one team; each team fits, both teams together do not."""

    def get_prompt(self) -> str:
        return f"Team '{self.parallel_invocation().key}': how many seats do you need?"

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"seats": StepChannels.reduced(_board, 0), "teams": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        # Both contributions combine fine in the branch's own view; only the join, which
        # reduces every team's seats in request-path order, overflows the bus.
        self.contribute_state("teams", self.parallel_invocation().key)
        self.contribute_state("seats", int(str(result)))
        return str(result)


class BusDesk(LogicStep):
    """Holds two seats for the organisers, then lets two teams book the rest in parallel."""

    async def run_logic(self) -> Routable:
        self.flow.save_step_state("SeatBooker", {"seats": 2})
        try:
            await self.run_steps([RunStepRequest(SeatBooker, key=key, user_message="Seats?")
                                  for key in ("design", "sales")])
        except ParallelReducerError as exc:
            self.save_state({"overbooked": True})
            return f"Reducer failed: {exc.message}. Nothing was published."
        return "Everyone has a seat."


class BusFlow(DemoFlow):
    """Two teams book seats through a custom reducer that refuses to overbook the bus."""

    def define_steps(self) -> list[Step]:
        return [BusDesk(self), SeatBooker(self)]


def bus_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[BusFlow], ScriptedModel]:
    """:class:`BusFlow` at time unit ``latency``, with its model."""
    model = ScriptedModel([
        Rule(step="SeatBooker", prompt=r"^Team 'design'", latency=latency, text="6"),
        Rule(step="SeatBooker", latency=3 * latency, text="5"),
    ])
    return _scaled(BusFlow, latency), model


# -- c. atomic batch with a failure ------------------------------------------------------------


class SoldOutError(Exception):
    """A vendor has nothing left: an ordinary error, so its branch is just rejected."""


class Reservation(BranchStep):
    """Holds one part of a trip (a repeated step: flight, hotel, car)."""

    def get_prompt(self) -> str:
        return f"Reservation '{self.parallel_invocation().key}': hold it for the trip."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"holds": StepChannels.keyed_by_branch()}

    async def on_response(self, result: Any) -> Routable:
        text = str(result)
        if text.startswith("SOLD OUT"):
            raise SoldOutError(text)
        self.contribute_state("holds", text)
        return text


class TripDesk(LogicStep):
    """Books flight, hotel and car all or nothing (``atomic``)."""

    async def run_logic(self) -> Routable:
        batch = await self.run_steps(
            [RunStepRequest(Reservation, key=item, user_message=f"Hold the {item}")
             for item in ("flight", "hotel", "car")],
            failure_policy="atomic",
        )
        rejected = [b.key for b in batch.rejected]
        held = [b.key for b in batch.fulfilled]
        self.save_state({"booked": not rejected, "rejected": rejected, "discarded": held})
        if not rejected:
            return "Flight, hotel and car are held."
        reasons = "; ".join(f"{b.key}: {b.error}" for b in batch.rejected)
        return (f"Nothing was booked: {reasons}. The {' and '.join(held)} holds were "
                "discarded because the batch is atomic.")


class AtomicFlow(DemoFlow):
    """An atomic batch of three where one branch fails: nothing publishes."""

    def define_steps(self) -> list[Step]:
        return [TripDesk(self), Reservation(self)]


def atomic_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[AtomicFlow], ScriptedModel]:
    """:class:`AtomicFlow` at time unit ``latency``, with its model."""
    model = ScriptedModel([
        Rule(step="Reservation", prompt=r"^Reservation 'flight'", latency=latency,
             text="HELD flight PDX-SFO, $240"),
        Rule(step="Reservation", prompt=r"^Reservation 'car'", latency=3 * latency,
             text="SOLD OUT: no rental cars on those dates"),
        Rule(step="Reservation", latency=5 * latency, text="HELD hotel Bayview Inn, $690"),
    ])
    return _scaled(AtomicFlow, latency), model


# -- d. cancellation ---------------------------------------------------------------------------

PAGES = 5
PAGE_UNITS = 6
DEADLINE_UNITS = 10  # in the middle of the cooperative crawler's second page (7u..13u)


class Crawler(BranchStep):
    """Cooperative: asks which pages to scan, then checks the cancel token between pages."""

    def get_prompt(self) -> str:
        return f"Crawler '{self.parallel_invocation().key}': list the vendor's price pages."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {name: StepChannels.keyed_by_branch() for name in ("progress", "scanned")}

    async def run(self, user_message: str | None = None) -> Any:
        await super().run(user_message)  # the model's page list (one call)
        unit = cast(DemoFlow, self.flow).unit
        cancel = self.parallel_invocation().cancel
        pages = 0
        while pages < PAGES and not cancel.cancelled:
            await anyio.sleep(PAGE_UNITS * unit)  # fetching one page
            pages += 1
            self.contribute_state("progress", pages)
        result = {"pages": pages, "complete": pages == PAGES}
        self.contribute_state("scanned", result)
        return result


class LegacyFeed(LogicStep, BranchStep):
    """Not cooperative: a slow legacy call that never looks at the cancel token."""

    async def run_logic(self) -> Routable:
        self.save_state({"requested": "legacy price feed"})
        await anyio.sleep(40 * cast(DemoFlow, self.flow).unit)
        return "legacy prices"


class PriceWatch(LogicStep):
    """Scans four vendors, two at a time, until a deadline cancels the barrier."""

    async def run_logic(self) -> Routable:
        unit = cast(DemoFlow, self.flow).unit
        token = CancelToken()

        async def deadline() -> None:
            await anyio.sleep(DEADLINE_UNITS * unit)
            token.cancel("deadline reached")

        async with anyio.create_task_group() as timers:
            timers.start_soon(deadline)
            batch = await self.run_steps(
                [RunStepRequest(LegacyFeed, key=key) if key == "legacy" else
                 RunStepRequest(Crawler, key=key, user_message="List pages")
                 for key in ("north", "legacy", "south", "east")],
                max_concurrency=2, cancel=token)
            timers.cancel_scope.cancel()
        # A BranchResult does not say whether the branch ever started; its error's text does.
        never = [b.key for b in batch.rejected if "before it started" in str(b.error)]
        late = [b.key for b in batch.rejected if b.key not in never]
        self.save_state({"cancelled": batch.cancelled, "published": [b.key for b in
                         batch.fulfilled], "lost": late, "never_started": never})
        partial = "; ".join(f"{b.key} scanned {b.output['pages']} of {PAGES} pages"
                            for b in batch.fulfilled)
        return (f"Deadline reached: {partial}. {', '.join(late)} ignored the cancel and lost "
                f"its publication rights after the grace period; {', '.join(never)} never "
                "started.")


class CancelFlow(DemoFlow):
    """A deadline cancels a bounded barrier: cooperative, stubborn and queued branches."""

    def define_steps(self) -> list[Step]:
        return [PriceWatch(self), Crawler(self), LegacyFeed(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        # 6u of grace: the cooperative crawler stops at 13u, the legacy call is cut at 16u.
        return ParallelConfig(cancellation_grace=6 * self.unit)


def cancel_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[CancelFlow], ScriptedModel]:
    """:class:`CancelFlow` at time unit ``latency``, with its model."""
    model = ScriptedModel([
        Rule(step="Crawler", latency=latency, text=f"pages: {', '.join(map(str, range(1, 6)))}"),
    ])
    return _scaled(CancelFlow, latency), model


# -- e. A/B timing ------------------------------------------------------------------------------

STAGE_UNITS = {"A1": 1, "A2": 1, "B1": 10, "B2": 1}  # the seed's durations


class Stage(BranchStep):
    """One stage of work (a repeated step keyed A1, A2, B1, B2): one model call."""

    def get_prompt(self) -> str:
        return f"Run stage {self.parallel_invocation().key}."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"outputs": StepChannels.keyed_by_branch()}

    async def on_response(self, result: Any) -> Routable:
        # The stopwatch is diagnostic, not application state: it lives on the turn's flow
        # object, so it never takes part in a join.
        cast(TimingFlow, self.flow).finish_order.append(self.parallel_invocation().key)
        self.contribute_state("outputs", str(result))
        return str(result)


class Worker(LogicStep, BranchStep):
    """A coordinator worker: runs its stages one after another, each in its own barrier."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"completed": StepChannels.keyed_by_branch()}

    async def run_logic(self) -> Routable:
        outputs = []
        for stage in self.parallel_invocation().params["stages"]:
            batch = await self.run_steps([RunStepRequest(Stage, key=stage, user_message=stage)])
            outputs.append(batch.branches[0].output)
        self.contribute_state("completed", outputs)
        return outputs  # type: ignore[return-value]  # a branch's output is any JSON


class Stopwatch(LogicStep):
    """Runs A1→A2 and B1→B2 pipelined in two workers, or batched stage by stage."""

    async def run_logic(self) -> Routable:
        last = self.get_last_message()
        mode = "batched" if last is not None and "batch" in last.content.lower() else "pipelined"
        if mode == "pipelined":  # one worker per sequence: A1→A2 and B1→B2
            workers = {"A": ["A1", "A2"], "B": ["B1", "B2"]}
            await self.run_steps([RunStepRequest(Worker, key=key, params={"stages": stages})
                                  for key, stages in workers.items()])
        else:  # one barrier per stage: A1 with B1, then A2 with B2
            for pair in (("A1", "B1"), ("A2", "B2")):
                await self.run_steps([RunStepRequest(Stage, key=k, user_message=k) for k in pair])
        order = cast(TimingFlow, self.flow).finish_order
        # Only A2 against B1 is reported: they finish at least a unit apart in both modes,
        # whereas batched A2 and B2 take equally long and may finish in either order.
        waited = order.index("A2") > order.index("B1")
        self.save_state({"mode": mode, "a2_waited_for_b1": {mode: waited}})
        return mode.capitalize() + (": A2 finished after B1 — A's second stage waited for B's "
                                    "slow first stage at the barrier." if waited else
                                    ": A2 finished before B1 — worker A did not wait for B.")


class TimingFlow(DemoFlow):
    """The seed's A/B example: per-worker sequences versus one barrier per stage."""

    def __init__(self) -> None:
        super().__init__()
        self.finish_order: list[str] = []  # stage keys as they finished, this turn

    def define_steps(self) -> list[Step]:
        return [Stopwatch(self), Worker(self), Stage(self)]

    def example_messages(self) -> list[str]:
        return ["pipelined", "batched"]


def timing_flow(latency: float = DEFAULT_LATENCY) -> tuple[type[TimingFlow], ScriptedModel]:
    """:class:`TimingFlow` at time unit ``latency``, with its model."""
    model = ScriptedModel([
        Rule(step="Stage", last=rf"^{key}$", latency=units * latency, text=f"{key} done")
        for key, units in STAGE_UNITS.items()
    ])
    return _scaled(TimingFlow, latency), model


def demo_flows(latency: float = DEFAULT_LATENCY) -> list[tuple[type[Flow], ScriptedModel | None]]:
    """Every demo flow with its scripted model: the hotel flow, then the parallel demos."""
    from picoflow_web.demos.coordinator import coordinator_flows

    return [(HotelFlow, hotel_model(latency=latency)), research_flow(latency),
            conflict_flow(latency), expense_flow(latency), bus_flow(latency),
            atomic_flow(latency), cancel_flow(latency),
            timing_flow(latency), (FanOutFlow, None),
            *((flow, None) for flow in coordinator_flows(latency))]
