"""A flow of the tests' own (not a demo) for runs shipped from another process.

``TeamSurvey`` forks one branch per team; the ``research`` team, after its pause, forks a
nested barrier of two analysts, so the tree grows while the run is live. Every branch
contributes to two reduced channels, and the coordinator first writes a plan the branches
read, so the inspector's visibility snapshot has something to show. ``config.pause``
(seconds, default 0) makes each branch wait before it reports — long enough for a browser
to watch, or for a test to kill the process mid-run — and ``config.teams`` sets the number
of teams.

Only logic steps: no model is called, so the process needs no provider.
"""

from __future__ import annotations

from typing import Any

import anyio

from runtime import (
    Channel,
    Flow,
    LogicStep,
    ModelSelection,
    Routable,
    RunStepRequest,
    Step,
    StepChannels,
)


class Survey(LogicStep):
    """The coordinator: writes the plan, forks the teams, reports what the join published."""

    async def run_logic(self) -> Routable:
        config: dict[str, Any] = self.get_context("config") or {}
        teams = ["research", *(f"team{i}" for i in range(1, int(config.get("teams", 3))))]
        self.save_state({"plan": {"teams": teams, "question": "What slows us down?"}})
        batch = await self.run_steps(
            [RunStepRequest(Team, key=name, params={"pause": config.get("pause", 0)})
             for name in teams])
        answers = self.flow.get_step_state(Team, "answers") or {}
        return f"{len(batch.fulfilled)} of {len(teams)} teams answered: {sorted(answers)}"


class Team(LogicStep):
    """One team: waits, contributes its answer; ``research`` asks two analysts first."""

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"answers": StepChannels.keyed_by_branch(), "votes": StepChannels.sum()}

    async def run_logic(self) -> Routable:
        invocation = self.parallel_invocation()
        pause = float(invocation.params["pause"])
        plan = self.flow.get_step_state(Survey, "plan")
        if pause:
            await anyio.sleep(pause)
        if invocation.key == "research":  # forks after its pause: the tree grows later
            await self.run_steps([RunStepRequest(Team, key=f"analyst{i}",
                                                 params={"pause": pause}) for i in (1, 2)])
        self.contribute_state("answers", f"{invocation.key}: {plan['question']} meetings")
        self.contribute_state("votes", 1)
        return invocation.key


class TeamSurvey(Flow):
    """A nested fan-out of logic steps."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Survey(self), Team(self)]
