"""Shared fixtures of the runtime tests: every async test runs on asyncio and on trio.

Engine builders and test flows live in ``tests/runtime/helpers.py``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each runtime test on both backends the runtime promises to support."""
    return str(request.param)
