"""The browser and live-server tests: Playwright's async API and the servers' clients run
on asyncio.

One chromium serves a test module (launching one costs more than most tests' pages); each
test's page has a browser context of its own, so no storage crosses tests; only the
session cookies of the module's first login do (``logged_in_page``). The
event loop lives as long as the module's fixtures (``anyio_backend`` is module-scoped), as
Playwright's objects are bound to the loop they were made on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.e2e.browsing import chromium, logged_in_page


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    """The module's chromium."""
    async with chromium() as launched:
        yield launched


@pytest.fixture
async def page(server: tuple[Any, ...], browser: Any) -> AsyncIterator[Any]:
    """A logged-in page of the module's ``server`` (a live dashboard and its password, then
    whatever else the module's tests need of it)."""
    live, password = server[0], server[1]
    async with logged_in_page(live.base_url, password, browser) as page:
        yield page
