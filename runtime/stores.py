"""Session stores: where session documents live between turns.

Every store implements :class:`SessionStore` and passes the conformance suite in
``tests/runtime/store_contract.py``: documents are copied in and out (no aliasing),
``save`` is a compare-and-swap on ``revision`` that raises
:class:`~runtime.errors.SessionConflictError` and overwrites nothing on a stale write.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio.to_thread
from pydantic import BaseModel, Field, ValidationError

from .barrier.ledger import LedgerEntry
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


class LedgerTurn(BaseModel):
    """The record of a turn that writes a branch ledger: what ``FlowEngine.resume`` needs
    to run it again (its flow, message and config, and the session as the turn began)."""

    session_id: str
    turn_id: str
    """The first run of the turn (its entries are kept under it across resumes)."""
    run_id: str
    """The latest run of the turn: the one a resume resumes."""
    flow: str
    message: str | None
    config: dict[str, Any] | None = None
    revision: int
    """The session revision the turn began from."""
    document: str
    """The session document as the turn began (JSON): where a resume starts from."""
    created: str = Field(default_factory=now_iso)


@runtime_checkable
class BranchLedgerStore(SessionStore, Protocol):
    """A session store that also keeps branch ledgers (one turn's per session at most).

    The conformance suite (``tests/runtime/store_contract.py``) checks these too.
    """

    async def ledger_begin(self, turn: LedgerTurn) -> None:
        """Store the record of a ledgered turn. A record of another turn of the session is
        replaced, its entries dropped; the same turn's (a resume) keeps its entries."""
        ...

    async def ledger_put(
        self, session_id: str, turn_id: str, entries: Sequence[LedgerEntry]
    ) -> None:
        """Store entries of the turn durably, in one write; an entry with the barrier and
        key of a stored one replaces it."""
        ...

    async def ledger_load(
        self, session_id: str
    ) -> tuple[LedgerTurn, list[LedgerEntry]] | None:
        """The session's ledgered turn and its entries (in the order they were first
        put), or None when it has none."""
        ...

    async def ledger_drop(self, session_id: str, turn_id: str | None = None) -> bool:
        """Drop the session's ledger (only if it is ``turn_id``'s, when given); returns
        whether there was one."""
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
        self._ledgers: dict[str, tuple[str, dict[tuple[str, str], str]]] = {}
        """Per session: its ledgered turn's record and entries (as JSON text)."""

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

    async def ledger_begin(self, turn: LedgerTurn) -> None:
        held = self._ledgers.get(turn.session_id)
        entries = held[1] if held is not None and \
            LedgerTurn.model_validate_json(held[0]).turn_id == turn.turn_id else {}
        self._ledgers[turn.session_id] = (turn.model_dump_json(), entries)

    async def ledger_put(
        self, session_id: str, turn_id: str, entries: Sequence[LedgerEntry]
    ) -> None:
        held = self._ledgers.get(session_id)
        if held is None or LedgerTurn.model_validate_json(held[0]).turn_id != turn_id:
            return  # the turn's ledger was dropped or replaced: nothing to add to
        for entry in entries:
            held[1][entry.barrier, entry.key] = entry.to_json()

    async def ledger_load(
        self, session_id: str
    ) -> tuple[LedgerTurn, list[LedgerEntry]] | None:
        held = self._ledgers.get(session_id)
        if held is None:
            return None
        return (LedgerTurn.model_validate_json(held[0]),
                [LedgerEntry.from_json(text) for text in held[1].values()])

    async def ledger_drop(self, session_id: str, turn_id: str | None = None) -> bool:
        held = self._ledgers.get(session_id)
        if held is None or (turn_id is not None
                            and LedgerTurn.model_validate_json(held[0]).turn_id != turn_id):
            return False
        del self._ledgers[session_id]
        return True

    async def close(self) -> None:
        self._docs.clear()
        self._revisions.clear()
        self._ledgers.clear()


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
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS ledger_turn ("
            " session_id TEXT PRIMARY KEY, turn_id TEXT NOT NULL, record TEXT NOT NULL)"
        )
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS ledger_entry ("
            " session_id TEXT NOT NULL, turn_id TEXT NOT NULL, barrier TEXT NOT NULL,"
            " key TEXT NOT NULL, entry TEXT NOT NULL,"
            " PRIMARY KEY (session_id, turn_id, barrier, key))"
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

    async def ledger_begin(self, turn: LedgerTurn) -> None:
        record = turn.model_dump_json()

        def begin() -> None:
            with self._transaction():
                self._conn.execute(
                    "DELETE FROM ledger_entry WHERE session_id = ? AND turn_id != ?",
                    (turn.session_id, turn.turn_id))

                self._conn.execute(
                    "INSERT OR REPLACE INTO ledger_turn (session_id, turn_id, record)"
                    " VALUES (?, ?, ?)", (turn.session_id, turn.turn_id, record))

        await self._call(begin)

    async def ledger_put(
        self, session_id: str, turn_id: str, entries: Sequence[LedgerEntry]
    ) -> None:
        rows = [(session_id, turn_id, e.barrier, e.key, e.to_json()) for e in entries]

        def put() -> None:
            with self._transaction():
                held = self._conn.execute(
                    "SELECT 1 FROM ledger_turn WHERE session_id = ? AND turn_id = ?",
                    (session_id, turn_id)).fetchone()
                if held is None:
                    return  # the turn's ledger was dropped or replaced
                # An upsert, not INSERT OR REPLACE: a replaced row keeps its place.
                self._conn.executemany(
                    "INSERT INTO ledger_entry (session_id, turn_id, barrier, key, entry)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id, turn_id, barrier, key)"
                    " DO UPDATE SET entry = excluded.entry", rows)

        await self._call(put)

    async def ledger_load(
        self, session_id: str
    ) -> tuple[LedgerTurn, list[LedgerEntry]] | None:
        def load() -> tuple[str, list[str]] | None:
            row = self._conn.execute(
                "SELECT turn_id, record FROM ledger_turn WHERE session_id = ?",
                (session_id,)).fetchone()
            if row is None:
                return None
            entries = self._conn.execute(
                "SELECT entry FROM ledger_entry WHERE session_id = ? AND turn_id = ?"
                " ORDER BY rowid", (session_id, row[0])).fetchall()
            return row[1], [e[0] for e in entries]

        found = await self._call(load)
        if found is None:
            return None
        try:
            return (LedgerTurn.model_validate_json(found[0]),
                    [LedgerEntry.from_json(text) for text in found[1]])
        except (ValidationError, ValueError, TypeError) as exc:
            raise SessionStoreError(
                f"The branch ledger of session '{session_id}' is unreadable: {exc}") from exc

    async def ledger_drop(self, session_id: str, turn_id: str | None = None) -> bool:
        def drop() -> bool:
            # Every turn that ends well asks, so the usual answer (none) is one statement.
            # Entries left by a crash between the two are of no record: never loaded, and
            # deleted by the session's next ledger_begin.
            if turn_id is None:
                cur = self._conn.execute(
                    "DELETE FROM ledger_turn WHERE session_id = ?", (session_id,))
            else:
                cur = self._conn.execute(
                    "DELETE FROM ledger_turn WHERE session_id = ? AND turn_id = ?",
                    (session_id, turn_id))
            if not cur.rowcount:
                return False
            self._conn.execute("DELETE FROM ledger_entry WHERE session_id = ?", (session_id,))
            return True

        return await self._call(drop)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction (the connection autocommits each statement otherwise)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    async def close(self) -> None:
        await self._call(self._conn.close)
