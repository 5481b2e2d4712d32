"""The flow ``bench/stream.py`` streams: one barrier of no-op branches behind a gate.

Registered in the benchmark's Daphne and worker with
``PICOFLOW_FLOWS=bench.stream_flow:StreamBenchFlow``. The gate is a file: the turn waits
until it exists, so the client can connect to the run's socket first and time only what
follows. A file, because the turn runs in a worker, not in the process the client talks to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from runtime import Flow, LogicStep, ModelSelection, ParallelConfig, RunStepRequest


class Noop(LogicStep):
    """A branch that does nothing."""

    async def run_logic(self) -> Any:
        return None


class Fan(LogicStep):
    """Waits for its gate file (if any), then runs one barrier over the no-op branches."""

    async def run_logic(self) -> Any:
        gate = self.get_context("config.gate")
        if gate:
            while not Path(gate).exists():
                await anyio.sleep(0.002)
        branches = int(self.get_context("config.branches") or 0)
        await self.run_steps([RunStepRequest(Noop, key=str(i)) for i in range(branches)])
        return f"{branches} branches"


class StreamBenchFlow(Flow):
    """Only logic steps: no model is called."""

    id = "StreamBenchFlow"

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Any]:
        return [Fan(self), Noop(self)]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=1_000_000)
