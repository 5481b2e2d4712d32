"""The browser and live-server tests: Playwright's async API and the servers' clients run
on asyncio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.e2e.browsing import logged_in_page


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def page(server: tuple[Any, str]) -> AsyncIterator[Any]:
    """A logged-in page of the module's ``server`` (a live dashboard and its password)."""
    live, password = server
    async with logged_in_page(live.base_url, password) as page:
        yield page
