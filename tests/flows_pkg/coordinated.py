"""A coordinator and its children, as ``PICOFLOW_FLOWS=tests.flows_pkg.coordinated:flows``
serves them (the tests' own, not demos).

``Census`` coordinates: twenty districts in batches of five, each sent as an independent
``Tally`` request through the app's own ``/ai/run``. By its config, one district's child
fails (``fail``), one runs past the coordinator's timeout (``sleep``) and one is sent with
a wrong token (``refused``); ``pause`` slows every child down so a browser can watch
the batches fill. ``Tally`` is the child: logic only, no model.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel

from runtime import ChildReply, Flow, LogicStep, ModelSelection, Routable, Step


class TallyFailed(Exception):
    """The district's count failed (a child turn that fails)."""


class Count(LogicStep):
    async def run_logic(self) -> Routable:
        config: dict[str, Any] = self.get_context("config") or {}
        await anyio.sleep(float(config.get("sleep", 0)) + float(config.get("pause", 0)))
        if config.get("fail"):
            raise TallyFailed(f"the count of {config.get('district')} did not add up")
        return f"{config.get('district')}: {len(str(config.get('district')))} households"


class Tally(Flow):
    """One district's count (a coordinator's child)."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Count(self)]


class CensusConfig(BaseModel):
    districts: int = 20
    batch_size: int = 5
    fail: int = 7
    """The district whose child fails (-1: none)."""
    sleep: int = 11
    """The district whose child runs past the timeout (-1: none)."""
    refused: int = 13
    """The district sent with a wrong token (-1: none). (Not named after tokens: the
    dashboard redacts config keys that look like secrets.)"""
    timeout: float = 4.0
    pause: float = 0.0


class Plan(LogicStep):
    async def run_logic(self) -> Routable:
        return "Start me with config _concurrent to coordinate."


class Census(Flow):
    """Coordinates one Tally per district."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def config_schema(self) -> type[BaseModel]:
        return CensusConfig

    def define_steps(self) -> list[Step]:
        return [Plan(self)]

    async def spawn_steps(self) -> str:
        config = CensusConfig.model_validate(self.get_context("config") or {})
        outcomes: dict[int, str] = {}

        def on_config(item: int) -> dict[str, Any]:
            return {"district": f"d{item}", "fail": item == config.fail,
                    "sleep": config.timeout * 3 if item == config.sleep else 0,
                    "pause": config.pause}

        def on_response(item: int, reply: ChildReply) -> None:
            outcomes[item] = reply.status

        await self.concurrent_steps(
            list(range(config.districts)), batch_size=config.batch_size, on_config=on_config,
            on_response=on_response, timeout=config.timeout, retries=1, backoff=0.2,
            flow_name="Tally",
            token=lambda item: "pf_wrong" if item == config.refused else None)
        self.save_step_state(Plan, {"outcomes": {str(k): v for k, v in sorted(outcomes.items())}})
        return " ".join(f"{k}:{v}" for k, v in sorted(outcomes.items()))


flows = [Census, Tally]
