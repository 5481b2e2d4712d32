"""What the barrier needs from the flow that runs it, written down as Protocols.

The barrier package imports nothing of the core (flows, steps, the engine): the core hands
it a :class:`BarrierHost` — in practice the engine-owned object behind a turn — and the
barrier asks it for exactly these things. Anything not listed here, the barrier cannot
touch, which is what keeps a fork from moving the cursor or saving the session behind the
join's back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pydantic import BaseModel

from ..events import EventBus
from .ledger import TurnLedger
from .reducers import Channel
from .types import CancelToken, ParallelConfig
from .views import BranchView, View

PublishedValues = Mapping[tuple[str, str], tuple[Any, bool]]
"""``(step, field) -> (value, deleted)``: what a root join applies to canonical state."""


class StepHost(Protocol):
    """A registered step, as the barrier sees it when it forks one."""

    @property
    def name(self) -> str:
        """The registered step name (what paths, keys and events name)."""
        ...

    def parallel_params_schema(self) -> type[BaseModel] | None:
        """A model validating the ``params`` of requests for this step, if any."""
        ...


class BarrierHost(Protocol):
    """The turn a barrier runs in."""

    @property
    def observed(self) -> bool:
        """Whether anything listens to events (skip building them if not)."""
        ...

    def emit(self, cls: type[Any], path: str | None = None, **fields: Any) -> None:
        """Emit one event; ``path`` defaults to the executing invocation's."""
        ...

    @property
    def bus(self) -> EventBus | None:
        """The run's event bus, if any: the barrier's per-branch events go to it through
        their makers (:func:`runtime.events.event_maker`), one call each."""
        ...

    def require_step(self, target: type[Any] | str) -> StepHost:
        """The registered step for a class or name; raises for an unknown one."""
        ...

    @property
    def turn_cancel(self) -> CancelToken | None:
        """The turn's cancel token, if it has one: every root barrier links its own to it,
        so stopping the turn reaches every barrier and branch in it."""
        ...

    def root_barrier_open(self) -> AbstractContextManager[None]:
        """Held by a root barrier from its fork to its publication: a cancelled turn stops
        its step hard only once its barriers closed their late branches and published."""
        ...

    def parallel_config(self) -> ParallelConfig:
        """The flow's validated limits (depth, invocations, grace, model-call quota)."""
        ...

    def count_invocations(self, count: int, limit: int) -> None:
        """Reserve ``count`` branch invocations of the turn's budget, or raise."""
        ...

    def next_root_ordinal(self) -> int:
        """The ordinal of a new root barrier among this turn's root barriers."""
        ...

    def snapshot(self) -> View:
        """Canonical state fixed now: what a root barrier's branches read."""
        ...

    def live_view(self) -> View:
        """Canonical state as it is at each read: what a root join reduces from."""
        ...

    def channels_of(self, step: str) -> Mapping[str, Channel]:
        """The reduced channels a registered step declares."""
        ...

    async def run_branch(self, step: StepHost, view: BranchView, message: str | None) -> Any:
        """Run a fresh instance of ``step`` inside ``view``; return its output."""
        ...

    def apply_publication(self, values: PublishedValues) -> Callable[[], None]:
        """Apply a root join to canonical state; return a function that undoes it."""
        ...

    async def checkpoint(self) -> int:
        """Save the session now (the root-join checkpoint); return the new revision."""
        ...

    async def branch_ledger(self) -> TurnLedger:
        """The turn's branch ledger, its record stored (at the turn's first ledgered fork);
        raises ``ParallelConfigurationError`` when the session store keeps no ledger."""
        ...

    def reuse_tokens(self, view: BranchView, tokens: Mapping[str, int]) -> None:
        """Count the tokens a reused branch spent when it ran, as if it had run now."""
        ...
