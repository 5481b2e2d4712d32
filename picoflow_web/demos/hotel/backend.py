"""Plain-code backend of the hotel booking demo.

Everything the hotel flow needs apart from the model itself lives here: the search criteria
scaffold the model fills in, the fictional hotel catalogue, nightly pricing, the Markdown
comparison chart and the booking confirmation number. Only the standard library and pydantic
are used so the logic can be tested without the runtime or the dashboard.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from datetime import date, timedelta
from importlib import resources
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

RoomType = Literal["one bed", "two beds", "suite"]
Amenity = Literal[
    "freeWifi",
    "parking",
    "pool",
    "fitnessCenter",
    "restaurant",
    "petFriendly",
    "airportShuttle",
    "spa",
    "breakfast",
    "evCharging",
]

ROOM_TYPES: tuple[str, ...] = get_args(RoomType)
AMENITIES: tuple[str, ...] = get_args(Amenity)
CHART_FEATURES: tuple[str, ...] = ("price", "amenities", "roomType", "distance")

# A runaway date range (say a mistyped year) would otherwise produce thousands of prices.
MAX_STAY_DATES = 60

MONTH_FACTORS: dict[int, float] = {
    1: 1.2,
    2: 1.2,
    3: 1.2,
    4: 1.4,
    5: 1.4,
    6: 1.4,
    7: 1.8,
    8: 1.8,
    9: 1.8,
    10: 1.5,
    11: 1.2,
    12: 1.2,
}
# The 2025 US federal holidays, compared on month/day only so the demo needs no calendar
# library and every year behaves the same.
HOLIDAYS: frozenset[tuple[int, int]] = frozenset(
    {
        (1, 1),
        (1, 20),
        (2, 17),
        (5, 26),
        (6, 19),
        (7, 4),
        (9, 1),
        (10, 13),
        (11, 11),
        (11, 27),
        (12, 25),
    }
)
HOLIDAY_FACTOR = 1.2
WEEKEND_FACTOR = 1.15
ROOM_FACTORS: dict[str, float] = {"one bed": 1.0, "two beds": 1.6, "suite": 2.5}


class CriteriaError(ValueError):
    """Search criteria or hotel picks could not be understood.

    The message is written for the model: it is returned verbatim as the tool error so the
    model can correct its call.
    """


class Criteria(BaseModel):
    """The "HotelJSON" scaffold the model fills in to search for hotels.

    Field names are snake_case in Python and camelCase in JSON.
    """

    model_config = ConfigDict(
        populate_by_name=True, serialize_by_alias=True, extra="forbid", frozen=True
    )

    check_in: date = Field(alias="checkIn", description="First night of the stay.")
    check_out: date = Field(
        alias="checkOut", description="Last date priced; the range is inclusive."
    )
    room_type: list[RoomType] = Field(
        default_factory=list,
        alias="roomType",
        description="Acceptable room types; any of them will do. Empty means any room.",
    )
    amenities: list[Amenity] = Field(
        default_factory=list, description="Amenities the hotel must all offer."
    )
    max_budget: float | None = Field(default=None, ge=0, allow_inf_nan=False, alias="maxBudget")
    min_budget: float | None = Field(default=None, ge=0, allow_inf_nan=False, alias="minBudget")
    max_airport_miles: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, alias="maxAirportMiles"
    )
    max_city_center_miles: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, alias="maxCityCenterMiles"
    )

    @field_validator("room_type", "amenities", mode="before")
    @classmethod
    def _wrap_single_value(cls, value: object) -> object:
        # Models often send "suite" where ["suite"] is meant; the intent is unambiguous.
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_ranges(self) -> Criteria:
        if self.check_out < self.check_in:
            raise ValueError(
                f"checkOut ({self.check_out.isoformat()}) must not be before "
                f"checkIn ({self.check_in.isoformat()})"
            )
        dates = (self.check_out - self.check_in).days + 1
        if dates > MAX_STAY_DATES:
            raise ValueError(
                f"the stay covers {dates} dates; at most {MAX_STAY_DATES} are supported"
            )
        if (
            self.min_budget is not None
            and self.max_budget is not None
            and self.min_budget > self.max_budget
        ):
            raise ValueError(
                f"minBudget ({self.min_budget:g}) must not exceed maxBudget ({self.max_budget:g})"
            )
        return self

    @classmethod
    def parse_scaffold(cls, text: str) -> Criteria:
        """Parses the JSON string the model sends with the ``capture_choices`` tool.

        Args:
            text: A JSON object using the camelCase field names. A surrounding Markdown code
                fence is tolerated because models often add one.

        Returns:
            The validated criteria.

        Raises:
            CriteriaError: If the text is not a JSON object or a field is missing or invalid.
                The message lists every problem in plain words.
        """
        body = _strip_code_fence(text)
        try:
            data: Any = json.loads(body)
        except json.JSONDecodeError as exc:
            raise CriteriaError(
                f"The hotel criteria are not valid JSON ({exc.msg} at line {exc.lineno}, "
                f"column {exc.colno}). Send one JSON object such as {_EXAMPLE}."
            ) from None
        if not isinstance(data, dict):
            raise CriteriaError(
                f"The hotel criteria must be a JSON object, not {_json_kind(data)}. "
                f"Send one JSON object such as {_EXAMPLE}."
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "\n".join(f"- {_describe_error(err)}" for err in exc.errors())
            raise CriteriaError(f"The hotel criteria are invalid:\n{problems}") from None


_EXAMPLE = (
    '{"checkIn": "2027-08-01", "checkOut": "2027-08-03", "roomType": ["suite"], '
    '"amenities": ["freeWifi"], "maxBudget": 400, "minBudget": null, '
    '"maxAirportMiles": null, "maxCityCenterMiles": 5}'
)
_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def _strip_code_fence(text: str) -> str:
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group(1).strip() if match else stripped


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null"


def _describe_error(err: Any) -> str:
    """Turns one pydantic error into a line the model can act on."""
    location = ".".join(str(part) for part in err["loc"])
    kind = err["type"]
    if kind == "missing":
        return f"{location}: this field is required"
    if kind == "extra_forbidden":
        allowed = ", ".join(field.alias or name for name, field in Criteria.model_fields.items())
        return f"{location}: unknown field (allowed fields: {allowed})"
    if kind == "literal_error":
        if location.startswith("roomType"):
            choices = ", ".join(f'"{r}"' for r in ROOM_TYPES)
        else:
            choices = ", ".join(f'"{a}"' for a in AMENITIES)
        return f"{location}: {err['input']!r} is not allowed; use one of {choices}"
    message = str(err["msg"]).removeprefix("Value error, ")
    if not location:
        return message
    if kind.startswith("date"):
        return f"{location}: {message} (use the YYYY-MM-DD format)"
    return f"{location}: {message}"


class Nearby(BaseModel):
    """Distances in miles from a hotel to local landmarks."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    airport: float = Field(ge=0)
    city_center: float = Field(ge=0, alias="cityCenter")


class Hotel(BaseModel):
    """One record of the hotel catalogue."""

    model_config = ConfigDict(
        populate_by_name=True, serialize_by_alias=True, extra="forbid", frozen=True
    )

    name: str = Field(min_length=1)
    address: str
    amenities: dict[Amenity, bool] = Field(default_factory=dict)
    level: int = Field(gt=0, description="Base nightly price in USD.")
    room_type: list[RoomType] = Field(alias="roomType", min_length=1)
    nearby: Nearby

    def has_amenity(self, amenity: str) -> bool:
        """Tells whether the hotel offers an amenity.

        Args:
            amenity: A camelCase amenity key such as ``"freeWifi"``.

        Returns:
            True only if the catalogue lists the amenity as available.
        """
        # Any name may be asked (a model's guess); one that is no Amenity is simply absent.
        return self.amenities.get(amenity, False) is True  # type: ignore[call-overload]


class HotelQuote(BaseModel):
    """Nightly prices of one hotel for the requested stay."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, frozen=True)

    hotel_name: str = Field(alias="hotelName")
    prices: list[float] = Field(description="One unrounded nightly price per date.")
    total: float
    dates: list[date]


@functools.cache
def _catalog_records() -> tuple[Hotel, ...]:
    text = resources.files(__package__).joinpath("catalog.json").read_text(encoding="utf-8")
    return tuple(Hotel.model_validate(record) for record in json.loads(text))


def load_catalog() -> list[Hotel]:
    """Loads the fictional hotel catalogue shipped with the demo.

    The file is parsed once; each call returns a fresh list so callers cannot alter the cache.

    Returns:
        The hotels in catalogue order.
    """
    return list(_catalog_records())


def stay_dates(check_in: date, check_out: date) -> list[date]:
    """Lists every date from check-in to check-out, both included.

    Args:
        check_in: First date.
        check_out: Last date.

    Returns:
        The dates in order; empty if ``check_out`` is before ``check_in``.
    """
    return [check_in + timedelta(days=n) for n in range((check_out - check_in).days + 1)]


def nightly_price(level: float, day: date, room_type: str | None = None) -> float:
    """Prices one night, without rounding.

    Args:
        level: The hotel's base nightly price in USD.
        day: The date being priced.
        room_type: The room type priced, or None for the base room.

    Returns:
        level * month factor * holiday factor * room factor * weekend factor.
    """
    price = level * MONTH_FACTORS[day.month]
    if (day.month, day.day) in HOLIDAYS:
        price *= HOLIDAY_FACTOR
    if room_type is not None:
        price *= ROOM_FACTORS[room_type]
    if day.weekday() >= 5:
        price *= WEEKEND_FACTOR
    return price


def _matches(hotel: Hotel, criteria: Criteria) -> bool:
    if not all(hotel.has_amenity(a) for a in criteria.amenities):
        return False
    if criteria.room_type and not set(criteria.room_type) & set(hotel.room_type):
        return False
    if (
        criteria.max_airport_miles is not None
        and not hotel.nearby.airport < criteria.max_airport_miles
    ):
        return False
    return (
        criteria.max_city_center_miles is None
        or hotel.nearby.city_center < criteria.max_city_center_miles
    )


def search_hotels(criteria: Criteria, catalog: Sequence[Hotel] | None = None) -> list[HotelQuote]:
    """Finds the hotels matching the criteria and prices the stay at each.

    Args:
        criteria: What the guest asked for.
        catalog: Hotels to search; the shipped catalogue when None.

    Returns:
        One quote per matching hotel, in catalogue order. A hotel must offer every requested
        amenity and at least one requested room type, lie strictly closer than the distance
        limits, and have every nightly price within the budget.
    """
    hotels = load_catalog() if catalog is None else catalog
    dates = stay_dates(criteria.check_in, criteria.check_out)
    # Only one room is booked, so the guest's first preference sets the price.
    room = criteria.room_type[0] if criteria.room_type else None
    quotes: list[HotelQuote] = []
    for hotel in hotels:
        if not _matches(hotel, criteria):
            continue
        prices = [nightly_price(hotel.level, day, room) for day in dates]
        if criteria.max_budget is not None and max(prices) > criteria.max_budget:
            continue
        if criteria.min_budget is not None and min(prices) < criteria.min_budget:
            continue
        quotes.append(
            HotelQuote(hotel_name=hotel.name, prices=prices, total=sum(prices), dates=dates)
        )
    return quotes


def escape_cell(text: str) -> str:
    """Makes text safe inside a Markdown table cell.

    Args:
        text: Raw cell text.

    Returns:
        The text with backslashes and pipes escaped and line breaks flattened.
    """
    flat = " ".join(text.split())
    return flat.replace("\\", "\\\\").replace("|", "\\|")


def format_usd(amount: float) -> str:
    """Formats a price for display, e.g. ``$593.38 USD``.

    Args:
        amount: Unrounded amount in USD.

    Returns:
        The amount rounded to cents with a dollar sign and currency code.
    """
    return f"${amount:,.2f} USD"


def _table(rows: list[list[str]]) -> str:
    header, *body = rows
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    lines.extend("| " + " | ".join(row) + " |" for row in body)
    return "\n".join(lines)


def _tick(flag: bool) -> str:
    return "✅" if flag else "❌"


def comparison_chart(
    quotes: Sequence[HotelQuote], feature: str, catalog: Sequence[Hotel] | None = None
) -> str:
    """Builds a Markdown table comparing hotels on one feature.

    Args:
        quotes: The hotels to compare, one column each, in this order.
        feature: One of ``"price"``, ``"amenities"``, ``"roomType"`` or ``"distance"``.
        catalog: Catalogue holding the quoted hotels; the shipped catalogue when None.

    Returns:
        A table whose first column is "Features" and whose other columns are "Hotel 1" to
        "Hotel n"; the first row names the hotels.

    Raises:
        ValueError: If the feature is unknown, no hotel is given, or a quoted hotel is not in
            the catalogue.
    """
    if feature not in CHART_FEATURES:
        allowed = ", ".join(f'"{f}"' for f in CHART_FEATURES)
        raise ValueError(f"Unknown comparison feature {feature!r}; use one of {allowed}.")
    if not quotes:
        raise ValueError("Choose at least one hotel to compare.")
    header = ["Features", *(f"Hotel {n}" for n in range(1, len(quotes) + 1))]
    rows = [header, ["hotelName", *(escape_cell(q.hotel_name) for q in quotes)]]

    if feature == "price":
        all_dates = sorted({day for q in quotes for day in q.dates})
        by_date = [dict(zip(q.dates, q.prices, strict=True)) for q in quotes]
        for day in all_dates:
            cells = [format_usd(p[day]) if day in p else "—" for p in by_date]
            rows.append([day.isoformat(), *cells])
        rows.append(["total", *(format_usd(q.total) for q in quotes)])
        return _table(rows)

    by_name = {h.name: h for h in (load_catalog() if catalog is None else catalog)}
    missing = [q.hotel_name for q in quotes if q.hotel_name not in by_name]
    if missing:
        raise ValueError(f"Hotels not in the catalogue: {', '.join(missing)}.")
    hotels = [by_name[q.hotel_name] for q in quotes]

    if feature == "amenities":
        # Canonical order keeps charts stable whichever hotels are compared.
        for amenity in (a for a in AMENITIES if any(h.has_amenity(a) for h in hotels)):
            rows.append([amenity, *(_tick(h.has_amenity(amenity)) for h in hotels)])
    elif feature == "roomType":
        for room in (r for r in ROOM_TYPES if any(r in h.room_type for h in hotels)):
            rows.append([room, *(_tick(room in h.room_type) for h in hotels)])
    else:
        rows.append(["airport", *(f"{h.nearby.airport:g} mi" for h in hotels)])
        rows.append(["cityCenter", *(f"{h.nearby.city_center:g} mi" for h in hotels)])
    return _table(rows)


def resolve_hotel_choices(quotes: Sequence[HotelQuote], choices: list[str]) -> list[HotelQuote]:
    """Maps the guest's picks to quotes.

    Args:
        quotes: The search results the guest is choosing from, as numbered to them.
        choices: Each pick is a 1-based position as text (``"2"``) or a hotel name, matched
            exactly but case-insensitively. Repeated picks count once.

    Returns:
        The picked quotes in the order picked.

    Raises:
        CriteriaError: If nothing is picked or a pick matches no hotel.
    """
    if not choices:
        raise CriteriaError("No hotel was chosen; pick hotels by number or by name.")
    by_name = {q.hotel_name.casefold(): q for q in quotes}
    picked: list[HotelQuote] = []
    for choice in choices:
        pick = str(choice).strip()
        if pick.isdecimal():
            position = int(pick)
            if not 1 <= position <= len(quotes):
                raise CriteriaError(
                    f"There is no hotel number {pick}; choose a number from 1 to {len(quotes)}."
                    if quotes
                    else f"There is no hotel number {pick}; the last search found no hotels."
                )
            quote = quotes[position - 1]
        else:
            found = by_name.get(pick.casefold())
            if found is None:
                raise CriteriaError(
                    f"No hotel named {pick!r} is in the search results; pick one by number "
                    "or use its exact name."
                )
            quote = found
        if quote not in picked:
            picked.append(quote)
    return picked


def booking_confirmation(session_id: str, hotel_name: str) -> str:
    """Derives the confirmation number of a booking.

    It depends only on its inputs so replaying a session yields the same number.

    Args:
        session_id: The flow session making the booking.
        hotel_name: The hotel booked.

    Returns:
        A six-digit number as text, never starting with 0.
    """
    # The NUL separator keeps ("ab", "c") and ("a", "bc") apart.
    digest = hashlib.sha256(f"{session_id}\0{hotel_name}".encode()).digest()
    return str(100_000 + int.from_bytes(digest[:8], "big") % 900_000)
