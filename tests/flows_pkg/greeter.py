"""A user's flow, as ``PICOFLOW_FLOWS=tests.flows_pkg.greeter:GreeterFlow`` serves it: a
config schema of every kind of field, example messages, a required message, and its own
scripted model under a provider of its own."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from runtime import Flow, Model, ModelRequest, ModelSelection, Rule, ScriptedModel, Step


class GreeterConfig(BaseModel):
    """How to greet."""

    name: str = Field("Ada", min_length=1, max_length=40, description="Who to greet.")
    times: int = Field(1, ge=1, le=5, description="How many greetings.")
    tone: Literal["warm", "formal"] = "warm"
    shout: bool = False


class Greet(Step):
    def get_prompt(self) -> str:
        config = self.flow.get_config()
        return (f"Greet {config.name} {config.times} times, {config.tone}"
                f"{', shouting' if config.shout else ''}.")


def greet(request: ModelRequest) -> str:
    match = re.match(r"Greet (.+) (\d) times, (warm|formal)(, shouting)?\.", request.system_prompt)
    assert match is not None, request.system_prompt
    name, times, tone, shout = match.groups()
    word = "Hello" if tone == "warm" else "Good day"
    text = " ".join([f"{word}, {name}!"] * int(times))
    last = request.last_message
    said = last.content if last is not None else ""
    return f"{text.upper() if shout else text} You said: {said}"


MODEL = ScriptedModel([Rule(respond=greet, latency=0.3)], keep_requests=False,
                      name="greeter-script")


class GreeterFlow(Flow):
    """Greets whoever the config names, as often as it says."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="greeter-models", name="greeter-large")

    def define_steps(self) -> list[Step]:
        return [Greet(self)]

    def config_schema(self) -> type[BaseModel]:
        return GreeterConfig

    def example_messages(self) -> list[str]:
        return ["good morning", "<b>hostile</b> & sly"]

    def needs_message(self) -> bool:
        return True

    def model_providers(self) -> dict[str, Model]:
        return {"greeter-models": MODEL}


class EchoFlow(Flow):
    """Answers every message with the scripted model of the greeter package."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="greeter-models", name="echo")

    def define_steps(self) -> list[Step]:
        return [Echo(self)]

    def model_providers(self) -> dict[str, Model]:
        return {"greeter-models": ScriptedModel([Rule(text="echo")], keep_requests=False)}


class Echo(Step):
    def get_prompt(self) -> str:
        return "Echo."


flows = [GreeterFlow, EchoFlow]
"""The ``package.module:flows`` form: an iterable of Flow classes."""
