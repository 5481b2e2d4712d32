"""Shared fixtures: runtime code is tested on both anyio backends."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Runtime tests run on asyncio and trio: the runtime must not depend on either."""
    return str(request.param)
