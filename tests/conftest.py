"""Shared fixtures: runtime code is tested on both anyio backends.

Every test runs with strict event building (``PICOFLOW_STRICT_EVENTS=1``): an event built
with a misspelled, missing or ill-typed field raises instead of being emitted half-empty.
It is set here, before any test module imports the runtime (the flag is read when
``runtime.events`` is imported), and subprocesses the tests start inherit it. So is
``PICOFLOW_DEMO_STREAM=0``: the demos' answers come whole unless a test asks for them
streamed, so the many tests that read a demo's events in order read them as recorded.

The servers and services many tests need are started once per test session and shared:
a live dashboard (``shared_daphne``; tests that need settings of their own start their own),
one private PostgreSQL cluster (``postgres``; each test takes a database of its own in it)
and one private Redis (``redis``). Under pytest-xdist (``make test`` runs ``-n 3 --dist
loadfile``) a session is a worker's, and the tests of a module go to one worker, so its
module-scoped servers start once.
"""

from __future__ import annotations

import os

os.environ["PICOFLOW_STRICT_EVENTS"] = "1"
os.environ["PICOFLOW_DEMO_STREAM"] = "0"

from collections.abc import Iterator
from typing import Any

import pytest

from tests.livedaphne import ADMIN_PASSWORD, SharedServer, live_daphne, run_manage
from tests.webhelpers import PostgresServer, postgres_server, redis_server, require_services

PACKAGING = "tests/packaging/"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Runtime tests run on asyncio and trio: the runtime must not depend on either."""
    return str(request.param)


SHARED_ENV = {"PICOFLOW_DEMOS": "1", "PICOFLOW_DEMO_LATENCY": "0.002",
              "PICOFLOW_REMOTE_TIMEOUT": "3600"}
"""The shared server's settings: the demos with a short time unit, and no remote run
declared silent while a test session lasts."""

MAKE_OPERATOR = (
    "from django.contrib.auth import get_user_model; "
    "from picoflow_web.models import ApiToken, Membership, Project; "
    "user = get_user_model().objects.create_user('operator'); "
    "Membership.objects.create(project=Project.objects.get_or_create(name='default')[0], "
    "user=user, role='operator'); "
    "print(ApiToken.issue(user, 'shared', ('read', 'run', 'ingest'))[1])"
)


@pytest.fixture(scope="session")
def shared_daphne() -> Iterator[SharedServer]:
    """One Daphne (and one ``db_worker``) for the session's tests that need a live server
    but no settings of their own (:data:`SHARED_ENV`). They share its database: each makes
    what it needs under names of its own and counts only what it made."""
    with live_daphne(SHARED_ENV, admin=True) as server:
        made = run_manage("shell", "-c", MAKE_OPERATOR, env=server.env)
        assert made.returncode == 0, made.stdout + made.stderr
        yield SharedServer(server, (server.data_dir / ADMIN_PASSWORD).read_text().strip(),
                           made.stdout.split()[-1])


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The session's PostgreSQL cluster (skips where PostgreSQL cannot be installed)."""
    require_services()
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis() -> Iterator[str]:
    """The session's Redis: its ``REDIS_URL`` (skips where Redis cannot be installed)."""
    require_services()
    with redis_server() as url:
        yield url


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with ``tests/packaging/`` as one file: its modules share the
    wheel and its virtualenvs (session fixtures), built once then."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            scope = str(super()._split_scope(nodeid))
            return PACKAGING if scope.startswith(PACKAGING) else scope

    return Scheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the modules of ``browser`` and ``slow`` tests first: the longest
    work units are handed out first (``--no-loadscope-reorder`` keeps this order), so no
    worker is left alone with one at the end. None of them uses the test database, so the
    order pytest-django gave the others (plain, then transactional) stays as it was."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    items.sort(key=lambda item: not any(item.get_closest_marker(name) is not None
                                        for name in ("browser", "slow")))


@pytest.fixture(autouse=True)
def _lease_keepers_end_with_their_test() -> Iterator[None]:
    """Stop the lease keepers a test leaves behind. An in-process run (the inline task
    backend) that its test did not wait for dies with the test's event loop, but its keeper
    is a thread: left alone it would go on renewing, and fighting the next tests' database
    flushes for SQLite's write lock."""
    import threading

    before = set(threading.enumerate())
    yield
    for thread in threading.enumerate():
        if thread not in before and thread.name.startswith("lease-") and thread.is_alive():
            stop = getattr(thread, "stop", None)
            if callable(stop):
                stop()
