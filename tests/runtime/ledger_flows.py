"""The flows of the branch-ledger tests, and a worker script that runs one until killed.

:class:`LedgerFlow`'s top-level step forks ``config.n`` model-calling branches into one
ledgered barrier (``config.mode`` says what they write: ``reducer`` contributions to an
``append`` channel and a field each, ``conflict`` two replacements of one field, ``atomic``
the atomic policy with a branch that fails, ``mutation`` a branch that writes the
coordinator's state, ``nested`` an inner ledgered barrier per branch). Every model call
is counted by request (:class:`CountingModel`), so a test knows exactly which branches
ran.

Run as a script (``python -m tests.runtime.ledger_flows <db> <session> <n> <blocked>``) it
runs that flow on a SQLite store with branches ``blocked`` and later waiting on their
model for ever: the test kills it once the ledger holds the others.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import anyio

from runtime import (
    Flow,
    FlowEngine,
    LogicStep,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ParallelConfig,
    Routable,
    RunStepRequest,
    SQLiteSessionStore,
    Step,
    StepChannels,
    TokenUsage,
)
from runtime.barrier import Channel

ALWAYS_FAILS = 13
"""The request index whose branch fails in the ``atomic`` mode, in every run."""


class CountingModel:
    """Answers ``answer(<message>)`` and counts calls by the request's last message.

    ``on_call``: awaited with the message before each answer (a test holds or watches a
    branch there); ``fail``: messages whose call raises; ``block_from``: calls for request
    indices from it on never answer.
    """

    def __init__(self, block_from: int | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.block_from = block_from
        self.fail: set[str] = set()
        self.on_call: Callable[[str], Any] | None = None

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.last_message
        text = last.content if last is not None else ""
        self.calls[text] += 1
        if self.on_call is not None:
            await self.on_call(text)
        if self.block_from is not None and _index(text) >= self.block_from:
            await anyio.sleep_forever()  # the worker is killed while these wait
        if text in self.fail:
            raise RuntimeError(f"no answer for {text}")
        return ModelResponse(content=f"answer({text})",
                             usage=TokenUsage(input_tokens=3, output_tokens=4, total_tokens=7))


def _index(text: str) -> int:
    digits = text.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else -1


class Researcher(Step):
    """One model call; what it writes depends on the flow's mode."""

    def get_prompt(self) -> str:
        return "Research the item."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"notes": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        invocation = self.parallel_invocation()
        mode = self.get_context("config.mode")
        if mode == "conflict" and invocation.index in (5, self.flow_n() - 3):
            self.save_state({"lead": invocation.key})
        else:
            self.contribute_state("notes", f"{invocation.key}:{result}")
            self.save_state({f"seen_{invocation.index}": result})
        if mode == "atomic" and invocation.index == ALWAYS_FAILS:
            raise RuntimeError("this branch always fails")
        if mode == "mutation" and invocation.index == ALWAYS_FAILS:
            # An invalid shared mutation: caught, it still invalidates the barrier.
            with contextlib.suppress(Exception):
                self.flow.save_step_state("Fan", {"meddled": True})
        if mode == "nested":
            inner = await self.run_steps(
                [RunStepRequest(Analyst, key=f"a{j}", user_message=f"{invocation.key}.{j}-{j}")
                 for j in range(3)], ledger=True)
            return " | ".join([result, *[b.output for b in inner.fulfilled]])
        return result

    def flow_n(self) -> int:
        n: int = self.get_context("config.n")
        return n


class Analyst(Step):
    """An inner branch of the ``nested`` mode: one model call, one contribution."""

    def get_prompt(self) -> str:
        return "Analyse."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"findings": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        self.contribute_state("findings", result)
        return result


class Fan(LogicStep):
    """Forks the branches; stores what the barrier returned (or the error it raised)."""

    variant: ClassVar[dict[int, str]] = {}
    """Request index -> another user message: a request that changed since the ledger."""
    explode: ClassVar[bool] = True
    """With ``config.explode``: the step fails after its join (a test turns it off for the
    resume)."""

    async def run_logic(self) -> Routable:
        n = self.get_context("config.n")
        mode = self.get_context("config.mode")
        requests = [RunStepRequest(Researcher, key=f"r{i}",
                                   user_message=self.variant.get(i, f"item-{i}"))
                    for i in range(n)]
        try:
            batch = await self.run_steps(
                requests, ledger=True,
                failure_policy="atomic" if mode == "atomic" else "retain-successes",
                max_concurrency=self.get_context("config.max_concurrency"))
        except Exception as exc:
            self.save_state({"error": type(exc).__name__, "message": str(exc)})
            return "invalid"
        self.save_state({"fulfilled": len(batch.fulfilled), "rejected": len(batch.rejected),
                         "outputs": [b.output for b in batch.branches]})
        if self.get_context("config.explode") and self.explode:
            raise RuntimeError("the step failed after the join")
        return "joined"


class LedgerFlow(Flow):
    """One ledgered fan-out of model-calling branches."""

    retry_delay = 0
    max_model_calls_per_turn = 100_000

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="counting")

    def define_steps(self) -> list[Step | type[Step]]:
        return [Fan, Researcher, Analyst]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=100_000, cancellation_grace=0.0)


def engine_for(model: CountingModel, store: Any = None, **kwargs: Any) -> FlowEngine:
    """An engine running :class:`LedgerFlow` with ``model``, shipping nowhere."""
    return FlowEngine(flows=[LedgerFlow], providers={"scripted": model}, store=store,
                      ship_to_dashboard=False, **kwargs)


def main(argv: list[str]) -> None:
    db, session_id, n, blocked = argv[0], argv[1], int(argv[2]), int(argv[3])

    async def run() -> None:
        engine = engine_for(CountingModel(block_from=blocked), SQLiteSessionStore(db))
        await engine.run("LedgerFlow", "Research everything", session_id,
                         {"n": n, "mode": "reducer"}, run_id="killed-run")

    anyio.run(run)


if __name__ == "__main__":
    main(sys.argv[1:])
