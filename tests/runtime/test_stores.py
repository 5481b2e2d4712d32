"""The built-in session stores against the store contract, plus SQLite specifics."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtime import (
    MemorySessionStore,
    SessionConflictError,
    SessionStore,
    SessionStoreError,
    SQLiteSessionStore,
)
from tests.runtime.store_contract import SessionStoreContract, content_of, make_doc, with_text

pytestmark = pytest.mark.anyio


class TestMemorySessionStore(SessionStoreContract):
    async def make_store(self, tmp_path: Path) -> SessionStore:
        return MemorySessionStore()


class TestSQLiteSessionStore(SessionStoreContract):
    async def make_store(self, tmp_path: Path) -> SessionStore:
        return SQLiteSessionStore(tmp_path / "sessions.sqlite")

    async def test_documents_persist_across_store_instances_on_one_file(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "nested" / "dir" / "sessions.sqlite"
        first = SQLiteSessionStore(path)
        doc = make_doc(text="persisted")
        await first.create(doc)
        assert await first.save(with_text(doc, "saved once"), 0) == 1
        await first.close()

        second = SQLiteSessionStore(path)
        try:
            loaded = await second.load(doc.id)
            assert loaded is not None
            assert loaded.revision == 1
            assert content_of(loaded) == content_of(with_text(doc, "saved once"))
            assert await second.save(with_text(loaded, "saved twice"), 1) == 2
            with pytest.raises(SessionConflictError):
                await second.save(with_text(loaded, "stale"), 1)
        finally:
            await second.close()

    async def test_compare_and_swap_holds_across_two_open_instances(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "shared.sqlite"
        left, right = SQLiteSessionStore(path), SQLiteSessionStore(path)
        try:
            doc = make_doc()
            await left.create(doc)
            with pytest.raises(SessionConflictError):
                await right.create(doc)
            assert await left.save(with_text(doc, "left"), 0) == 1
            with pytest.raises(SessionConflictError):
                await right.save(with_text(doc, "right"), 0)
            loaded = await right.load(doc.id)
            assert loaded is not None
            assert loaded.flow.memory["Ask"].messages[1].content == "left"
            with pytest.raises(SessionConflictError):
                await right.delete(doc.id, expected_revision=0)
            assert await right.delete(doc.id, expected_revision=1) is True
            assert await left.load(doc.id) is None
        finally:
            await left.close()
            await right.close()

    async def test_an_unreadable_row_raises_session_store_error(self, tmp_path: Path) -> None:
        path = tmp_path / "corrupt.sqlite"
        store = SQLiteSessionStore(path)
        try:
            doc = make_doc()
            await store.create(doc)
            with sqlite3.connect(path) as raw:
                raw.execute("UPDATE session SET doc = ? WHERE id = ?", ("{not json", doc.id))
            raw.close()
            with pytest.raises(SessionStoreError, match=f"Session '{doc.id}' is unreadable"):
                await store.load(doc.id)
        finally:
            await store.close()

    async def test_the_row_records_flow_name_and_revision(self, tmp_path: Path) -> None:
        path = tmp_path / "columns.sqlite"
        store = SQLiteSessionStore(path)
        try:
            doc = make_doc(flow="ColumnsFlow")
            await store.create(doc)
            await store.save(doc, 0)
        finally:
            await store.close()
        raw = sqlite3.connect(path)
        try:
            row = raw.execute(
                "SELECT flow, revision FROM session WHERE id = ?", (doc.id,)
            ).fetchone()
        finally:
            raw.close()
        assert row == ("ColumnsFlow", 1)
