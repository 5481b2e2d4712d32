"""How a stopped turn ends: the current step's grace period, then the hard stop.

``FlowEngine.run(..., cancel=token)`` runs the current step through :func:`run_step`. When
the token fires, cooperation comes first: every barrier of the turn is told (root barriers
link their tokens to the turn's), queued branches never start, running ones get the flow's
``cancellation_grace``, and top-level code stops at its next model call or crossing
(:meth:`Turn.stop_if_cancelled`). The step gets the same grace period to return by itself.
After it the step is cancelled hard — but not before the turn's root barriers have closed
their late branches and published, which they do at the end of that same grace period:
cutting a barrier off while it reports its outcomes would leave branches the events say are
still running, or a checkpoint half-saved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from .turn import Turn


async def run_step(turn: Turn, message: str | None) -> str | None:
    """Run the turn's current step; its reply, or None when it was stopped hard."""
    step = turn.flow.require_current_step()
    token = turn.turn_cancel
    if token is None:
        return await step.run(message)
    grace = turn.parallel_config().cancellation_grace
    scope = anyio.CancelScope()
    replies: list[str] = []
    failures: list[Exception] = []

    async def stop_hard_after_grace() -> None:
        await token.wait()
        await anyio.sleep(grace)
        await turn.root_barriers_closed()
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_hard_after_grace)
        with scope:
            # Caught here: a task group would raise what its body raised wrapped in an
            # exception group, and the engine must see the step's own error.
            try:
                replies.append(await step.run(message))
            except Exception as exc:
                failures.append(exc)
        tg.cancel_scope.cancel()
    if failures:
        raise failures[0]
    return replies[0] if replies else None
