"""A run that keeps storing events until its test says stop, as
``PICOFLOW_FLOWS=tests.flows_pkg.ticking:flows`` serves it.

``Ticking`` saves its state every ``tick`` seconds (an event each time) until the file its
config names (``stop_file``) exists, or ``ticks`` ticks: a live server's test restarts
Daphne, reconnects and so on while the run goes on, however slow the machine is. While
``pause_file`` exists it stores nothing (as a run waiting on a model), and says so by
creating ``paused_file``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from runtime import Flow, LogicStep, ModelSelection, Step


class Tick(LogicStep):
    async def run_logic(self) -> str:
        config: dict[str, Any] = self.get_context("config") or {}
        stop = Path(str(config["stop_file"]))
        ticks = int(config.get("ticks", 3000))
        pause = Path(str(config.get("pause_file", stop.with_name("pause"))))
        paused = Path(str(config.get("paused_file", stop.with_name("paused"))))
        for tick in range(ticks):
            if pause.exists():
                paused.touch()
                while pause.exists():
                    await anyio.sleep(0.02)
            if stop.exists():
                return f"stopped after {tick} ticks"
            self.save_state({"tick": tick})
            await anyio.sleep(float(config.get("tick", 0.02)))
        return f"{ticks} ticks"


class Ticking(Flow):
    """Logic only, no model."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Tick(self)]


flows = [Ticking]
