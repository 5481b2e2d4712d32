"""The scripted model that plays HotelFlow's 14-turn reference conversation.

The conversation (current date pinned to 2027-07-15): Hi → yes → 8/1/2027 to 8/8/2027 →
max 700 → suite → free wifi, parking → none → search (Present) → "change to a 2 bed rooms,
search" (Present → Explore → Present in one turn) → "compare hotel 2,5,8 on price"
(Present → Compare, a direct table) → "compare on amenities" → "compare hotels 2,5 on
price" → "resume booking" (Compare → Present) → "8" (booked; the session completes).

Answers that depend on data read it from the request's system prompt, as a real model
would, so the script exercises the prompts as well as the routing.
"""

from __future__ import annotations

import json
import re

from runtime import ModelRequest, Rule, ScriptedModel

CURRENT_DATE = "2027-07-15"

REFERENCE_TURNS: tuple[str, ...] = (
    "Hi",
    "yes",
    "8/1/2027 to 8/8/2027",
    "max 700",
    "suite",
    "free wifi, parking",
    "none",
    "search",
    "change to a 2 bed rooms, search",
    "compare hotel 2,5,8 on price",
    "compare on amenities",
    "compare hotels 2,5 on price",
    "resume booking",
    "8",
)
"""What the user types, turn by turn."""


def criteria_json(room_type: str) -> str:
    """The HotelJSON the model fills in for the reference conversation."""
    return json.dumps({
        "checkIn": "2027-08-01", "checkOut": "2027-08-08", "roomType": [room_type],
        "amenities": ["freeWifi", "parking"], "maxBudget": 700, "minBudget": None,
        "maxAirportMiles": None, "maxCityCenterMiles": None,
    })


def _section(prompt: str, heading: str) -> list[str]:
    match = re.search(rf"# {heading}\n(.*?)(?:\n# |\Z)", prompt, re.DOTALL)
    return [line for line in (match.group(1).splitlines() if match else []) if line.strip()]


def present_hotels(request: ModelRequest) -> str:
    """Read the numbered list from Present's prompt and offer it."""
    lines = _section(request.system_prompt, "HOTEL_FOUND_INFO")
    return (
        f"I found {len(lines)} hotels for your stay:\n\n" + "\n".join(lines)
        + "\n\nWould you like to book one, compare some, or search again?"
    )


def closing(request: ModelRequest) -> str:
    """Read the confirmation number the booking left in the closing prompt."""
    match = re.search(r"confirmation #:(\d{6})\. The hotel is (.+?), total", request.system_prompt)
    if match is None:
        return "Thank you for choosing us. Goodbye!"
    return (
        f"Your stay at {match.group(2)} is booked. Your confirmation number is "
        f"{match.group(1)}. Thank you, and have a great trip!"
    )


def hotel_rules(*, latency: float | None = None) -> list[Rule]:
    """The rules of the reference conversation, in match order."""
    explore, present, compare = "ExploreStep", "PresentStep", "CompareStep"
    return [
        Rule(step=explore, last=r"^Hi$", latency=latency,
             text="Hello! I can book a hotel for you in the Portland area. Shall we start?"),
        Rule(step=explore, last=r"^yes$", latency=latency,
             text="Great. What are your check-in and check-out dates?"),
        Rule(step=explore, last=r"^8/1/2027 to 8/8/2027$", latency=latency,
             text="August 1 to August 8, 2027. What is your maximum nightly budget?"),
        Rule(step=explore, last=r"^max 700$", latency=latency,
             text="Up to $700 a night. Which room type: one bed, two beds or a suite?"),
        Rule(step=explore, last=r"^suite$", latency=latency,
             text="A suite. Any amenities you need, such as free wifi, parking or a pool?"),
        Rule(step=explore, last=r"^free wifi, parking$", latency=latency,
             text="Free wifi and parking. Anything else?"),
        Rule(step=explore, last=r"^none$", latency=latency,
             text="A suite from August 1 to 8, 2027, up to $700 a night, with free wifi and "
                  "parking. Shall I search?"),
        Rule(step=explore, last=r"^search$", latency=latency,
             tools=[("capture_choices", {"json": criteria_json("suite")})]),
        Rule(step=explore, last=r"2 bed rooms", latency=latency,
             tools=[("capture_choices", {"json": criteria_json("two beds")})]),
        Rule(step=explore, last_type="tool", last=r"^No hotel found", latency=latency,
             text="I could not find a hotel with those criteria. What would you like to change?"),
        Rule(step=present, last=r"^What hotels choice I have$", latency=latency,
             respond=present_hotels),
        Rule(step=present, last=r"2 bed rooms", latency=latency,
             tools=[("search_again", {"isSearch": True})]),
        Rule(step=present, last=r"^compare hotel 2,5,8 on price$", latency=latency,
             tools=[("go_compare", {"hotelsToCompare": ["2", "5", "8"]})]),
        Rule(step=present, last=r"^8$", latency=latency,
             tools=[("chosen_hotel", {"hotelName": "8"})]),
        Rule(step=compare, last=r"^compare hotel 2,5,8 on price$", latency=latency,
             tools=[("generate_comparison", {"hotels": ["2", "5", "8"], "feature": "price"})]),
        Rule(step=compare, last=r"^compare on amenities$", latency=latency,
             tools=[("generate_comparison", {"hotels": ["2", "5", "8"],
                                             "feature": "amenities"})]),
        Rule(step=compare, last=r"^compare hotels 2,5 on price$", latency=latency,
             tools=[("generate_comparison", {"hotels": ["2", "5"], "feature": "price"})]),
        Rule(step=compare, last=r"^resume booking$", latency=latency,
             tools=[("resume_booking", {"isResumed": True})]),
        Rule(step="TerminateSessionStep", latency=latency, respond=closing),
    ]


def hotel_model(*, latency: float = 0.0) -> ScriptedModel:
    """A scripted model for HotelFlow; ``latency`` seconds per answer make demos animate."""
    return ScriptedModel(hotel_rules(latency=latency))
