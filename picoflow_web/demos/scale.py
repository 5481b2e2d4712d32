"""FanOutFlow: one barrier over many branches, for watching scale and steady streams.

Config (``config`` of the first turn, all optional): ``branches`` (default 1,000, at most
100,000), ``rate`` (branches finishing per second; 0 = as fast as possible) and
``concurrency`` (branches running at once; default: all) and ``fail_every`` (every n-th
branch raises, so the overview has failures to show; default: none). Each fulfilled branch
contributes to a ``sum`` and a ``keyed_by_branch`` channel, so the join has real reducing
to do.
"""

from __future__ import annotations

from typing import Any, cast

import anyio
from pydantic import BaseModel, Field

from runtime import (
    Channel,
    Flow,
    LogicStep,
    ModelSelection,
    ParallelConfig,
    Routable,
    RunStepRequest,
    Step,
    StepChannels,
)

MAX_BRANCHES = 100_000


class FanOutConfig(BaseModel):
    """How wide the barrier is and how fast its branches finish."""

    branches: int = Field(1000, ge=1, le=MAX_BRANCHES, description="Branches to fork.")
    rate: float = Field(0, ge=0, le=1_000_000,
                        description="Branches finishing per second; 0: as fast as possible.")
    concurrency: int | None = Field(None, ge=1, le=MAX_BRANCHES,
                                    description="Branches running at once; empty: all.")
    fail_every: int | None = Field(None, ge=1, le=MAX_BRANCHES,
                                   description="Every n-th branch raises; empty: none.")


class TickFailed(Exception):
    """The error a branch picked by ``fail_every`` raises."""


class Tick(LogicStep):
    """One branch: waits its turn, then contributes its index."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"total": StepChannels.sum(), "by_key": StepChannels.keyed_by_branch()}

    # A branch's run_logic() returns its output (any value), not a route.
    async def run_logic(self) -> Any:
        invocation = self.parallel_invocation()
        delay = invocation.params["delay"]
        if delay:
            await anyio.sleep(delay)
        if invocation.params.get("fail"):
            raise TickFailed(f"branch {invocation.index} was picked to fail")
        self.contribute_state("total", 1)
        self.contribute_state("by_key", invocation.index)
        return invocation.index


class FanOut(LogicStep):
    """Forks the configured number of branches and reports what the join published."""

    async def run_logic(self) -> Routable:
        config = cast(FanOutConfig, self.flow.get_config())
        count, rate, concurrency = config.branches, config.rate, config.concurrency
        every = config.fail_every
        # With `concurrency` branches at a time, each must take concurrency/rate seconds
        # for `rate` branches to finish per second.
        delay = (concurrency or count) / rate if rate > 0 else 0
        batch = await self.run_steps(
            [RunStepRequest(Tick, key=f"t{i}",
                            params={"delay": delay, "fail": bool(every and (i + 1) % every == 0)})
             for i in range(count)],
            max_concurrency=concurrency,
        )
        total = self.flow.get_step_state(Tick, "total")
        return f"{len(batch.fulfilled)} of {count} branches joined; total {total}."


class FanOutFlow(Flow):
    """Many branches under one barrier (no model calls)."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="none")

    def define_steps(self) -> list[Step]:
        return [FanOut(self), Tick(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=MAX_BRANCHES)

    def config_schema(self) -> type[BaseModel]:
        return FanOutConfig
