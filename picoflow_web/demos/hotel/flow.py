"""HotelFlow: a hotel booking assistant for the Portland, Oregon area.

Explore → Present → Compare → Terminate, seven tools, every kind of transition:
``capture_choices`` goes to Present with the search results (or stays when nothing is
found), ``search_again`` and ``go_compare`` forward the user's message to another step,
``generate_comparison`` answers directly with a Markdown table, and ``chosen_hotel`` books
and closes the session. The booking backend (:mod:`.backend`) is plain code.
"""

from __future__ import annotations

import os
from datetime import date
from typing import Any

from pydantic import BaseModel, Field

from runtime import (
    Flow,
    Message,
    ModelSelection,
    ScriptedModelError,
    Step,
    TerminateSessionStep,
    Transition,
    direct,
    go,
    stay,
    tool,
)

from .backend import (
    Criteria,
    CriteriaError,
    HotelQuote,
    booking_confirmation,
    comparison_chart,
    format_usd,
    resolve_hotel_choices,
    search_hotels,
)
from .script import REFERENCE_TURNS

NO_HOTEL_FOUND = "No hotel found, please adjust your criteria and try again."
PRESENT_OPENING = "What hotels choice I have"
HOTEL_JSON_SCAFFOLD = (
    '{"checkIn": "YYYY-MM-DD", "checkOut": "YYYY-MM-DD", "roomType": [], "amenities": [], '
    '"maxBudget": null, "minBudget": null, "maxAirportMiles": null, "maxCityCenterMiles": null}'
)
ROLE = (
    "You are the booking assistant of a hotel group, helping guests book a hotel in the "
    "Portland, Oregon area only. Be brief and friendly. If the user wants to stop, call "
    "terminate_session."
)


def last_human_message(step: Step) -> Message | None:
    """The newest human message in the step's memory: what a forward should carry."""
    return next((m for m in reversed(step.get_memory()) if m.type == "human"), None)


def found_quotes(flow: Flow) -> list[HotelQuote]:
    """The search results Present holds."""
    return [HotelQuote.model_validate(q) for q in flow.get_step_state(PresentStep, "hotelFound")
            or []]


def numbered(quotes: list[HotelQuote]) -> str:
    """One line per hotel: position, name, stay total."""
    return "\n".join(
        f"{i}. {q.hotel_name} — total {format_usd(q.total)}" for i, q in enumerate(quotes, 1)
    )


class ExploreStep(Step):
    """Collects the search criteria over several turns, then searches."""

    def current_date(self) -> str:
        """Today for the prompt; pinned by config or env so replays are stable."""
        pinned = self.get_context("config.current_date") or os.environ.get(
            "HOTEL_FLOW_CURRENT_DATE"
        )
        return str(pinned or date.today().isoformat())

    def get_prompt(self) -> str:
        return (
            f"{ROLE}\n\n# Task\nToday is {self.current_date()}. Collect the stay dates, budget, "
            "room type and amenities, one question at a time. When the user asks to search, "
            "call capture_choices with the whole JSON below filled in.\n\n# HOTEL_JSON\n"
            f"{self.get_state('json') or HOTEL_JSON_SCAFFOLD}"
        )

    def use_tools(self) -> list[str]:
        return ["terminate_session"]

    @tool
    async def capture_choices(self, json: str) -> Transition:
        """Search hotels with the complete HotelJSON criteria (a JSON string)."""
        try:
            criteria = Criteria.parse_scaffold(json)
        except CriteriaError as exc:
            return stay(f"The criteria are not valid: {exc}")
        self.save_state({"json": criteria.model_dump_json(by_alias=True)})
        quotes = search_hotels(criteria)
        if not quotes:
            return stay(NO_HOTEL_FOUND)
        found = [q.model_dump(mode="json", by_alias=True) for q in quotes]
        return go(PresentStep).with_state({"hotelFound": found})


class HotelNameArgs(BaseModel):
    """Arguments of chosen_hotel."""

    hotelName: str = Field(description="The hotel's name or its position in the list.")


class SearchAgainArgs(BaseModel):
    """Arguments of search_again."""

    isSearch: bool


class GoCompareArgs(BaseModel):
    """Arguments of go_compare."""

    hotelsToCompare: list[str] = Field(min_length=1, description="Names or list positions.")


class PresentStep(Step):
    """Shows the priced results; books, searches again or goes comparing."""

    async def on_enter(self) -> None:
        self.erase_memory()  # a stale list must never leak into a new presentation

    async def on_crossing(
        self, message: Message | None, prior_step: str | None
    ) -> Message | None:
        from runtime import human_message

        return human_message(self.name, PRESENT_OPENING)

    def get_prompt(self) -> str:
        return (
            f"{ROLE}\n\n# Task\nPresent the hotels found, numbered, with their totals. The "
            "user may book one (chosen_hotel), search again (search_again) or compare some "
            "(go_compare).\n\n# HOTEL_FOUND_INFO\n"
            f"{numbered(found_quotes(self.flow))}"
        )

    def use_tools(self) -> list[str]:
        return ["terminate_session"]

    @tool("chosen_hotel", args=HotelNameArgs)
    async def chosen_hotel(self, args: HotelNameArgs) -> Transition:
        """Book the hotel the user chose."""
        try:
            (quote,) = resolve_hotel_choices(found_quotes(self.flow), [args.hotelName])
        except (CriteriaError, ValueError) as exc:
            return stay(str(exc))
        self.save_state({"hotel": quote.model_dump(mode="json", by_alias=True)})
        number = booking_confirmation(self.flow.session_id, quote.hotel_name)
        return go(TerminateSessionStep).with_prompt(
            f"Tell user hotel is booked with confirmation #:{number}. The hotel is "
            f"{quote.hotel_name}, total {format_usd(quote.total)}. Thank them and say goodbye."
        )

    @tool("search_again", args=SearchAgainArgs)
    async def search_again(self, args: SearchAgainArgs) -> Transition | None:
        """Go back to change the search criteria."""
        if not args.isSearch:
            return None
        transition = go(ExploreStep)
        message = last_human_message(self)
        return transition.with_message(message) if message else transition

    @tool("go_compare", args=GoCompareArgs)
    async def go_compare(self, args: GoCompareArgs) -> Transition:
        """Compare some of the hotels found, one feature at a time."""
        quotes = found_quotes(self.flow)
        try:
            chosen = resolve_hotel_choices(quotes, args.hotelsToCompare)
        except CriteriaError as exc:
            return stay(str(exc))
        self.flow.save_step_state(CompareStep, {"compare_hotel": [q.hotel_name for q in chosen]})
        transition = go(CompareStep).with_state({"available_hotel": [q.hotel_name for q in quotes]})
        message = last_human_message(self)
        return transition.with_message(message) if message else transition


class ComparisonArgs(BaseModel):
    """Arguments of generate_comparison."""

    hotels: list[str] = Field(min_length=1, description="Names or list positions.")
    feature: str = Field(description="price, amenities, roomType or distance.")


class ResumeArgs(BaseModel):
    """Arguments of resume_booking."""

    isResumed: bool


class CompareStep(Step):
    """Compares hotels on one feature at a time; answers directly with a table."""

    async def on_enter(self) -> None:
        self.erase_memory()

    def get_prompt(self) -> str:
        available = self.get_state("available_hotel") or []
        chosen = self.get_state("compare_hotel") or []
        return (
            f"{ROLE}\n\n# Task\nCompare hotels on one feature (price, amenities, roomType, "
            "distance) with generate_comparison. When the user is ready to book, call "
            "resume_booking.\n\n# AvailableHotels\n"
            + "\n".join(f"{i}. {name}" for i, name in enumerate(available, 1))
            + "\n\n# ChosenHotels\n" + "\n".join(chosen)
        )

    def use_tools(self) -> list[str]:
        return ["terminate_session"]

    @tool("generate_comparison", args=ComparisonArgs)
    async def generate_comparison(self, args: ComparisonArgs) -> Transition:
        """Build a comparison table of the given hotels on one feature."""
        try:
            quotes = resolve_hotel_choices(found_quotes(self.flow), args.hotels)
            chart = comparison_chart(quotes, args.feature)
        except (CriteriaError, ValueError) as exc:
            return stay(str(exc))
        names = [q.hotel_name for q in quotes]
        rows: list[Any] = self.get_state("chosen_hotels") or []
        rows.append({"hotels": names, "feature": args.feature})
        self.save_state({"compare_hotel": names, "chosen_hotels": rows})
        return direct(f"{chart}\n\nAnother comparison or ready to book?")

    @tool("resume_booking", args=ResumeArgs)
    async def resume_booking(self, args: ResumeArgs) -> Transition | None:
        """Return to the list of hotels to book one."""
        return go(PresentStep) if args.isResumed else None


class HotelConfig(BaseModel):
    """The config of a booking session."""

    current_date: date | None = Field(
        None, description="Today's date in the prompt (default: the real date).")


def next_scripted_line(flow: Flow) -> str:
    """The reference conversation's next line from where the session stands."""
    step = flow.current_step_name
    if step == "PresentStep":
        if "two beds" not in str(flow.get_step_state(ExploreStep, "json") or ""):
            return "change to a 2 bed rooms, search"
        compared = flow.get_step_state(CompareStep, "chosen_hotels") or []
        return "8" if compared else "compare hotel 2,5,8 on price"
    if step == "CompareStep":
        compared = flow.get_step_state(CompareStep, "chosen_hotels") or []
        later = ["compare on amenities", "compare hotels 2,5 on price", "resume booking"]
        return later[min(max(len(compared) - 1, 0), len(later) - 1)]
    said = {m.content for m in flow.get_memory("hotel-explore") if m.type == "human"}
    reached = [i for i, line in enumerate(REFERENCE_TURNS[:8]) if line in said]
    return REFERENCE_TURNS[min(reached[-1] + 1, 7)] if reached else REFERENCE_TURNS[0]


class HotelFlow(Flow):
    """Hotel booking assistant (Portland, OR): dates, budget, room type and amenities, then
    search, compare and book."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="openai", name="gpt-4o", retry_attempts=3)

    def define_steps(self) -> list[Step]:
        return [
            ExploreStep(self).use_memory("hotel-explore").use_model(
                {"provider": "openai", "name": "gpt-5.1", "params": {"reasoning_effort": "low"}}
            ),
            PresentStep(self).use_model(
                {"provider": "openai", "name": "gpt-4o", "params": {"temperature": 0.5}}
            ),
            CompareStep(self).use_model(
                {"provider": "openai", "name": "gpt-5.1", "params": {"reasoning_effort": "low"}}
            ),
            TerminateSessionStep(self).use_memory("end"),
        ]

    def config_schema(self) -> type[BaseModel]:
        return HotelConfig

    def example_messages(self) -> list[str]:
        return list(REFERENCE_TURNS)

    def needs_message(self) -> bool:
        return True

    async def on_model_error(self, error: Exception) -> str | None:
        """Off the script, the scripted demo says what it can do and what to type next; the
        session goes on (a real model's errors still fail the turn)."""
        if not isinstance(error, ScriptedModelError):
            return None
        return (
            "I am the scripted demo of a hotel booking assistant, so I only follow its "
            "reference conversation: I can book a hotel in the Portland, Oregon area — "
            "dates, budget, room type and amenities, then search, compare hotels and book "
            f"one. I have no scripted answer to that. Next in the script: "
            f"\u201c{next_scripted_line(self)}\u201d."
        )
