"""The Django session store: session documents in the database, compare-and-swap saves.

Passes the runtime's store conformance suite (``tests/runtime/store_contract.py``). A save
is one ``UPDATE … WHERE id = ? AND revision = ?``; zero rows updated means another writer
won, and nothing is overwritten.
"""

from __future__ import annotations

from django.db import IntegrityError

from picoflow_web.models import StoredSession
from runtime import SessionConflictError, SessionDocument, SessionStoreError, now_iso


class DjangoSessionStore:
    """Session documents as rows of :class:`~picoflow_web.models.StoredSession`."""

    async def load(self, session_id: str) -> SessionDocument | None:
        row = await StoredSession.objects.filter(id=session_id).values("doc").afirst()
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
                doc=stored.model_dump(mode="json"),
            )
        except IntegrityError:
            raise SessionConflictError(stored.id) from None
        return stored

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        stored = doc.model_copy(
            deep=True, update={"revision": expected_revision + 1, "save_on": now_iso()}
        )
        updated = await StoredSession.objects.filter(
            id=doc.id, revision=expected_revision
        ).aupdate(revision=stored.revision, run_status=stored.run_status,
                  doc=stored.model_dump(mode="json"))
        if updated != 1:
            raise SessionConflictError(doc.id)
        return stored.revision

    async def delete(
        self, session_id: str, expected_revision: int | None = None
    ) -> bool:
        rows = StoredSession.objects.filter(id=session_id)
        if expected_revision is not None:
            deleted, _ = await rows.filter(revision=expected_revision).adelete()
            if not deleted:
                raise SessionConflictError(session_id)
            return True
        deleted, _ = await rows.adelete()
        return bool(deleted)

    async def close(self) -> None:
        return None
