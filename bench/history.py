"""History benchmark: does a turn's cost per branch grow with the session it continues?

One session of ``FanFlow`` turns (``bench/fanout.py``: ``Fan`` forks N ``Adder`` branches,
each contributing one item to an append channel). Turn 1 starts the session; the channel
then holds N items more after every turn, and the session's sequence trail N entries more.
For each turn it prints, per branch: the barrier's time and the whole turn's time, without
sinks and with a ``MemorySink``, and the ratio of the last turn to the first (target: at
most 1.2x, whatever the session's size). Variants run interleaved (a session each),
``gc.collect()`` before every turn, and the printed ratio is the median over ``--reps``
sessions of the per-session ratios.

    PICOFLOW_DEBUG=0 .venv/bin/python bench/history.py [--n 1000] [--turns 4] [--reps 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from fanout import TIMINGS, FanFlow  # noqa: E402

from runtime import FlowEngine  # noqa: E402
from runtime.events import MemorySink  # noqa: E402

TARGET = 1.2


async def session(n: int, turns: int, observed: bool) -> list[tuple[float, float]]:
    """(barrier seconds, turn seconds) of each turn of one new session."""
    sink = MemorySink()
    engine = FlowEngine(flows=[FanFlow], sinks=[sink] if observed else [])
    session_id: str | None = None
    out = []
    for _ in range(turns):
        # Each turn's events are dropped before the next, as a sink that ships them does:
        # kept, every turn's collections would walk all earlier turns' events too.
        sink.events.clear()
        TIMINGS.clear()
        gc.collect()
        start = time.perf_counter()
        reply = await engine.run("FanFlow", "go", session_id, config={"n": n, "kind": "add"})
        elapsed = time.perf_counter() - start
        assert reply.success, reply.message
        session_id = reply.session_id
        out.append((TIMINGS[0], elapsed))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    n, turns = args.n, args.turns
    runs: dict[bool, list[list[tuple[float, float]]]] = {False: [], True: []}
    anyio.run(session, n, 2, True)  # warm-up
    for _ in range(args.reps):
        for observed in (False, True):
            runs[observed].append(anyio.run(session, n, turns, observed))
    print(f"{turns} turns of one session, {n} branches each contributing one item "
          f"(the channel holds {n * (turns - 1):,} items at the last turn), median of "
          f"{args.reps} sessions, µs per branch")
    for observed in (False, True):
        label = "MemorySink" if observed else "no sink"
        for turn in range(turns):
            barrier = statistics.median(r[turn][0] for r in runs[observed]) / n * 1e6
            whole = statistics.median(r[turn][1] for r in runs[observed]) / n * 1e6
            print(f"  {label:<10} turn {turn + 1}: barrier {barrier:7.1f}   turn {whole:7.1f}")
        for part, index in (("barrier", 0), ("turn", 1)):
            ratio = statistics.median(r[-1][index] / r[0][index] for r in runs[observed])
            print(f"  {label:<10} last turn / first turn, {part:<7} {ratio:5.2f}x "
                  f"(target <= {TARGET})")


if __name__ == "__main__":
    main()
