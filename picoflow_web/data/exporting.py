"""Export: a run's or a session's stored events as JSONL, one event per line.

The lines are the events as the event log holds them — the runtime's event format, the
JSON that ``runtime/events/schema.py`` describes — ordered by run, then ``seq``; a
session's runs come in turn order (when they started). ``manage.py import_events`` and
``POST /api/import`` read the same file back.

The stored JSON text goes out as it is: the payload column keeps the text that was
written, on SQLite and PostgreSQL alike, so no event is parsed and encoded again on the
way out. Events are read a page at a time by ``seq`` (an index range, not an offset), so
a run of hundreds of thousands of events is never held in memory whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from urllib.parse import quote

from asgiref.sync import sync_to_async

from picoflow_web.data import eventlog
from picoflow_web.data.access import Projects
from picoflow_web.models import Run, StoredSession
from runtime.events import SCHEMA_VERSION

EXPORT_PAGE = 2_000
"""Events read (and sent as one chunk) at a time."""
CONTENT_TYPE = "application/x-ndjson"


FIRST_PAGE = 500
"""Events in a stream's first chunk: a page loading the run draws them while the rest
is read."""


def _page(run_id: str, after: int, limit: int = EXPORT_PAGE) -> list[tuple[int, str]]:
    """Up to ``limit`` ``(seq, JSON text)`` of a run after ``seq`` ``after``."""
    return eventlog.read_texts(run_id, after, limit)


def _chunk(page: list[tuple[int, str]], prefix: str = "") -> bytes:
    """The page's lines; those that begin with ``prefix`` (see :func:`envelope_of`) go
    without it."""
    if prefix:
        cut = len(prefix)
        texts = ["{" + text[cut:] if text.startswith(prefix) else text for _, text in page]
    else:
        texts = [text for _, text in page]
    return ("\n".join(texts) + "\n").encode("utf-8")


def lines(run_ids: Iterable[str]) -> Iterator[bytes]:
    """The JSONL of these runs' events, in chunks (for the commands)."""
    for run_id in run_ids:
        after = -1
        while page := _page(run_id, after):
            yield _chunk(page)
            after = page[-1][0]


async def alines(run_ids: Iterable[str]) -> AsyncIterator[bytes]:
    """:func:`lines` for the event loop (the API's streamed response)."""
    for run_id in run_ids:
        async for chunk in alines_after(run_id, -1):
            yield chunk


async def alines_after(run_id: str, after: int, prefix: str = "") -> AsyncIterator[bytes]:
    """The JSONL of one run's events after seq ``after``, in chunks (a page loading a
    stored run reads them as one stream: no request per page). Lines that begin with
    ``prefix`` (the envelope text of :func:`envelope_of`) go without it."""
    page_of = sync_to_async(_page)
    limit = FIRST_PAGE
    while page := await page_of(run_id, after, limit):
        yield _chunk(page, prefix)
        after, limit = page[-1][0], EXPORT_PAGE


def envelope_of(run_id: str, session_id: str) -> tuple[str, str]:
    """The fields every stored event of a run begins with, as JSON (for the client to put
    back) and as the text each stored line begins with (for the server to take off).

    Every event repeats the schema version, the run id and the session id: about a third
    of a small event's text, parsed again per event by whoever reads a big run. The text
    is the form the runtime serialises; a line stored in another form (written by another
    writer, or by PostgreSQL's ``jsonb`` before event payloads were kept as text) does
    not begin with it, and goes whole.
    """
    fields = {"v": SCHEMA_VERSION, "run_id": run_id, "session_id": session_id}
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    # The JSON goes in a header: ASCII only (the client reads the same strings back).
    return json.dumps(fields, separators=(",", ":")), text[:-1] + ","


def session_runs(session_id: str, projects: Projects = None) -> list[str] | None:
    """The ids of a stored session's runs in turn order, or None for a session unknown
    (or of a project not in ``projects``; None: any project)."""
    sessions = StoredSession.objects.filter(id=session_id)
    if projects is not None:
        sessions = sessions.filter(project_id__in=projects)
    project = sessions.values_list("project_id", flat=True).first()
    if project is None:
        return None
    runs = Run.objects.filter(session_id=session_id, project_id=project)
    return list(runs.order_by("started_at", "id").values_list("id", flat=True))


def filename(kind: str, ident: str, suffix: str = ".jsonl") -> str:
    """``run-<id>.jsonl``: ids are the client's, so anything but a plain name character
    becomes ``_`` before it goes into a header."""
    return f"{kind}-{re.sub(r'[^A-Za-z0-9._-]', '_', ident)[:64]}{suffix}"


def disposition(kind: str, ident: str, suffix: str = ".jsonl") -> str:
    """The ``Content-Disposition`` of a download named after a run or a session, as RFC
    6266 has it: ``filename="..."`` in plain name characters (:func:`filename`), and, when
    the id needed more (a run stored before ids were checked), the exact name as
    ``filename*=UTF-8''...``, percent-encoded: no quote, line break or raw UTF-8 ever
    reaches the header."""
    plain = filename(kind, ident, suffix)
    exact = f"{kind}-{ident}{suffix}"
    if exact == plain:
        return f'attachment; filename="{plain}"'
    return (f"attachment; filename=\"{plain}\"; "
            f"filename*=UTF-8''{quote(exact, safe='', errors='replace')}")


__all__ = ["CONTENT_TYPE", "EXPORT_PAGE", "alines", "disposition", "filename", "lines",
           "session_runs"]
