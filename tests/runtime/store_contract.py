"""Conformance suite every session store must pass.

Subclass :class:`SessionStoreContract` in a class named ``Test…`` and implement
:meth:`SessionStoreContract.make_store`; pytest then runs every contract test against the
store, on asyncio and trio::

    class TestMyStore(SessionStoreContract):
        async def make_store(self, tmp_path: Path) -> SessionStore:
            return MyStore(...)

The suite relies only on the public store port (``load``, ``create``, ``save``,
``delete``, ``close``, and the branch ledger's ``ledger_begin``, ``ledger_put``,
``ledger_load``, ``ledger_drop`` of a :class:`runtime.BranchLedgerStore`; a store without
them sets ``keeps_ledger = False``) and on :class:`runtime.SessionDocument`; it knows
nothing about how a store keeps its documents.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import SessionConflictError, SessionDocument, SessionStore
from runtime.barrier.ledger import LedgerEntry
from runtime.session import SequenceEntry
from runtime.stores import BranchLedgerStore, LedgerTurn

HOSTILE_STRINGS = [
    "<script>alert('x')</script>",
    "\"quoted\" 'single' `back` \\ backslash \\u0000 not-a-null",
    "'); DROP TABLE session; --",
    "emoji 🙂 family 👩‍👩‍👧 flag 🇫🇷",
    "control \x01\x02\x1b[31m\x7f tab\t newline\n cr\r",
    "rtl \u202e override, line sep \u2028 para sep \u2029, bom \ufeff",
    "zero width \u200b joiner \u200d, combining e\u0301",
    "{\"json\": [1, 2, {\"nested\": null}]}",
    "日本語のテキスト и кириллица",
]


def make_doc(
    *, session_id: str | None = None, flow: str = "ContractFlow", text: str = "hello"
) -> SessionDocument:
    """A small but complete session document (memory, state, context, trail, logs)."""
    return SessionDocument.model_validate(
        {
            "id": session_id or str(uuid.uuid4()),
            "flow": {
                "name": flow,
                "model": {"provider": "scripted", "name": "contract-model", "params": {}},
                "context": {"config": {"lang": "en", "limits": {"nights": 3}}},
                "memory": {
                    "Ask": {
                        "messages": [
                            {"type": "system", "content": "be brief", "id": "system"},
                            {"type": "human", "content": text, "id": "Ask|t|1"},
                            {"type": "ai", "content": "hi", "id": "Ask|t|2"},
                        ]
                    }
                },
                "steps": [{"name": "Ask", "state": {"count": 1, "nested": {"a": [1, 2]}}}],
                "current_step": "Ask",
                "sequence": [{"level": 1, "step_name": "Ask"}],
            },
            "log": [{"level": "log", "message": "created"}],
        }
    )


def content_of(doc: SessionDocument) -> dict[str, Any]:
    """The caller-owned part of a document: everything but the store's stamps."""
    return doc.model_dump(mode="json", exclude={"revision", "save_on"})


def with_text(doc: SessionDocument, text: str) -> SessionDocument:
    """A copy of ``doc`` whose first human message says ``text``."""
    changed = doc.model_copy(deep=True)
    changed.flow.memory["Ask"].messages[1].content = text
    return changed


class SessionStoreContract(abc.ABC):
    """The behaviour every :class:`runtime.SessionStore` implementation must show."""

    pytestmark = pytest.mark.anyio

    @abc.abstractmethod
    async def make_store(self, tmp_path: Path) -> SessionStore:
        """A fresh, empty store; ``tmp_path`` is this test's private directory."""

    @pytest.fixture
    async def store(self, tmp_path: Path, anyio_backend: str) -> AsyncIterator[SessionStore]:
        store = await self.make_store(tmp_path)
        try:
            yield store
        finally:
            await store.close()

    # -- create / load ---------------------------------------------------------------------

    async def test_store_implements_the_session_store_port(self, store: SessionStore) -> None:
        assert isinstance(store, SessionStore)

    async def test_created_document_loads_back_equal_at_revision_zero(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        created = await store.create(doc)
        loaded = await store.load(doc.id)
        assert created.revision == 0
        assert loaded is not None
        assert loaded == created
        assert content_of(loaded) == content_of(doc)

    async def test_create_stores_revision_zero_whatever_the_document_says(
        self, store: SessionStore
    ) -> None:
        doc = make_doc().model_copy(update={"revision": 7})
        created = await store.create(doc)
        loaded = await store.load(doc.id)
        assert created.revision == 0
        assert loaded is not None and loaded.revision == 0

    async def test_loading_an_unknown_session_returns_none(self, store: SessionStore) -> None:
        assert await store.load(str(uuid.uuid4())) is None
        await store.create(make_doc())
        assert await store.load(str(uuid.uuid4())) is None

    async def test_creating_the_same_id_twice_conflicts_and_keeps_the_first(
        self, store: SessionStore
    ) -> None:
        first = make_doc(text="first")
        await store.create(first)
        with pytest.raises(SessionConflictError) as caught:
            await store.create(make_doc(session_id=first.id, text="second"))
        assert caught.value.session_id == first.id
        loaded = await store.load(first.id)
        assert loaded is not None and content_of(loaded) == content_of(first)

    # -- save (compare and swap) -----------------------------------------------------------

    async def test_a_save_copies_no_part_of_the_document(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The document grows with every branch of every turn (its sequence trail): a save
        # that deep-copied it cost more the longer the session ran.
        doc = make_doc()
        await store.create(doc)
        copies: list[str] = []
        for model in (SessionDocument, SequenceEntry):
            original = model.__deepcopy__

            def counting(self: Any, memo: Any = None, _original: Any = original) -> Any:
                copies.append(type(self).__name__)
                return _original(self, memo)

            monkeypatch.setattr(model, "__deepcopy__", counting)
        doc.flow.sequence.extend(SequenceEntry(level=2, step_name="Ask") for _ in range(50))
        assert await store.save(doc, 0) == 1
        assert copies == []
        loaded = await store.load(doc.id)
        assert loaded is not None and len(loaded.flow.sequence) == len(doc.flow.sequence)

    async def test_save_at_the_stored_revision_returns_the_next_revision(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        assert await store.save(with_text(doc, "one"), 0) == 1
        loaded = await store.load(doc.id)
        assert loaded is not None
        assert loaded.revision == 1
        assert loaded.flow.memory["Ask"].messages[1].content == "one"
        assert await store.save(with_text(loaded, "two"), 1) == 2
        again = await store.load(doc.id)
        assert again is not None
        assert (again.revision, again.flow.memory["Ask"].messages[1].content) == (2, "two")

    async def test_stale_save_conflicts_and_leaves_the_stored_document_unchanged(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        await store.save(with_text(doc, "winner"), 0)
        before = await store.load(doc.id)
        with pytest.raises(SessionConflictError) as caught:
            await store.save(with_text(doc, "stale"), 0)
        assert caught.value.session_id == doc.id
        with pytest.raises(SessionConflictError):
            await store.save(with_text(doc, "future"), 5)
        after = await store.load(doc.id)
        assert after == before
        assert after is not None and after.flow.memory["Ask"].messages[1].content == "winner"

    async def test_saving_an_unknown_session_conflicts_and_creates_nothing(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        with pytest.raises(SessionConflictError):
            await store.save(doc, 0)
        assert await store.load(doc.id) is None

    async def test_saving_a_deleted_session_conflicts_and_does_not_resurrect_it(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        assert await store.delete(doc.id) is True
        with pytest.raises(SessionConflictError):
            await store.save(doc, 0)
        assert await store.load(doc.id) is None

    async def test_saving_one_session_leaves_other_sessions_alone(
        self, store: SessionStore
    ) -> None:
        one, other = make_doc(text="one"), make_doc(text="other")
        await store.create(one)
        await store.create(other)
        await store.save(with_text(one, "changed"), 0)
        loaded = await store.load(other.id)
        assert loaded is not None
        assert loaded.revision == 0 and content_of(loaded) == content_of(other)

    async def test_concurrent_saves_from_one_revision_let_exactly_one_win(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        outcomes: dict[str, int | SessionConflictError] = {}

        async def save_as(text: str) -> None:
            try:
                outcomes[text] = await store.save(with_text(doc, text), 0)
            except SessionConflictError as exc:
                outcomes[text] = exc

        async with anyio.create_task_group() as tg:
            for text in ("left", "right"):
                tg.start_soon(save_as, text)

        winners = [text for text, result in outcomes.items() if result == 1]
        losers = [r for r in outcomes.values() if isinstance(r, SessionConflictError)]
        assert len(winners) == 1 and len(losers) == 1
        loaded = await store.load(doc.id)
        assert loaded is not None
        assert loaded.revision == 1
        assert loaded.flow.memory["Ask"].messages[1].content == winners[0]

    # -- copies, not aliases ---------------------------------------------------------------

    async def test_documents_are_copied_in_and_out(self, store: SessionStore) -> None:
        doc = make_doc(text="original")
        created = await store.create(doc)
        expected = content_of(doc)

        doc.flow.memory["Ask"].messages[1].content = "mutated input"
        created.flow.steps[0].state["count"] = 99
        loaded = await store.load(doc.id)
        assert loaded is not None and content_of(loaded) == expected

        loaded.flow.context["config"]["lang"] = "fr"
        loaded.log.clear()
        again = await store.load(doc.id)
        assert again is not None and content_of(again) == expected
        assert again is not loaded

    async def test_a_saved_document_is_not_aliased_by_the_caller(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        changed = with_text(doc, "saved")
        await store.save(changed, 0)
        changed.flow.memory["Ask"].messages[1].content = "mutated after save"
        changed.flow.steps[0].state["count"] = 42
        loaded = await store.load(doc.id)
        assert loaded is not None
        assert loaded.flow.memory["Ask"].messages[1].content == "saved"
        assert loaded.flow.steps[0].state["count"] == 1

    # -- delete ----------------------------------------------------------------------------

    async def test_delete_without_revision_removes_the_document(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        assert await store.delete(doc.id) is True
        assert await store.load(doc.id) is None
        assert await store.delete(doc.id) is False

    async def test_delete_of_an_unknown_session_reports_nothing_deleted(
        self, store: SessionStore
    ) -> None:
        assert await store.delete(str(uuid.uuid4())) is False

    async def test_delete_at_the_stored_revision_removes_the_document(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        await store.save(doc, 0)
        assert await store.delete(doc.id, expected_revision=1) is True
        assert await store.load(doc.id) is None

    async def test_delete_at_a_wrong_revision_conflicts_and_deletes_nothing(
        self, store: SessionStore
    ) -> None:
        doc = make_doc()
        await store.create(doc)
        await store.save(doc, 0)
        with pytest.raises(SessionConflictError):
            await store.delete(doc.id, expected_revision=0)
        loaded = await store.load(doc.id)
        assert loaded is not None and loaded.revision == 1

    async def test_delete_of_a_missing_session_at_a_revision_conflicts(
        self, store: SessionStore
    ) -> None:
        with pytest.raises(SessionConflictError):
            await store.delete(str(uuid.uuid4()), expected_revision=0)

    # -- content fidelity ------------------------------------------------------------------

    @pytest.mark.parametrize("text", HOSTILE_STRINGS)
    async def test_hostile_strings_round_trip_exactly(
        self, store: SessionStore, text: str
    ) -> None:
        doc = make_doc(text=text)
        doc.flow.steps[0].state[text] = {"value": text, "list": [text, 1, None, True]}
        doc.flow.context["config"]["note"] = text
        doc.log[0].message = text
        await store.create(doc)
        loaded = await store.load(doc.id)
        assert loaded is not None and content_of(loaded) == content_of(doc)
        assert loaded.flow.memory["Ask"].messages[1].content == text

        await store.save(with_text(loaded, text + text), 0)
        saved = await store.load(doc.id)
        assert saved is not None
        assert saved.flow.memory["Ask"].messages[1].content == text + text
        assert saved.flow.steps[0].state[text]["value"] == text

    # -- lifecycle -------------------------------------------------------------------------

    async def test_close_releases_the_store_without_error(
        self, tmp_path: Path, anyio_backend: str
    ) -> None:
        store = await self.make_store(tmp_path)
        await store.create(make_doc())
        assert await store.close() is None

    # -- branch ledger -----------------------------------------------------------------------

    keeps_ledger = True
    """Whether the store is a :class:`runtime.BranchLedgerStore` (every built-in one is);
    a store that is not skips the ledger tests, and ``run_steps(..., ledger=True)`` on it
    raises."""

    @pytest.fixture
    async def ledger(self, store: SessionStore) -> BranchLedgerStore:
        if not self.keeps_ledger:
            pytest.skip("this store keeps no branch ledger")
        assert isinstance(store, BranchLedgerStore)
        return store

    async def test_a_ledger_loads_back_its_turn_and_entries_in_put_order(
        self, ledger: BranchLedgerStore
    ) -> None:
        turn = ledger_turn("s1", "run-1")
        await ledger.ledger_begin(turn)
        first = [ledger_entry("b0", f"k{i}", i) for i in range(3)]
        await ledger.ledger_put("s1", "run-1", first)
        await ledger.ledger_put("s1", "run-1", [ledger_entry("0/b0", "inner", 0)])
        found = await ledger.ledger_load("s1")
        assert found is not None
        record, entries = found
        assert record == turn
        assert entries == [*first, ledger_entry("0/b0", "inner", 0)]
        assert await ledger.ledger_load("other") is None

    async def test_an_entry_put_again_replaces_the_stored_one_in_its_place(
        self, ledger: BranchLedgerStore
    ) -> None:
        await ledger.ledger_begin(ledger_turn("s1", "run-1"))
        await ledger.ledger_put("s1", "run-1", [ledger_entry("b0", "a", 0),
                                               ledger_entry("b0", "b", 1)])
        await ledger.ledger_put("s1", "run-1", [ledger_entry("b0", "a", 0, output="again")])
        found = await ledger.ledger_load("s1")
        assert found is not None
        assert [(e.key, e.output) for e in found[1]] == [("a", "again"), ("b", "out-b")]

    async def test_a_new_turn_replaces_the_ledger_and_a_resume_keeps_its_entries(
        self, ledger: BranchLedgerStore
    ) -> None:
        await ledger.ledger_begin(ledger_turn("s1", "run-1"))
        await ledger.ledger_put("s1", "run-1", [ledger_entry("b0", "a", 0)])
        resumed = ledger_turn("s1", "run-1").model_copy(update={"run_id": "run-2"})
        await ledger.ledger_begin(resumed)  # the same turn, resumed by run-2
        found = await ledger.ledger_load("s1")
        assert found is not None and found[0].run_id == "run-2" and len(found[1]) == 1
        await ledger.ledger_begin(ledger_turn("s1", "run-3"))  # another turn
        found = await ledger.ledger_load("s1")
        assert found is not None and (found[0].turn_id, found[1]) == ("run-3", [])
        # A late batch of the replaced turn is not the session's ledger any more.
        await ledger.ledger_put("s1", "run-1", [ledger_entry("b0", "late", 1)])
        found = await ledger.ledger_load("s1")
        assert found is not None and found[1] == []

    async def test_drop_removes_only_the_named_turns_ledger_and_says_so(
        self, ledger: BranchLedgerStore
    ) -> None:
        for session in ("s1", "s2"):
            await ledger.ledger_begin(ledger_turn(session, f"run-{session}"))
            await ledger.ledger_put(session, f"run-{session}", [ledger_entry("b0", "a", 0)])
        assert await ledger.ledger_drop("s1", "run-s2") is False
        assert await ledger.ledger_load("s1") is not None
        assert await ledger.ledger_drop("s1", "run-s1") is True
        assert await ledger.ledger_load("s1") is None
        assert await ledger.ledger_drop("s1") is False
        await ledger.ledger_put("s1", "run-s1", [ledger_entry("b0", "b", 1)])
        assert await ledger.ledger_load("s1") is None  # a dropped turn takes no entries
        found = await ledger.ledger_load("s2")
        assert found is not None and [e.key for e in found[1]] == ["a"]
        assert await ledger.ledger_drop("s2") is True

    async def test_ledger_values_round_trip_exactly(self, ledger: BranchLedgerStore) -> None:
        await ledger.ledger_begin(ledger_turn("s1", "run-1", message=HOSTILE_STRINGS[4]))
        entries = [ledger_entry("b0", text, i, output={"text": text, "n": [1, 2.5, None]})
                   for i, text in enumerate(HOSTILE_STRINGS)]
        await ledger.ledger_put("s1", "run-1", entries)
        found = await ledger.ledger_load("s1")
        assert found is not None
        assert found[0].message == HOSTILE_STRINGS[4]
        assert found[1] == entries


def ledger_turn(session_id: str, run_id: str, message: str | None = "go") -> LedgerTurn:
    """A ledgered turn's record, its document a small session of its own."""
    doc = make_doc(session_id=session_id)
    return LedgerTurn(session_id=session_id, turn_id=run_id, run_id=run_id,
                      flow="ContractFlow", message=message, config={"n": 3}, revision=2,
                      document=doc.model_dump_json())


def ledger_entry(barrier: str, key: str, index: int, output: Any = None) -> LedgerEntry:
    """One ledger entry with a replacement, a contribution and tokens."""
    path = [[0, index]]
    return LedgerEntry(
        barrier=barrier, key=key, index=index, step="Worker", digest=f"d-{key}",
        output=f"out-{key}" if output is None else output,
        writes=[{"step": "Worker", "field": f"f_{index}", "value": {"v": key}, "deleted": False,
                 "path": path, "key": key, "base": None}],
        contributions=[{"step": "Worker", "field": "notes", "value": key, "path": path,
                        "key": key, "seq": 1, "base": []}],
        overridden=[], tokens={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        run_id="run-1", seq=10 + index)
