"""Reads of the web app (``<entity>_<action>``): runs, events, sessions, API tokens.

Pages, the JSON API and the websocket consumers read the database only through these;
writes are in :mod:`picoflow_web.execute.services`. All are async: the API and the consumers run
on the event loop, and the pages are async views too.

Readers of runs and sessions take ``projects``, the projects the reader may see
(:meth:`picoflow_web.data.access.Access.readable`; None for all): another project's rows are
not found. It is a required keyword so that no caller forgets it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.utils import timezone

from picoflow_web.data import eventlog
from picoflow_web.data.access import Projects
from picoflow_web.data.runs_query import RunsQuery
from picoflow_web.errors import InputError
from picoflow_web.models import ApiToken, EventRecord, Run, StoredSession

EVENT_PAGE = 5_000
"""Most events one HTTP page or one websocket replay message carries."""


def seq_param(raw: str | None, name: str, default: int) -> int:
    """An integer query parameter (``after``, ``limit``); the HTTP API and the websockets
    refuse the same values the same way (400 ``bad_parameter``)."""
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{name} must be an integer (after and limit must be integers).",
                         error_code="bad_parameter") from None
    if not -1 <= value <= 2**31:
        raise InputError(f"{name} must be between -1 and 2**31.", error_code="bad_parameter")
    return value


async def run_list(
    *, flow: str | None = None, status: str | None = None, session_id: str | None = None,
    has_conflicts: bool | None = None, has_rejected: bool | None = None, limit: int = 200,
    projects: Projects, query: RunsQuery | None = None,
) -> list[dict[str, Any]]:
    """Run summaries, filtered; newest first unless ``query`` sorts otherwise (it also
    searches, bounds the start time and matches session ids by prefix)."""
    runs = _within(Run.objects.all(), projects)
    if flow:
        runs = runs.filter(flow=flow)
    if status:
        runs = runs.filter(status=status)
    if session_id:
        runs = runs.filter(session_id=session_id)
    if has_conflicts is not None:
        runs = runs.filter(has_conflicts=has_conflicts)
    if has_rejected is not None:
        runs = runs.filter(rejected_count__gt=0) if has_rejected else runs.filter(
            rejected_count=0)
    runs = (query or RunsQuery()).apply(runs)
    return [run.summary() async for run in runs[: max(1, min(limit, 1000))]]


def _within(rows: QuerySet[Any], projects: Projects) -> QuerySet[Any]:
    return rows if projects is None else rows.filter(project_id__in=projects)


async def run_get(run_id: str, *, projects: Projects) -> Run | None:
    """One run, or None (also when it is another project's)."""
    return await _within(Run.objects.filter(id=run_id), projects).afirst()


async def run_generation(run_id: str) -> int:
    """The run's :attr:`~picoflow_web.models.Run.generation` (0 when it is gone): read after
    a run's events, it names the record they were read from, since a rebuild replaces the
    events and counts the generation in one transaction."""
    found = await Run.objects.filter(id=run_id).values_list("generation", flat=True).afirst()
    return found or 0


async def run_events_after(run_id: str, after: int = -1,
                           limit: int = EVENT_PAGE) -> list[dict[str, Any]]:
    """Stored events of a run with ``seq > after``, in order, at most ``limit``."""
    rows = EventRecord.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")
    return [payload async for payload in rows.values_list("payload", flat=True)[:limit]]


async def run_event_texts_after(run_id: str, after: int = -1, limit: int = EVENT_PAGE, *,
                                upto: int | None = None,
                                types: Collection[str] | None = None) -> list[tuple[int, str]]:
    """As :func:`run_events_after`, as stored: ``(seq, JSON text)`` pairs (``seq <=
    upto`` when given; only of the event ``types`` when given), for whoever only passes
    them on or reads a few kinds."""
    return await sync_to_async(eventlog.read_texts)(run_id, after, limit, upto, types=types)


@dataclass(frozen=True)
class SessionWithRuns:
    """A stored session and its runs (turns), oldest first."""

    session: StoredSession
    runs: list[Run]


async def session_with_runs_get(session_id: str, *, projects: Projects
                                ) -> SessionWithRuns | None:
    """A session and its runs as rows (the session page), or None."""
    session = await _within(StoredSession.objects.filter(id=session_id), projects).afirst()
    if session is None:
        return None
    runs = Run.objects.filter(session_id=session_id, project_id=session.project_id
                              ).order_by("started_at")
    return SessionWithRuns(session, [run async for run in runs])


async def session_get(session_id: str, *, projects: Projects) -> dict[str, Any] | None:
    """A session's document and its run summaries as JSON (the API), or None."""
    found = await session_with_runs_get(session_id, projects=projects)
    if found is None:
        return None
    row = found.session
    return {"id": row.id, "flow": row.flow, "project": row.project_id, "revision": row.revision,
            "run_status": row.run_status, "doc": row.doc,
            "runs": [run.summary() for run in found.runs]}


async def session_list(limit: int = 200, *, projects: Projects) -> list[dict[str, Any]]:
    """Recently updated sessions first (id, flow, status, revision)."""
    rows = _within(StoredSession.objects.order_by("-updated"), projects).values(
        "id", "flow", "run_status", "revision")[:limit]
    return [row async for row in rows]


def session_state(run_status: str, last_run: str | None) -> str:
    """What the start form's session picker says of a session.

    The document's ``run_status`` is the flow's (``running`` until the flow completes,
    across any number of turns), not whether a turn is executing now; only the session's
    latest run says that, and how its last turn ended."""
    if last_run in (Run.Status.QUEUED, Run.Status.RUNNING):
        return "turn running"
    if run_status in ("completed", "aborted"):
        return run_status
    if last_run == Run.Status.FAILED:
        return "last turn failed"
    if last_run == Run.Status.INTERRUPTED:
        return "last turn interrupted"
    if last_run == Run.Status.CANCELLED:
        return "last turn stopped"
    return "open"


async def session_choices(limit: int, *, projects: Projects) -> list[dict[str, Any]]:
    """Recently updated sessions first, each with its :func:`session_state`, for the start
    form (id, flow, state)."""
    sessions = await session_list(limit=limit, projects=projects)
    ids = [row["id"] for row in sessions]
    latest: dict[str, str] = {}
    runs = _within(Run.objects.filter(session_id__in=ids), projects).order_by(
        "session_id", "-started_at").values("session_id", "status")
    async for run in runs:
        latest.setdefault(run["session_id"], run["status"])
    return [{"id": row["id"], "flow": row["flow"],
             "state": session_state(row["run_status"], latest.get(row["id"]))}
            for row in sessions]


async def session_project(session_id: str) -> str | None:
    """The project a session id belongs to — its stored document's, else that of a run
    that names it (a first turn still queued) — or None for an id nobody uses."""
    owner = await StoredSession.objects.filter(id=session_id).values_list(
        "project_id", flat=True).afirst()
    if owner is None:
        owner = await Run.objects.filter(session_id=session_id).order_by(
            "started_at").values_list("project_id", flat=True).afirst()
    return owner


async def api_token_get(raw: str) -> ApiToken | None:
    """The working token a raw bearer token is (its user loaded), or None: unknown,
    revoked, expired, or its user deactivated or with a new password since. A token found
    unusable for a lasting reason is marked revoked, so listings say so."""
    token = await ApiToken.objects.select_related("user").filter(
        digest=ApiToken.hash(raw)).afirst()
    if token is None:
        return None
    why = token.refusal()
    if why is None:
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            # Coarse on purpose: one write a minute per token, not one per request.
            await ApiToken.objects.filter(pk=token.pk).aupdate(last_used_at=now)
        return token
    if why in ("user_inactive", "password_changed"):
        await ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).aupdate(
            revoked_at=timezone.now(), revoked_reason=why)
    return None
