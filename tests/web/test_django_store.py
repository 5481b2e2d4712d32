"""The Django session store passes the runtime's store conformance suite."""

from __future__ import annotations

from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from picoflow_web.data.documents import SessionDocumentStore
from runtime import SessionStore
from tests.runtime.store_contract import SessionStoreContract, make_doc

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def anyio_backend() -> str:
    """The ORM's async API runs on asyncio (Channels and asgiref need it)."""
    return "asyncio"


class TestSessionDocumentStore(SessionStoreContract):
    async def make_store(self, tmp_path: Path) -> SessionStore:
        return SessionDocumentStore()



def test_a_save_is_one_conditional_update() -> None:
    # async_to_sync runs the ORM on this thread, so this thread's connection sees it.
    store = SessionDocumentStore()
    created = async_to_sync(store.create)(make_doc())
    with CaptureQueriesContext(connection) as queries:
        async_to_sync(store.save)(created, 0)
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    assert '"revision" = 0' in updates[0]
    assert async_to_sync(store.load)(created.id).revision == 1
