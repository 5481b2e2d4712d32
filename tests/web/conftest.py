"""Fixtures of the web tests.

* ``anyio_backend`` is asyncio only: Channels and Daphne do not run on trio.
* Every test gets a fresh in-memory channel layer (assigning ``CHANNEL_LAYERS`` makes
  channels drop its cached layer, whose queues are bound to the previous event loop).
* Queued runs execute in the test process, on its event loop (``tests/inline_tasks.py``);
  the live tests run real ``manage.py db_worker`` processes instead.
* Passwords use a fast hasher (live servers keep the real one).
* ``demo_latency`` rebuilds the process-wide demo engine with a small time unit, so turns
  played in-process take tens of milliseconds, and drops it again afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.test import override_settings

from picoflow_web.execute.engine import get_engine
from tests.inline_tasks import INLINE_TASKS

FAST_LATENCY = 0.002
"""Time unit of in-process demo turns that only need to finish."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    layers = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer",
                          "CONFIG": {"capacity": 100_000}}}
    with override_settings(CHANNEL_LAYERS=layers):
        yield


@pytest.fixture(autouse=True)
def inline_tasks() -> Iterator[None]:
    """Queued runs execute on the test's event loop (see tests/inline_tasks.py)."""
    with override_settings(TASKS=INLINE_TASKS):
        yield


@pytest.fixture(autouse=True)
def no_stall_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no database stall seen by this process: the memory of one is
    process-wide (picoflow_web.record.stalls), and a round of an earlier test with a short
    timeout that waited under load would keep a later test's rounds from declaring
    anything for a whole timeout."""
    from picoflow_web.record import stalls

    monkeypatch.setattr(stalls, "_writable_again", None)


@pytest.fixture(autouse=True)
def fast_password_hasher() -> Iterator[None]:
    """Users are made in nearly every test; PBKDF2's real cost is not under test."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture
def demo_latency(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[float], None]]:
    """Set ``PICOFLOW_DEMO_LATENCY`` for this test (default :data:`FAST_LATENCY`)."""

    def set_latency(seconds: float) -> None:
        monkeypatch.setenv("PICOFLOW_DEMO_LATENCY", str(seconds))
        get_engine.cache_clear()

    set_latency(FAST_LATENCY)
    yield set_latency
    get_engine.cache_clear()
