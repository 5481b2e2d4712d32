"""Reads of the web app (``<entity>_<action>``): runs, events, sessions, API tokens.

Pages, the JSON API and the websocket consumers read the database only through these;
writes are in :mod:`picoflow_web.services`. All are async: the API and the consumers run
on the event loop, and the pages are async views too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from picoflow_web.models import ApiToken, EventRecord, Run, StoredSession

EVENT_PAGE = 5_000
"""Most events one HTTP page or one websocket replay message carries."""


async def run_list(
    *, flow: str | None = None, status: str | None = None, session_id: str | None = None,
    has_conflicts: bool | None = None, limit: int = 200,
) -> list[dict[str, Any]]:
    """Run summaries, newest first, filtered."""
    runs = Run.objects.all()
    if flow:
        runs = runs.filter(flow=flow)
    if status:
        runs = runs.filter(status=status)
    if session_id:
        runs = runs.filter(session_id=session_id)
    if has_conflicts is not None:
        runs = runs.filter(has_conflicts=has_conflicts)
    return [run.summary() async for run in runs[: max(1, min(limit, 1000))]]


async def run_get(run_id: str) -> Run | None:
    """One run, or None."""
    return await Run.objects.filter(id=run_id).afirst()


async def run_events_after(run_id: str, after: int = -1,
                           limit: int = EVENT_PAGE) -> list[dict[str, Any]]:
    """Stored events of a run with ``seq > after``, in order, at most ``limit``."""
    rows = EventRecord.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")
    return [payload async for payload in rows.values_list("payload", flat=True)[:limit]]


@dataclass(frozen=True)
class SessionWithRuns:
    """A stored session and its runs (turns), oldest first."""

    session: StoredSession
    runs: list[Run]


async def session_with_runs_get(session_id: str) -> SessionWithRuns | None:
    """A session and its runs as rows (the session page), or None."""
    session = await StoredSession.objects.filter(id=session_id).afirst()
    if session is None:
        return None
    runs = Run.objects.filter(session_id=session_id).order_by("started_at")
    return SessionWithRuns(session, [run async for run in runs])


async def session_get(session_id: str) -> dict[str, Any] | None:
    """A session's document and its run summaries as JSON (the API), or None."""
    found = await session_with_runs_get(session_id)
    if found is None:
        return None
    row = found.session
    return {"id": row.id, "flow": row.flow, "revision": row.revision,
            "run_status": row.run_status, "doc": row.doc,
            "runs": [run.summary() for run in found.runs]}


async def session_list(limit: int = 200) -> list[dict[str, Any]]:
    """Recently updated sessions first (id, flow, status, revision)."""
    rows = StoredSession.objects.order_by("-updated").values(
        "id", "flow", "run_status", "revision")[:limit]
    return [row async for row in rows]


async def api_token_user(raw: str) -> tuple[AbstractBaseUser, frozenset[str]] | None:
    """The active user a raw bearer token belongs to, and the token's scopes; or None."""
    token = await ApiToken.objects.select_related("user").filter(
        digest=ApiToken.hash(raw)).afirst()
    if token is None or not token.user.is_active:
        return None
    return token.user, token.scope_set()
