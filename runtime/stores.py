"""Session stores: where session documents live between turns.

Every store implements :class:`SessionStore` and passes the conformance suite in
``tests/runtime/store_contract.py``: documents are copied in and out (no aliasing),
``save`` is a compare-and-swap on ``revision`` that raises
:class:`~runtime.errors.SessionConflictError` and overwrites nothing on a stale write.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import anyio.to_thread
from pydantic import ValidationError

from .errors import SessionConflictError, SessionStoreError
from .messages import now_iso
from .session import SessionDocument

T = TypeVar("T")


@runtime_checkable
class SessionStore(Protocol):
    """Persistence port for session documents."""

    async def load(self, session_id: str) -> SessionDocument | None:
        """Return a copy of the stored document, or None when there is none."""
        ...

    async def create(self, doc: SessionDocument) -> SessionDocument:
        """Store a new document at revision 0; raise SessionConflictError if the id exists."""
        ...

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        """Replace the stored document if its revision is ``expected_revision``.

        Returns the new revision (``expected_revision + 1``). Raises SessionConflictError
        when the stored revision differs or the document is gone.
        """
        ...

    async def delete(self, session_id: str, expected_revision: int | None = None) -> bool:
        """Delete a document; with ``expected_revision`` only at that revision.

        Returns whether a document was deleted; raises SessionConflictError when the
        revision does not match.
        """
        ...

    async def close(self) -> None:
        """Release resources."""
        ...


def _stamped(doc: SessionDocument, revision: int) -> SessionDocument:
    """A new document for the caller to keep: nothing of it is shared with ``doc``."""
    return doc.model_copy(deep=True, update={"revision": revision, "save_on": now_iso()})


def _stamped_json(doc: SessionDocument, revision: int) -> tuple[str, str]:
    """``doc`` as stored at ``revision``, and its ``save_on``.

    A shallow copy is enough, as it is serialised at once and dropped: a deep copy of the
    document (its ``sequence`` trail grows with every branch of every turn) made each save
    cost more as the session grew.
    """
    save_on = now_iso()
    text = doc.model_copy(update={"revision": revision, "save_on": save_on}).model_dump_json()
    return text, save_on


class MemorySessionStore:
    """Process-local store; the embedded default for tests and quick runs.

    Documents are kept as JSON text, so callers can never alias stored state.
    """

    def __init__(self) -> None:
        self._docs: dict[str, str] = {}
        self._revisions: dict[str, int] = {}
        """The revision of each stored document (so a save need not parse the last one)."""

    async def load(self, session_id: str) -> SessionDocument | None:
        raw = self._docs.get(session_id)
        return None if raw is None else SessionDocument.model_validate_json(raw)

    async def create(self, doc: SessionDocument) -> SessionDocument:
        if doc.id in self._docs:
            raise SessionConflictError(doc.id)
        stored = _stamped(doc, 0)
        self._docs[doc.id] = stored.model_dump_json()
        self._revisions[doc.id] = 0
        return stored

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        if self._revisions.get(doc.id) != expected_revision:
            raise SessionConflictError(doc.id)
        self._docs[doc.id], _ = _stamped_json(doc, expected_revision + 1)
        self._revisions[doc.id] = expected_revision + 1
        return expected_revision + 1

    async def delete(
        self, session_id: str, expected_revision: int | None = None
    ) -> bool:
        revision = self._revisions.get(session_id)
        if revision is None:
            if expected_revision is not None:
                raise SessionConflictError(session_id)
            return False
        if expected_revision is not None and revision != expected_revision:
            raise SessionConflictError(session_id)
        del self._docs[session_id], self._revisions[session_id]
        return True

    async def close(self) -> None:
        self._docs.clear()
        self._revisions.clear()


class SQLiteSessionStore:
    """SQLite file store: one row per session, CAS by ``UPDATE … WHERE revision = ?``.

    sqlite3 is blocking, so every call runs in a worker thread; one connection guarded by
    a lock keeps writes serialised without relying on SQLite's busy handling.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS session ("
            " id TEXT PRIMARY KEY, revision INTEGER NOT NULL, flow TEXT NOT NULL,"
            " doc TEXT NOT NULL, updated TEXT NOT NULL)"
        )

    async def _call(self, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                try:
                    return fn()
                except sqlite3.Error as exc:
                    raise SessionStoreError(f"SQLite session store failed: {exc}") from exc

        return await anyio.to_thread.run_sync(locked)

    async def load(self, session_id: str) -> SessionDocument | None:
        row = await self._call(
            lambda: self._conn.execute(
                "SELECT doc FROM session WHERE id = ?", (session_id,)
            ).fetchone()
        )
        if row is None:
            return None
        try:
            return SessionDocument.model_validate_json(row[0])
        except ValidationError as exc:
            raise SessionStoreError(f"Session '{session_id}' is unreadable: {exc}") from exc

    async def create(self, doc: SessionDocument) -> SessionDocument:
        stored = _stamped(doc, 0)

        def insert() -> None:
            try:
                self._conn.execute(
                    "INSERT INTO session (id, revision, flow, doc, updated) VALUES (?, 0, ?, ?, ?)",
                    (stored.id, stored.flow.name, stored.model_dump_json(), stored.save_on),
                )
            except sqlite3.IntegrityError:
                raise SessionConflictError(stored.id) from None

        await self._call(insert)
        return stored

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        revision = expected_revision + 1
        text, save_on = _stamped_json(doc, revision)
        cur = await self._call(
            lambda: self._conn.execute(
                "UPDATE session SET revision = ?, doc = ?, updated = ?"
                " WHERE id = ? AND revision = ?",
                (revision, text, save_on, doc.id, expected_revision),
            )
        )
        if cur.rowcount != 1:
            raise SessionConflictError(doc.id)
        return revision

    async def delete(
        self, session_id: str, expected_revision: int | None = None
    ) -> bool:
        if expected_revision is None:
            cur = await self._call(
                lambda: self._conn.execute("DELETE FROM session WHERE id = ?", (session_id,))
            )
            return bool(cur.rowcount)
        cur = await self._call(
            lambda: self._conn.execute(
                "DELETE FROM session WHERE id = ? AND revision = ?", (session_id, expected_revision)
            )
        )
        if cur.rowcount != 1:
            raise SessionConflictError(session_id)
        return True

    async def close(self) -> None:
        await self._call(self._conn.close)
