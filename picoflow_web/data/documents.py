"""The Django session store: session documents in the database, compare-and-swap saves.

Passes the runtime's store conformance suite (``tests/runtime/store_contract.py``). A save
is one ``UPDATE … WHERE id = ? AND revision = ?``; zero rows updated means another writer
won, and nothing is overwritten.

Sessions belong to projects. A turn runs :func:`acting_in` its run's project: then the
store sees only that project's sessions, so a session id of another project cannot be
loaded, saved or deleted (creating it conflicts: the id is taken), and a new session goes
to that project. Outside it (the conformance suite, code of the dashboard itself) new
sessions go to the ``default`` project and every session is visible. Documents are stored
redacted (:mod:`picoflow_web.data.redact`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet

from picoflow_web.data.redact import redact, redact_json
from picoflow_web.models import LedgerEntry as LedgerEntryRow
from picoflow_web.models import LedgerTurn as LedgerTurnRow
from picoflow_web.models import StoredSession
from runtime import (
    LedgerEntry,
    LedgerTurn,
    SessionConflictError,
    SessionDocument,
    SessionStoreError,
    now_iso,
)

_PROJECT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "picoflow_project", default=None)


@contextlib.contextmanager
def acting_in(project: str) -> Iterator[None]:
    """Run the enclosed code (a turn, and every task it starts) in ``project``."""
    token = _PROJECT.set(project)
    try:
        yield
    finally:
        _PROJECT.reset(token)


def _rows(session_id: str) -> QuerySet[Any]:
    rows = StoredSession.objects.filter(id=session_id)
    project = _PROJECT.get()
    return rows if project is None else rows.filter(project_id=project)


def _project_field() -> dict[str, str]:
    """A new session's project; without one the model's default (``default``, made if
    missing)."""
    project = _PROJECT.get()
    return {"project_id": project} if project else {}


class SessionDocumentStore:
    """Session documents as rows of :class:`~picoflow_web.models.StoredSession`."""

    async def load(self, session_id: str) -> SessionDocument | None:
        row = await _rows(session_id).values("doc").afirst()
        if row is None:
            return None
        try:
            return SessionDocument.model_validate(row["doc"])
        except ValueError as exc:
            raise SessionStoreError(f"Session '{session_id}' is unreadable: {exc}") from exc

    async def create(self, doc: SessionDocument) -> SessionDocument:
        stored = doc.model_copy(deep=True, update={"revision": 0, "save_on": now_iso()})
        try:
            await StoredSession.objects.acreate(
                id=stored.id, flow=stored.flow.name, revision=0, run_status=stored.run_status,
                doc=redact(stored.model_dump(mode="json")), **_project_field(),
            )
        except IntegrityError:
            raise SessionConflictError(stored.id) from None
        return stored

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        # Shallow: it is dumped at once (a deep copy of the growing document made every
        # save of a long session dearer).
        stored = doc.model_copy(
            update={"revision": expected_revision + 1, "save_on": now_iso()})
        updated = await _rows(doc.id).filter(revision=expected_revision).aupdate(
            revision=stored.revision, run_status=stored.run_status,
            doc=redact(stored.model_dump(mode="json")))
        if updated != 1:
            raise SessionConflictError(doc.id)
        return stored.revision

    async def delete(
        self, session_id: str, expected_revision: int | None = None
    ) -> bool:
        rows = _rows(session_id)
        if expected_revision is not None:
            deleted, _ = await rows.filter(revision=expected_revision).adelete()
            if not deleted:
                raise SessionConflictError(session_id)
            return True
        deleted, _ = await rows.adelete()
        return bool(deleted)

    # -- branch ledger (runtime.BranchLedgerStore) -----------------------------------------

    async def ledger_begin(self, turn: LedgerTurn) -> None:
        await LedgerEntryRow.objects.filter(session_id=turn.session_id).exclude(
            turn_id=turn.turn_id).adelete()
        record = turn.model_copy(update={
            "document": redact_json(turn.document),
            "config": redact(turn.config) if turn.config is not None else None})
        await LedgerTurnRow.objects.aupdate_or_create(
            session_id=turn.session_id,
            defaults={"turn_id": turn.turn_id, "record": record.model_dump_json(),
                      **_project_field()})

    async def ledger_put(
        self, session_id: str, turn_id: str, entries: Sequence[LedgerEntry]
    ) -> None:
        rows = [(session_id, turn_id, e.barrier, e.key, redact_json(e.to_json()))
                for e in entries]
        await sync_to_async(_put_entries)(session_id, turn_id, rows)

    async def ledger_load(
        self, session_id: str
    ) -> tuple[LedgerTurn, list[LedgerEntry]] | None:
        row = await _ledger_rows(session_id).values("turn_id", "record").afirst()
        if row is None:
            return None
        texts = [text async for text in LedgerEntryRow.objects.filter(
            session_id=session_id, turn_id=row["turn_id"]).order_by("id").values_list(
                "entry", flat=True)]
        try:
            return (LedgerTurn.model_validate_json(row["record"]),
                    [LedgerEntry(**json.loads(text)) for text in texts])
        except (ValueError, TypeError) as exc:
            raise SessionStoreError(
                f"The branch ledger of session '{session_id}' is unreadable: {exc}") from exc

    async def ledger_drop(self, session_id: str, turn_id: str | None = None) -> bool:
        rows = _ledger_rows(session_id)
        if turn_id is not None:
            rows = rows.filter(turn_id=turn_id)
        deleted, _ = await rows.adelete()
        if not deleted:
            return False
        await LedgerEntryRow.objects.filter(session_id=session_id).adelete()
        return True

    async def close(self) -> None:
        return None


_UPSERT = ("INSERT INTO {table} (session_id, turn_id, barrier, key, entry) VALUES {values} "
           "ON CONFLICT (session_id, turn_id, barrier, key) DO UPDATE SET entry = "
           "excluded.entry")
"""One statement per chunk of a batch (SQLite and PostgreSQL say it alike): model
instances and ``bulk_create`` cost more than the write itself on a wide fan-out's batch,
and a statement per row a round trip each."""

_ENTRY_TABLE = "picoflow_web_ledgerentry"
""":class:`~picoflow_web.models.LedgerEntry`'s table (Django's name for it)."""

_CHUNK = {"sqlite": 190, "postgresql": 2000}
"""Rows per statement: five parameters each, under SQLite's oldest limit of 999 and far
under PostgreSQL's 65535."""


def _put_entries(session_id: str, turn_id: str,
                 rows: list[tuple[str, str, str, str, str]]) -> None:
    with transaction.atomic():
        if not _ledger_rows(session_id).filter(turn_id=turn_id).exists():
            return  # the turn's ledger was dropped or replaced
        table = connection.ops.quote_name(_ENTRY_TABLE)
        chunk = _CHUNK.get(connection.vendor, 190)
        with connection.cursor() as cursor:
            for start in range(0, len(rows), chunk):
                part = rows[start:start + chunk]
                values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(part))
                cursor.execute(_UPSERT.format(table=table, values=values),
                               [value for row in part for value in row])


def _ledger_rows(session_id: str) -> QuerySet[Any]:
    """The session's ledgered turn, in the acting project only (like its document)."""
    rows = LedgerTurnRow.objects.filter(session_id=session_id)
    project = _PROJECT.get()
    return rows if project is None else rows.filter(project_id=project)
