"""A readable text dump of a run's events (``python -m runtime trace FILE.jsonl``).

One line per event, indented by invocation depth, without the envelope's clock and ids, so
a dump of a deterministic run is stable enough to commit next to its trace (the golden
files in ``tests/golden/``). After the events comes the folded summary: the barrier tree
with each join's publication and each branch's status (and, when its writes were
discarded, why), the final canonical state, and what the fold could not place (its
anomalies; a recorded run has none).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from . import schema as ev
from .fold import RunModel, barrier_publication_of, comparable, fold, publication_of, runs_of
from .sinks import read_jsonl

_ENVELOPE = {"v", "run_id", "session_id", "seq", "time", "offset", "path", "type"}
_NOISY = {"messages", "latency", "duration"}


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _depth(path: str) -> int:
    return 0 if path == "" else path.count(".") + 1


def dump_trace(events: Sequence[ev.Event]) -> str:
    """The dump of one run's events."""
    lines: list[str] = []
    for event in events:
        data = ev.EVENT_ADAPTER.dump_python(event, mode="json")
        fields = " ".join(
            f"{k}={_short(v)}" for k, v in data.items()
            if k not in _ENVELOPE and k not in _NOISY
        )
        where = f" @{event.path}" if event.path else ""
        lines.append(f"{'  ' * _depth(event.path)}{event.seq:>4} {event.type}{where} {fields}")
    run = fold(events)
    lines.append("")
    ended = run.interruption or run.cancellation
    lines.append(f"run {run.flow}: {run.status}" + (
        f" ({ended['reason']})" if ended is not None else ""))
    for barrier in run.barriers.values():
        indent = "  " * (_depth(barrier.caller) + 1)
        lines.append(f"{indent}barrier {barrier.id} ({barrier.policy}) by "
                     f"{barrier.caller_step or 'top'}: {_joined(run, barrier.id, barrier.outcome)}"
                     + (" (interrupted)" if barrier.interrupted else ""))
        for path in barrier.branches:
            inv = run.invocations[path]
            detail = _short(inv.output, 60) if inv.status == "fulfilled" else (
                "(interrupted)" if inv.interrupted else (inv.error or {}).get("code", ""))
            fate = publication_of(run, path)
            dropped = f" [discarded: {fate.reason}]" if fate and fate.state == "discarded" else ""
            reused = f" (reused from {inv.reused['run_id']})" if inv.reused else ""
            lines.append(f"{indent}  [{inv.index}] {inv.step} key={inv.key} path={path} "
                         f"{inv.status}{reused} {detail}{dropped}")
    for call in run.concurrent:
        lines.append(f"  concurrent {call.group} -> {call.flow}: {len(call.batch_list)} of "
                     f"{call.batches} batches of {call.batch_size}")
        for child in sorted(call.children.values(), key=lambda c: c.item):
            lines.append(f"    [{child.item}] batch {child.batch} {child.status} "
                         f"run={child.run_id} attempts={child.attempts}")
    lines.append(f"state {_short(comparable(run.state), 2000)}")
    if run.unsaved:
        lines.append("unsaved (published in memory, not saved: the turn was stopped) "
                     + ", ".join(f"{u['step']}.{u['field']}" for u in run.unsaved))
    lines += [f"anomaly at {a.seq}: {a.message}" for a in run.anomalies]
    return "\n".join(lines) + "\n"


def _joined(run: RunModel, barrier_id: str, outcome: str) -> str:
    """A join's word: its outcome, except that a join.published whose record applied
    nothing (or whose publication an enclosing join discarded) does not read "published"."""
    found = barrier_publication_of(run, barrier_id)
    if outcome != "published" or found is None or found["state"] == "published":
        return outcome
    if found["state"] == "nothing":
        return "nothing published"
    if found["state"] == "scoped":
        return "published into the caller's scope"
    return f"discarded ({found['reason']})"


USAGE = """usage:
  python -m runtime trace FILE.jsonl   readable dump of each run in a JSONL export
  python -m runtime schema             the events' JSON Schema (for the browser)"""


def main(argv: Sequence[str]) -> int:
    """The ``python -m runtime`` command line."""
    if list(argv) == ["schema"]:
        print(json.dumps(ev.json_schema(), indent=2, sort_keys=True))
        return 0
    if len(argv) != 2 or argv[0] != "trace":
        print(USAGE)
        return 2
    try:
        events = read_jsonl(argv[1])
    except (OSError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    for run_events in runs_of(events).values():
        print(dump_trace(run_events))
    return 0
