"""Pull operations of the web app (``<entity>_<action>``): runs, events, sessions."""

from __future__ import annotations

from typing import Any

from picoflow_web.models import EventRecord, Run, StoredSession

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


async def session_get(session_id: str) -> dict[str, Any] | None:
    """A session's document and its runs, or None."""
    row = await StoredSession.objects.filter(id=session_id).afirst()
    if row is None:
        return None
    runs = [run.summary() async for run in
            Run.objects.filter(session_id=session_id).order_by("started_at")]
    return {"id": row.id, "flow": row.flow, "revision": row.revision,
            "run_status": row.run_status, "doc": row.doc, "runs": runs}


async def session_list(limit: int = 200) -> list[dict[str, Any]]:
    """Recent sessions (id, flow, status, revision)."""
    rows = StoredSession.objects.order_by("-updated").values(
        "id", "flow", "run_status", "revision")[:limit]
    return [row async for row in rows]
