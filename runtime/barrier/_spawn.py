"""Where a barrier's branches run: one task each, in a group that ends after the last.

Why not anyio's task group on asyncio too: anyio 4 starts every task through a handle of
its own, with a cancel scope and a second coroutine per task, which costs as much as a
whole no-op branch does otherwise (``bench/fanout.py`` measures both). So on asyncio the
branches run in an :class:`asyncio.TaskGroup` of the loop that is running (never a loop of
our own); on trio, in anyio's task group.

What differs between the two, and why neither breaks a rule of the seed:

- Stopping one branch (grace period expired, token budget spent) cancels its task once.
  On asyncio that is one ``CancelledError`` at the branch's next await: asyncio's own,
  edge-triggered cancellation (an anyio shield inside the branch does not hold it back).
  On trio the cancellation holds at every await until the branch ends. Either way the
  branch's view was closed first, so what it writes afterwards is dropped; a branch that
  swallows the ``CancelledError`` is cancelled again once per grace period until it ends
  (the driver's ``_watch_cancel``), so it cannot keep its barrier, or a stopped turn, open.
- Cancelling the caller (a cancel scope around ``run_steps``, the turn being stopped)
  reaches every branch either way: asyncio's group cancels its tasks when the task waiting
  on it is cancelled, and re-raises the cancellation once they have ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Protocol

import anyio


class BranchTask(Protocol):
    """A started branch's task, as the driver holds it: all it may do is cancel it."""

    def cancel(self) -> object: ...


BranchBody = Coroutine[Any, Any, None]
Spawn = Callable[[BranchBody], BranchTask | None]
"""Starts one branch's body (its coroutine, not yet started) in the group and gives back
its task. On asyncio it is the group's own ``create_task``: no frame of ours per branch."""


def _on_asyncio() -> bool:
    """Whether the caller runs in an asyncio task (not trio, and not trio's guest mode on
    an asyncio loop, where a loop runs but no asyncio task does)."""
    try:
        return asyncio.current_task() is not None
    except RuntimeError:  # no asyncio loop running in this thread
        return False


@asynccontextmanager
async def branch_group() -> AsyncIterator[Spawn]:
    """A task group for the branches of one barrier; leaving it waits for all of them."""
    if _on_asyncio():
        async with asyncio.TaskGroup() as group:
            yield group.create_task
        return
    async with anyio.create_task_group() as tg:
        yield lambda body: tg.start_soon(_run, body)


async def _run(body: BranchBody) -> None:
    await body
