"""What ``PICOFLOW_FLOWS`` must refuse: things that are not Flow classes, a taken id."""

from __future__ import annotations

from runtime import Flow, ModelSelection


class NotAFlow:
    """A class, but not a Flow."""


not_a_class = 42

none_here: list[type[Flow]] = []


class HotelFlow(Flow):
    """Takes the id of a demo flow."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")


class Greeter2(Flow):
    """Takes the id of the greeter."""

    id = "GreeterFlow"

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")


class BadSchemaFlow(Flow):
    """Its config schema is not a pydantic model."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def config_schema(self) -> type:  # type: ignore[override]
        return dict
