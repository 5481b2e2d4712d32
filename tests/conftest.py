"""Shared fixtures: runtime code is tested on both anyio backends.

Every test runs with strict event building (``PICOFLOW_STRICT_EVENTS=1``): an event built
with a misspelled, missing or ill-typed field raises instead of being emitted half-empty.
It is set here, before any test module imports the runtime (the flag is read when
``runtime.events`` is imported), and subprocesses the tests start inherit it.
"""

from __future__ import annotations

import os

os.environ["PICOFLOW_STRICT_EVENTS"] = "1"

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Runtime tests run on asyncio and trio: the runtime must not depend on either."""
    return str(request.param)
