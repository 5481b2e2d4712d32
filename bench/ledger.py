"""Branch-ledger benchmark: one turn of N model-calling branches, ledger on vs off.

One ``run_steps()`` barrier over N branches (no concurrency limit); each branch makes one
model call that answers after L ms (the scripted model's latency), contributes a line to
a reduced channel and saves a field of its own. Variants, interleaved round by round (a
fresh store and session per run):

  * ``sqlite``: the SQLite session store, ``ledger=False``: the baseline;
  * ``sqlite+ledger``: the same with ``ledger=True`` (every fulfilled branch written to the
    ledger in batches; the turn's record written at the fork, dropped at the final save);
  * with ``--postgres``: ``django-pg`` and ``django-pg+ledger``, the Django store on a
    private PostgreSQL cluster (``tests.webhelpers.PostgresServer``, as the tests start
    one), migrated first.

Prints the median wall time of each variant and the ledger's ratio to its baseline (median
of per-round ratios, quartiles in brackets), and how many entries the ledger wrote in the
last run. The goal is under 1.3x.

With every branch answering after exactly L ms, the branches all end in one burst; the
ledger writes a burst as one batch once it is over (or at 2,048 entries, or 250 ms), and
a turn that ends well drops what was still pending, unwritten. ``--spread`` gives branch
``i`` a latency of ``L * (0.5 + (i % 100) / 100)`` instead, so branches end over L ms;
``--max-delay-ms`` shortens the 250 ms an entry may wait for its batch, so that the
ledger writes entries as branches end (with 10 ms, nearly all before the join): the cost
of a ledger that is written, not only of one that is kept.

    .venv/bin/python bench/ledger.py [--n 1000] [--latency-ms 100] [--reps 5] [--postgres]
                                     [--spread] [--max-delay-ms MS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio
from ratios import interleaved, ratio, spread

from runtime import (
    Channel,
    Flow,
    FlowEngine,
    LogicStep,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ParallelConfig,
    Routable,
    Rule,
    RunStepRequest,
    ScriptedModel,
    SessionStore,
    SQLiteSessionStore,
    Step,
    StepChannels,
    TokenUsage,
)
from runtime.barrier import ledger as ledger_module
from runtime.barrier.ledger import TurnLedger


class Worker(Step):
    """One model call; a contribution and a field of its own."""

    def get_prompt(self) -> str:
        return "Answer briefly."

    def parallel_state_channels(self) -> dict[str, Channel]:
        return {"notes": StepChannels.append()}

    async def on_response(self, result: Any) -> Routable:
        index = self.parallel_invocation().index
        self.contribute_state("notes", f"{index}: {result}")
        self.save_state({f"answer_{index}": result})
        return str(result)


class Fan(LogicStep):
    async def run_logic(self) -> Routable:
        n, ledger = self.get_context("config.n"), self.get_context("config.ledger")
        batch = await self.run_steps(
            [RunStepRequest(Worker, key=f"w{i}", user_message=f"item {i}") for i in range(n)],
            ledger=ledger)
        return f"{len(batch.fulfilled)} fulfilled"


class LedgerBenchFlow(Flow):
    retry_delay = 0.0
    max_model_calls_per_turn = 1_000_000

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="scripted", name="bench")

    def define_steps(self) -> list[Step | type[Step]]:
        return [Fan, Worker]

    def config_parallel_execution(self) -> ParallelConfig:
        return ParallelConfig(max_invocations=1_000_000)


class SpreadModel(ScriptedModel):
    """Answers request ``item i`` after ``latency * (0.5 + (i % 100) / 100)``."""

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        last = request.last_message
        index = int(last.content.rsplit(" ", 1)[-1]) if last is not None else 0
        await anyio.sleep(self.latency * (0.5 + (index % 100) / 100))
        return ModelResponse(content="an answer",
                             usage=TokenUsage(input_tokens=5, output_tokens=2, total_tokens=7))


WRITTEN: list[int] = []
"""Entries the ledger wrote, per ledgered run."""
_written = [0]
_flush = TurnLedger.flush


async def _counting_flush(self: TurnLedger) -> None:
    """The ledger's flush, counting what it wrote (for the report line)."""
    before = self.written
    await _flush(self)
    _written[0] += self.written - before


TurnLedger.flush = _counting_flush  # type: ignore[method-assign]


def variant(make_store: Callable[[], Awaitable[SessionStore]], n: int, latency: float,
            ledger: bool, spread: bool = False) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        store = await make_store()
        model = (SpreadModel if spread else ScriptedModel)(
            [Rule(text="an answer")], latency=latency, keep_requests=False)
        engine = FlowEngine(flows=[LedgerBenchFlow], providers={"scripted": model}, store=store,
                            ship_to_dashboard=False)
        _written[0] = 0
        start = time.perf_counter()
        reply = await engine.run("LedgerBenchFlow", "go", str(uuid.uuid4()),
                                 {"n": n, "ledger": ledger})
        elapsed = time.perf_counter() - start
        assert reply.success and reply.message == f"{n} fulfilled", reply
        if ledger:
            WRITTEN.append(_written[0])
        await store.close()
        return elapsed

    return run


def django_store_on(database_url: str) -> Callable[[], Awaitable[SessionStore]]:
    """The Django store on ``database_url``, migrated once."""
    os.environ.update({"DATABASE_URL": database_url, "PICOFLOW_DEBUG": "0",
                       "DJANGO_SETTINGS_MODULE": "picoflow_web.config.settings"})
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", "--noinput", verbosity=0)
    from picoflow_web.data.documents import SessionDocumentStore

    async def make() -> SessionStore:
        return SessionDocumentStore()

    return make


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--postgres", action="store_true",
                        help="also the Django store on a private PostgreSQL cluster")
    parser.add_argument("--spread", action="store_true",
                        help="branch latencies spread over [L/2, 3L/2) instead of all L")
    parser.add_argument("--max-delay-ms", type=float, default=None,
                        help="the ledger's MAX_DELAY (how long an entry may wait for its "
                             "batch); small, every entry is written before the join")
    args = parser.parse_args(argv)
    latency = args.latency_ms / 1000
    if args.max_delay_ms is not None:
        ledger_module.MAX_DELAY = args.max_delay_ms / 1000
    folder = Path(tempfile.mkdtemp(prefix="ledger-bench-"))

    async def sqlite() -> SessionStore:
        return SQLiteSessionStore(folder / f"{uuid.uuid4()}.db")

    variants = {
        "sqlite": variant(sqlite, args.n, latency, False, args.spread),
        "sqlite+ledger": variant(sqlite, args.n, latency, True, args.spread),
    }
    pairs = [("sqlite+ledger", "sqlite")]
    server = None
    if args.postgres:
        from tests.webhelpers import postgres_server
        server = postgres_server()
        postgres = server.__enter__()
        django = django_store_on(postgres.create_database())
        variants["django-pg"] = variant(django, args.n, latency, False, args.spread)
        variants["django-pg+ledger"] = variant(django, args.n, latency, True, args.spread)
        pairs.append(("django-pg+ledger", "django-pg"))
    try:
        samples = interleaved(args.reps, variants)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    print(f"{args.n} branches, model latency {args.latency_ms:g} ms"
          f"{' spread' if args.spread else ''}, {args.reps} rounds; ledger entries written "
          f"in the last ledgered run: {WRITTEN[-1]}")
    for name, values in samples.items():
        print(f"  {name:<18} {statistics.median(values) * 1000:8.1f} ms")
    for top, bottom in pairs:
        print(f"  {top} / {bottom}: {ratio(samples, top, bottom):.2f}x "
              f"{spread(samples, top, bottom)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
