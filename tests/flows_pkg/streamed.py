"""A flow whose model streams its answer and is held mid-answer at a gate the test opens,
as ``PICOFLOW_FLOWS=tests.flows_pkg.streamed:flows`` serves it in a real worker.

The turn forks one branch (``note``) whose model call writes :data:`FIRST`, writes
``written`` in the folder the config names, waits until ``open`` appears there, then writes
:data:`SECOND` and answers with both. Files, because the test and the worker are different
processes.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
from pydantic import BaseModel

from runtime import (
    Flow,
    LogicStep,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    Routable,
    RunStepRequest,
    Step,
)
from runtime.streaming import stream_delta

FIRST = "The tide comes in twice a day, "
SECOND = "at dawn and at dusk; the harbour empties in between."


class GateConfig(BaseModel):
    folder: str


class Writer(Step):
    """Writes the tide note (one model call)."""

    def get_prompt(self) -> str:
        return f"Write the tide note. Gate folder: {self.flow.get_config().folder}"


class Editor(LogicStep):
    """Has the note written in a branch."""

    async def run_logic(self) -> Routable:
        batch = await self.run_steps([RunStepRequest(Writer, key="note")])
        return str(batch.fulfilled[0].output)


class GatedWriterModel:
    """Streams the first half of its answer, then waits at the gate for the second."""

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        found = re.search(r"Gate folder: (.+)$", request.system_prompt)
        assert found is not None, request.system_prompt
        folder = Path(found.group(1))
        stream_delta(FIRST)
        (folder / "written").touch()
        while not (folder / "open").exists():
            await anyio.sleep(0.02)
        stream_delta(SECOND)
        return ModelResponse(content=FIRST + SECOND)


class StreamedNoteFlow(Flow):
    """A branch's model streams its answer, held mid-answer until the test opens a gate."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="gated-stream", name="writer")

    def model_providers(self) -> dict[str, Model]:
        return {"gated-stream": GatedWriterModel()}

    def define_steps(self) -> list[Step]:
        return [Editor(self), Writer(self)]

    def config_schema(self) -> type[BaseModel]:
        return GateConfig


flows = [StreamedNoteFlow]
