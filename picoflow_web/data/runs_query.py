"""The runs list's query: text search, sort, time range and session prefix, as the
``GET /api/runs`` parameters say them (``q``, ``sort``, ``since``, ``until``,
``session``), checked here so the API refuses a bad one by name.

Text search looks in the run's message, its reply (the answer, or a failed turn's error),
its flow, and its forks (branch keys and step names: what a user remembers of a fan-out).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import F, Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.utils.dateparse import parse_datetime

from picoflow_web.errors import InputError
from picoflow_web.models import EventRecord, Run

SORTS = {"started_at": "started_at", "flow": "flow", "status": "status",
         "message": "message", "events": "event_count", "branches": "branch_count",
         "duration": "duration"}
"""``sort`` values (``-`` first for descending) and the column each orders by."""
DEFAULT_SORT = "-started_at"
MAX_QUERY = 200


class BadQuery(InputError):
    """A parameter the list cannot use (400 ``bad_parameter``)."""

    error_code = "bad_parameter"


@dataclass(frozen=True)
class RunsQuery:
    """What the list is narrowed to and ordered by (empty: everything, newest first)."""

    text: str = ""
    sort: str = DEFAULT_SORT
    since: datetime | None = None
    until: datetime | None = None
    session_prefix: str = ""

    def apply(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        if self.session_prefix:
            runs = runs.filter(session_id__startswith=self.session_prefix)
        if self.since is not None:
            runs = runs.filter(started_at__gte=self.since)
        if self.until is not None:
            runs = runs.filter(started_at__lte=self.until)
        if self.text:
            forks = (EventRecord.objects.filter(type__in=("barrier.forked", "barrier.requested"))
                     .annotate(text=Cast("payload", TextField()))
                     .filter(text__icontains=self.text).values("run_id"))
            runs = runs.annotate(reply_text=Cast("reply", TextField())).filter(
                Q(message__icontains=self.text) | Q(flow__icontains=self.text)
                | Q(reply_text__icontains=self.text) | Q(id__in=forks))
        column = SORTS[self.sort.removeprefix("-")]
        order = F(column).desc(nulls_last=True) if self.sort.startswith("-") \
            else F(column).asc(nulls_last=True)
        # The id breaks ties, so pages of a sorted list never repeat or skip a run.
        return runs.order_by(order, "-id")


def _when(raw: str | None, name: str) -> datetime | None:
    if not raw:
        return None
    try:
        when = parse_datetime(raw)
    except ValueError:
        when = None
    if when is None:
        raise BadQuery(f"{name} must be an ISO 8601 date and time "
                         "(2026-12-01T09:30:00Z).")
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse(params: dict[str, str]) -> RunsQuery:
    """The query from request parameters; :class:`BadQuery` names a bad one."""
    sort = params.get("sort") or DEFAULT_SORT
    if sort.removeprefix("-") not in SORTS:
        raise BadQuery(f"sort must be one of {', '.join(SORTS)} (with - first for "
                         "descending).")
    text = (params.get("q") or "").strip()
    if len(text) > MAX_QUERY:
        raise BadQuery(f"q must be at most {MAX_QUERY} characters.")
    since, until = _when(params.get("since"), "since"), _when(params.get("until"), "until")
    if since and until and since > until:
        raise BadQuery("since must not be after until.")
    return RunsQuery(text=text, sort=sort, since=since, until=until,
                     session_prefix=(params.get("session") or "").strip())


__all__ = ["DEFAULT_SORT", "SORTS", "BadQuery", "RunsQuery", "parse"]
