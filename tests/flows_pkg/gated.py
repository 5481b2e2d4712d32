"""A flow whose turn waits at a gate the test opens, as
``PICOFLOW_FLOWS=tests.flows_pkg.gated:GateFlow`` serves it in a real worker.

The config names a folder: the turn writes ``reached`` there, waits until ``open`` appears
and answers ``opened``; a turn stopped while it waits writes ``stopped``. Files, because the
test and the worker are different processes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel

from runtime import Flow, LogicStep, Model, ModelSelection, Routable, ScriptedModel, Step


class GateConfig(BaseModel):
    folder: str


class Wait(LogicStep):
    async def run_logic(self) -> Routable:
        folder = Path(self.flow.get_config().folder)
        (folder / "reached").touch()
        try:
            while not (folder / "open").exists():
                await asyncio.sleep(0.02)
        except BaseException:  # stopped hard (after the grace period), or cancelled
            (folder / "stopped").touch()
            raise
        return "opened"


class GateFlow(Flow):
    """Waits for the test to open its gate, then answers."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="gate-models", name="none")  # never called

    def model_providers(self) -> dict[str, Model]:
        return {"gate-models": ScriptedModel([], keep_requests=False)}

    def define_steps(self) -> list[Step]:
        return [Wait(self)]

    def config_schema(self) -> type[BaseModel]:
        return GateConfig


flows = [GateFlow]
