"""A ledgered fan-out of model-calling branches, as
``PICOFLOW_FLOWS=tests.flows_pkg.ledgered:SiteSurveyFlow`` serves it to the resume tests.

The config names a folder: the desk forks ``branches`` surveyors into one barrier that
the flow's ``ParallelConfig(ledger=True)`` ledgers; each asks the model about its site.
The model appends every call's message to ``calls`` in the folder (so a test counts them
from any process) and holds the answers of sites from ``hold_from`` on until ``open``
appears there: the test interrupts or stops the run while they wait, once the ledger holds
the others. Files, because a browser test's worker is another process.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from runtime import (
    Flow,
    LogicStep,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ParallelConfig,
    Routable,
    RunStepRequest,
    Step,
    StepChannels,
    TokenUsage,
)
from runtime.barrier import Channel

USAGE = TokenUsage(input_tokens=10, output_tokens=5, total_tokens=15)
"""What every call spends."""


class SurveyConfig(BaseModel):
    folder: str
    branches: int = Field(6, ge=1, le=200)
    hold_from: int = Field(3, ge=0)


class FolderModel:
    """Answers ``<n> pools``; counts and holds calls through the folder the prompt names."""

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        match = re.search(r"folder (.+?); hold from (\d+)\.", request.system_prompt)
        assert match is not None, request.system_prompt
        folder, hold_from = Path(match.group(1)), int(match.group(2))
        last = request.last_message
        said = last.content if last is not None else ""
        with (folder / "calls").open("a") as calls:
            calls.write(said + "\n")
        site = int(said.rsplit(" ", 1)[-1])
        while site >= hold_from and not (folder / "open").exists():
            await asyncio.sleep(0.02)
        return ModelResponse(content=f"{site + 2} pools", usage=USAGE)


class Surveyor(Step):
    """One site: one model call, a tally line and a count of its own."""

    def get_prompt(self) -> str:
        config = self.flow.get_config()
        return (f"Count the tide pools at the site you are given (folder {config.folder}; "
                f"hold from {config.hold_from}.)")

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"tally": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        invocation = self.parallel_invocation()
        self.contribute_state("tally", f"{invocation.key}: {result}")
        self.save_state({f"site_{invocation.index}": result})
        return str(result)


class SurveyDesk(LogicStep):
    """Forks the surveyors into one barrier (ledgered by the flow's default)."""

    async def run_logic(self) -> Routable:
        branches = self.flow.get_config().branches
        batch = await self.run_steps(
            [RunStepRequest(Surveyor, key=f"site-{i}", user_message=f"site {i}")
             for i in range(branches)])
        self.save_state({"surveyed": len(batch.fulfilled)})
        return f"{len(batch.fulfilled)} sites surveyed"


class SiteSurveyFlow(Flow):
    """Surveys sites in one ledgered fan-out: a stopped or interrupted run resumes."""

    retry_delay = 0

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="folder-models", name="folder")

    def model_providers(self) -> dict[str, Model]:
        return {"folder-models": FolderModel()}

    def define_steps(self) -> list[Step | type[Step]]:
        return [SurveyDesk, Surveyor]

    def config_schema(self) -> type[BaseModel]:
        return SurveyConfig

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(ledger=True, cancellation_grace=0.0)


def calls(folder: Path) -> list[str]:
    """The model calls made so far, in order."""
    path = folder / "calls"
    return path.read_text().splitlines() if path.exists() else []
