"""Import: a JSONL export (of this dashboard or another) stored back as runs.

The file is read by ingest's own parser (:func:`picoflow_web.record.ingest.parse_lines`: every
line valid JSON, a known event type of this schema version with each field of its JSON
type, valid run and session ids, numbers the database holds and a ``time`` that is a date,
within :data:`~picoflow_web.record.ingest.MAX_LINE_BYTES`, valid UTF-8 without lone surrogates) and
stored by ingest's own path (:func:`~picoflow_web.record.ingest.store_lines`, through the door
every source of events takes, :mod:`picoflow_web.record.append`: the runs, their status,
counts, reply and session record derived from the events), so an imported run is
what an ingested one would be, but for its origin (``{"kind": "import"}``). Stricter than
ingest, because the file is a record of whole runs: each run's ``seq`` starts at 0 and
has no gap (but the ones its own ``sink.overflowed`` events account for, as a live run's
record has), nothing repeats, nothing follows the event that ended the turn, and the
``run.interrupted`` a dashboard records is accepted.

Everything is checked before anything is stored, and stored in one transaction: a refused
file leaves the database as it was. A run id (or a session id) that exists already in
the target project is refused (409), one of another project is not found there (404, as
ids of other projects are everywhere), unless the file is imported as a copy: then every
run gets a new id, every session a new one, rewritten in each event's envelope (the only
place events name them).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from picoflow_web.models import Project, Run, StoredSession
from picoflow_web.record.append import ENDINGS, Stored
from picoflow_web.record.ingest import (
    IngestError,
    Line,
    Planned,
    by_run,
    check_first,
    continuing,
    parse_lines,
    store_lines,
)

MAX_IMPORT_BYTES = 128 * 1024 * 1024
"""Largest file (every line is parsed before anything is stored, so it is in memory)."""


@dataclass(frozen=True)
class Imported:
    """What an import stored: the runs (in file order) and their ids in the file."""

    runs: list[Run]
    original_ids: dict[str, str]
    """New run id to the id the file gave it (the same unless copied)."""
    stored: Stored
    copied: bool


def check_runs(lines: list[Line]) -> dict[str, list[Line]]:
    """Each run's lines, checked as a record of whole runs (see the module docstring)."""
    grouped = by_run(lines)
    for run_id, items in grouped.items():
        fresh = continuing(run_id, items, 0, resent=False)
        check_first(run_id, fresh)
        end = next((i for i, line in enumerate(fresh) if line.type in ENDINGS), len(fresh))
        later = [line for line in fresh[end + 1:] if line.type != "sink.overflowed"]
        if later:
            raise IngestError(f"Line {later[0].number}: run {run_id} ended at line "
                              f"{fresh[end].number} ({fresh[end].type}); no {later[0].type} "
                              "can follow.",
                              code="after_end", status=400, run_id=run_id, line=later[0].number)
    return grouped


def _copied(lines: list[Line]) -> tuple[list[Line], dict[str, str]]:
    """The lines with a new id for every run and every (non-empty) session, and each new
    run id's old one."""
    runs = {line.run_id: uuid.uuid4().hex for line in lines}
    sessions = {line.data["session_id"]: str(uuid.uuid4()) for line in lines
                if line.data["session_id"]}
    sessions[""] = ""
    copied = [Line(line.number, {**line.data, "run_id": runs[line.run_id],
                                 "session_id": sessions[line.data["session_id"]]})
              for line in lines]
    return copied, {new: old for old, new in runs.items()}


def _plan_new(lines: list[Line], runs: dict[str, Run], project: str) -> list[Planned]:
    """Every run new: a run id or a session id in use is refused, a 409 in ``project``,
    elsewhere the 404 of an id that does not exist here, checked last (as an unknown id
    would pass every check)."""
    grouped = by_run(lines)
    first = {run_id: items[0] for run_id, items in grouped.items()}
    _refuse_taken("run", first, {i for i, run in runs.items() if run.project_id == project})
    sessions: dict[str, Line] = {}
    for line in lines:
        if line.data["session_id"]:
            sessions.setdefault(line.data["session_id"], line)
    owners = set(StoredSession.objects.filter(id__in=sessions).values_list("id", "project_id"))
    owners |= set(Run.objects.filter(session_id__in=sessions).values_list("session_id",
                                                                          "project_id"))
    ours = {session_id for session_id, owner in owners if owner == project}
    _refuse_taken("session", sessions, ours)
    _refuse_taken("session", sessions, {session_id for session_id, _ in owners} - ours,
                  elsewhere=project)
    _refuse_taken("run", first, {i for i, run in runs.items() if run.project_id != project},
                  elsewhere=project)
    return [Planned(run_id, None, items) for run_id, items in grouped.items()]


def _refuse_taken(what: str, first: dict[str, Line], taken: set[str],
                  elsewhere: str | None = None) -> None:
    """Refuse the first id (by where it first appears) that is ``taken``; ``elsewhere``:
    taken in other projects than this one, where it is not found (404), not "taken"."""
    for ident, line in first.items():
        if ident not in taken:
            continue
        if elsewhere is not None:
            raise IngestError(f"Line {line.number}: {what} id {ident} cannot be used in "
                              f"project {elsewhere!r}; import the file as a copy (?copy=1, "
                              "--copy) to store it under new ids.",
                              code="not_found", status=404, line=line.number,
                              **{f"{what}_id": ident})
        raise IngestError(f"Line {line.number}: {what} {ident} exists already; import "
                          "the file as a copy (?copy=1, --copy) to store it under new "
                          "ids.",
                          code=f"{what}_exists", status=409, line=line.number,
                          **{f"{what}_id": ident})


def _when(line: Line) -> datetime:
    return datetime.fromtimestamp(float(line.data["time"]), UTC)


def _restamp(per_run: dict[str, list[Line]]) -> None:
    """An imported run started and ended when its events say, not when it was read."""
    for run_id, items in per_run.items():
        end = next((line for line in items if line.type in ENDINGS), None)
        times: dict[str, Any] = {"started_at": _when(items[0])}
        if end is not None:
            times["finished_at"] = _when(end)
        Run.objects.filter(id=run_id).update(**times)


def import_jsonl(body: bytes, *, project: str, copy: bool = False, user: Any = None,
                 origin: dict[str, Any] | None = None) -> Imported:
    """Check the whole file, then store it in ``project`` in one transaction, or refuse
    it (:class:`~picoflow_web.record.ingest.IngestError`, naming the line) storing nothing."""
    if len(body) > MAX_IMPORT_BYTES:
        raise IngestError(f"The file of {len(body)} bytes is larger "
                          f"than {MAX_IMPORT_BYTES}; export fewer runs at a time.",
                          code="body_too_large", status=413, limit=MAX_IMPORT_BYTES)
    lines = parse_lines(body, recorded=True)
    if not lines:
        raise IngestError("The file holds no events.", code="empty_file", status=400)
    per_run = check_runs(lines)
    names = {run_id: run_id for run_id in per_run}
    if copy:
        lines, names = _copied(lines)
        per_run = check_runs(lines)
    base = {"kind": "import", **(origin or {})}

    def origin_of(run_id: str) -> dict[str, Any]:
        return {**base, "copy_of": names[run_id]} if copy else base

    with transaction.atomic():
        Project.objects.get_or_create(name=project)
        stored = store_lines(lines, origin_of, user, project, planner=_plan_new)
        _restamp(per_run)
    runs = {run.id: run for run in Run.objects.filter(id__in=per_run)}
    return Imported([runs[run_id] for run_id in per_run], names, stored, copy)


__all__ = ["MAX_IMPORT_BYTES", "Imported", "check_runs", "import_jsonl"]
