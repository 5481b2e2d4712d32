"""The flow of the ``resumed`` golden: a ledgered fan-out killed mid-way, then resumed.

:class:`SurveyFlow`'s desk forks four surveyors into one ledgered barrier
(``run_steps(..., ledger=True)``); each asks the model about its site, contributes a line
to the desk's tally and saves its count. In turn 1 the executor dies (``ProcessKilled``)
as the third surveyor's model answers, after the first two were fulfilled and ledgered.
Turn 2 is ``FlowEngine.resume``: the first two are ``branch.reused`` (their models are not
called again), the last two run, and the join reduces the four in request-path order.
"""

from __future__ import annotations

from typing import Any

from runtime import (
    Channel,
    LogicStep,
    ModelRequest,
    ModelResponse,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    Step,
    StepChannels,
)
from tests.golden.flows import GoldenBranch, GoldenFlow, ProcessKilled, _scaled

SITES = 4
KILLED_AT = 2
"""The surveyor whose model call kills the executor in turn 1 (its answer at 5 units)."""


class Surveyor(GoldenBranch):
    """One site: a model call, a tally line and a count of its own."""

    def get_prompt(self) -> str:
        return "Count the tide pools at the site you are given."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"tally": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        invocation = self.parallel_invocation()
        self.contribute_state("tally", f"{invocation.key}: {result}")
        self.save_state({f"site_{invocation.index}": result})
        return str(result)


class SurveyDesk(LogicStep):
    """Forks the surveyors into one ledgered barrier and sums up."""

    async def run_logic(self) -> Routable:
        batch = await self.run_steps(
            [RunStepRequest(Surveyor, key=f"site-{i}", user_message=f"site {i}")
             for i in range(SITES)], ledger=True)
        self.save_state({"surveyed": len(batch.fulfilled)})
        return f"{len(batch.fulfilled)} sites surveyed"


class SurveyFlow(GoldenFlow):
    """A ledgered survey of four sites."""

    id = "SurveyFlow"

    def define_steps(self) -> list[Step | type[Step]]:
        return [SurveyDesk, Surveyor]


def survey_flow(latency: float) -> tuple[type[GoldenFlow], ScriptedModel]:
    """:class:`SurveyFlow` at time unit ``latency``: site ``i`` answers after ``2 i + 1``
    units; site 2's first call kills the executor (its second answers)."""

    def die(request: ModelRequest) -> ModelResponse:
        raise ProcessKilled("the executor was killed")

    answers = ["3 pools", "5 pools", "2 pools", "4 pools"]
    return _scaled(SurveyFlow, latency), ScriptedModel([
        Rule(step="Surveyor", last=f"^site {KILLED_AT}$", latency=(2 * KILLED_AT + 1) * latency,
             respond=die, times=1),
        *[Rule(step="Surveyor", last=f"^site {i}$", latency=(2 * i + 1) * latency, text=text)
          for i, text in enumerate(answers)],
    ])
