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
from collections.abc import Iterator
from typing import Any

from django.db import IntegrityError
from django.db.models import QuerySet

from picoflow_web.data.redact import redact
from picoflow_web.models import StoredSession
from runtime import SessionConflictError, SessionDocument, SessionStoreError, now_iso

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

    async def close(self) -> None:
        return None
