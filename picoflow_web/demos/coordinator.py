"""ResearchDesk: a coordinator demo. One research question per item, each sent as an
independent ``Researcher`` request through the app's own ``/ai/run``
(``Flow.concurrent_steps()``), in batches; the desk's reply lists every answer and every
child that did not answer.

Config: ``topic``, ``questions`` (how many, default 6), ``batch_size`` (default 3),
``timeout`` (seconds per child, default 60). The dashboard's ``serve`` gives its workers
the self URL and a run-scoped token, so it works from the start form; elsewhere set
``PICOFLOW_SELF_URL`` and ``PICOFLOW_SELF_TOKEN``. A coordinator holds a worker while its
children run on the others: give it at least two.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel, Field

from runtime import ChildReply, Flow, LogicStep, ModelSelection, Routable, Step

DEFAULT_LATENCY = 0.2


class DeskConfig(BaseModel):
    """What to research, and how many children at once."""

    topic: str = Field("tide pools", min_length=1, max_length=80,
                       description="What the questions are about.")
    questions: int = Field(6, ge=1, le=50, description="Questions: one child run each.")
    batch_size: int = Field(3, ge=1, le=20, description="Children sent at once.")
    timeout: float = Field(60.0, gt=0, le=600, description="Seconds a child may take.")


class ResearcherConfig(BaseModel):
    question: str = "What is known?"
    angle: int = 0


ANGLES = ("history", "ecology", "economics", "open questions", "methods", "sources")


class Desk(LogicStep):
    """Sends the questions out and reports what came back."""

    async def run_logic(self) -> Routable:
        return await self.flow.spawn_steps()


class ResearchDesk(Flow):
    """A coordinator: one Researcher run per question, in batches."""

    unit = DEFAULT_LATENCY

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def config_schema(self) -> type[BaseModel]:
        return DeskConfig

    def example_messages(self) -> list[str]:
        return ["Research the topic"]

    def define_steps(self) -> list[Step]:
        return [Desk(self)]

    async def spawn_steps(self) -> str:
        config = DeskConfig.model_validate(self.get_context("config") or {})
        answers: dict[int, ChildReply] = {}

        def on_config(item: int) -> dict[str, Any]:
            angle = ANGLES[item % len(ANGLES)]
            return {"question": f"{config.topic}: {angle}?", "angle": item}

        def on_response(item: int, reply: ChildReply) -> None:
            answers[item] = reply

        result = await self.concurrent_steps(
            list(range(config.questions)), batch_size=config.batch_size, on_config=on_config,
            on_response=on_response, timeout=config.timeout, flow_name="Researcher")
        lines = [f"{len(result.fulfilled)} of {len(result.replies)} questions answered."]
        for item in sorted(answers):
            reply = answers[item]
            lines.append(f"{item + 1}. {reply.message}" if reply.ok
                         else f"{item + 1}. ({reply.status}: {reply.error})")
        return "\n".join(lines)


class Research(LogicStep):
    """Looks one question up (takes a few time units)."""

    async def run_logic(self) -> Routable:
        config = ResearcherConfig.model_validate(self.get_context("config") or {})
        unit = getattr(self.flow, "unit", DEFAULT_LATENCY)
        await anyio.sleep(unit * (2 + config.angle % 3))
        return f"Notes on {config.question}"


class Researcher(Flow):
    """A coordinator's child: answers one question."""

    unit = DEFAULT_LATENCY

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def config_schema(self) -> type[BaseModel]:
        return ResearcherConfig

    def needs_message(self) -> bool:
        return False

    def define_steps(self) -> list[Step]:
        return [Research(self)]


def coordinator_flows(latency: float = DEFAULT_LATENCY) -> list[type[Flow]]:
    """The desk and its researcher at time unit ``latency``."""
    return [type(flow.__name__, (flow,), {"id": flow.id, "unit": latency,
                                          "__doc__": flow.__doc__})
            for flow in (ResearchDesk, Researcher)]
