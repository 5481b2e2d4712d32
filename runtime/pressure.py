"""Back-pressure for a turn's branches: wait while a sink is congested, then go a few at a time.

A sink that cannot keep up (a recorder whose store lags) says so through the bus's
``congested()``. Every branch that reaches an await point meanwhile (its start, a model
call) waits here. One of them polls the bus; the others sleep on their own event, in
arrival order. Once the sink drained, the poller lets :data:`RELEASE_BATCH` of them through,
gives them a turn of the loop to do their next piece of work, and looks again.

Why not wake everyone at once: with tens of thousands of branches waiting, each drain would
wake all of them, each would find the sink congested again (the first few refilled it), and
the run would spend time quadratic in its width re-queueing waiters — a 40,000-branch fan-out
took minutes. Released in batches, a waiter is woken once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import final

import anyio

POLL_SECONDS = 0.01
"""Between two looks at a congested sink."""
RELEASE_BATCH = 64
"""Waiting branches let through per look at a drained sink."""


@final
class CongestionGate:
    """Where a turn's branches wait for its congested sinks (see the module docstring)."""

    def __init__(self, congested: Callable[[], bool]) -> None:
        self._congested = congested
        self._waiters: deque[anyio.Event] = deque()
        self._polling = False

    @property
    def waiting(self) -> int:
        """Branches waiting behind the poller."""
        return len(self._waiters)

    async def wait(self) -> None:
        """Return once this branch may go on."""
        if self._polling:
            event = anyio.Event()
            self._waiters.append(event)
            await event.wait()
            return
        if not self._congested():
            return
        self._polling = True
        try:
            while True:
                while self._congested():
                    await anyio.sleep(POLL_SECONDS)
                for _ in range(min(RELEASE_BATCH, len(self._waiters))):
                    self._waiters.popleft().set()
                if not self._waiters:
                    return
                await anyio.sleep(0)  # the released branches do their next piece of work
        finally:
            self._polling = False
            if self._waiters:
                # The poller was cancelled: nobody would wake the rest, so they all go on
                # (the sink sees a burst; no branch waits for ever).
                while self._waiters:
                    self._waiters.popleft().set()


__all__ = ["POLL_SECONDS", "RELEASE_BATCH", "CongestionGate"]
