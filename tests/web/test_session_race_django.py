"""The session race on the dashboard's own store: two workers' turns on one session, the
loser saves nothing (the race itself: ``tests/runtime/test_session_race.py``)."""

from __future__ import annotations

import pytest

from picoflow_web.data.documents import SessionDocumentStore, acting_in
from picoflow_web.models import Project
from tests.runtime.test_session_race import race

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]


async def test_the_turn_that_loses_the_session_race_saves_nothing() -> None:
    await Project.objects.acreate(name="p")
    with acting_in("p"):
        await race(SessionDocumentStore())
