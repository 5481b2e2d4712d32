"""Export the Python fold of every golden trace: ``.venv/bin/python tests/golden/export_fold.py``.

For each ``tests/golden/<name>.jsonl`` this writes ``<name>.fold.json``: per run, what
``runtime.events.fold`` makes of the committed events — the final canonical state, every branch
(status, output, what it could see as it finished and which sibling writes it could not),
every barrier's outcome, and snapshots of the fold stopped at chosen sequence numbers.
The browser's fold (``static/picoflow_web/js/fold.js``) must give the same answers:
``tests/js/fold.test.mjs`` folds the same ``.jsonl`` and compares. The contract test
``tests/contract/test_fold_exports.py`` checks that the committed exports are current.

``--check`` writes nothing and exits 1 when a committed export differs from a fresh one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the checkout is not on sys.path yet
    sys.path.insert(0, str(ROOT))

from runtime import events as ev  # noqa: E402
from runtime.events import (  # noqa: E402
    RunModel,
    barrier_publication_of,
    comparable,
    fold,
    publication_of,
    read_jsonl,
    runs_of,
    view_at,
)
from runtime.events.fold.concurrent import export_groups  # noqa: E402

GOLDEN_DIR = Path(__file__).resolve().parent
SNAPSHOT_TYPES = frozenset({
    "barrier.forked", "barrier.requested", "branch.fulfilled", "branch.rejected",
    "join.published", "join.invalidated", "checkpoint.saved", "checkpoint.failed",
    "cancel.requested",
    "run.interrupted", "concurrent.batch_finished", "model.delta",
})
"""Event types after which the export records a snapshot of the fold stopped there."""


def golden_names() -> list[str]:
    """Names of the committed golden traces, sorted."""
    return sorted(path.name.removesuffix(".jsonl") for path in GOLDEN_DIR.glob("*.jsonl"))


def export_path(name: str) -> Path:
    """Where the export of golden ``name`` is committed."""
    return GOLDEN_DIR / f"{name}.fold.json"


def _finish_seqs(events: list[ev.Event]) -> dict[str, int]:
    return {e.path: e.seq for e in events
            if isinstance(e, ev.BranchFulfilled | ev.BranchRejected)}


def _branch(run: RunModel, path: str, finished: dict[str, int]) -> dict[str, Any]:
    inv = run.invocations[path]
    at = finished.get(path, run.last_seq)
    seen = view_at(run, path, at)
    extra: dict[str, Any] = {"interrupted": True} if inv.interrupted else {}
    if inv.reused is not None:
        extra["reused"] = inv.reused
    return {**extra,
        "step": inv.step, "key": inv.key, "index": inv.index, "barrier": inv.barrier,
        "status": inv.status, "cancelled": inv.cancelled, "output": inv.output,
        "error": inv.error, "started": inv.started, "finished": inv.finished,
        "barriers": inv.barriers, "tokens": inv.tokens,
        "view_seq": at,
        "view_at_fulfilled": comparable(seen["state"]) if inv.status == "fulfilled" else None,
        "view_at_end": comparable(view_at(run, path)["state"]),
        "own": seen["own"],
        "invisible": seen["invisible"],
        "publication": _publication(run, path),
    }


def _publication(run: RunModel, path: str) -> dict[str, Any] | None:
    found = publication_of(run, path)
    return None if found is None else found.as_dict()


def _barrier(run: RunModel, barrier_id: str) -> dict[str, Any]:
    b = run.barriers[barrier_id]
    extra = {"interrupted": True} if b.interrupted else {}
    return {**extra,
        "caller": b.caller, "caller_step": b.caller_step, "policy": b.policy,
        "checkpoint": b.checkpoint, "base": b.base, "forked_seq": b.forked_seq,
        "branches": b.branches,
        "base_state": comparable(b.base_state) if b.base_state is not None else None,
        "outcome": b.outcome, "published": b.published, "discarded": b.discarded,
        "reductions": b.reductions, "error": b.error, "provenance": b.provenance,
        "checkpoint_revision": b.checkpoint_revision, "cancel_reason": b.cancel_reason,
        "joined_at": b.joined_at, "publication": barrier_publication_of(run, barrier_id),
    }


def _streams(run: RunModel) -> dict[str, Any]:
    """The open model attempts that have written something, by invocation path."""
    return {path: inv.streaming.as_dict() for path, inv in run.invocations.items()
            if inv.streaming is not None and (inv.streaming.text or inv.streaming.tool_calls)}


def _snapshot(events: list[ev.Event], upto: int) -> dict[str, Any]:
    run = fold(events, upto)
    streams = _streams(run)
    return {**({"streams": streams} if streams else {}),
        "upto": upto, "last_seq": run.last_seq, "status": run.status,
        "state": comparable(run.state), "tokens": run.tokens, "conflicts": run.conflicts,
        "statuses": {path: inv.status for path, inv in run.invocations.items() if path},
        "outcomes": {bid: b.outcome for bid, b in run.barriers.items()},
        "publications": {path: [found.state, found.reason] for path in run.invocations
                         if (found := publication_of(run, path)) is not None},
    }


def default_stops(events: list[ev.Event]) -> list[int]:
    """Where an export snapshots the fold: after every event of the :data:`SNAPSHOT_TYPES`,
    and at the middle event."""
    return sorted({e.seq for e in events if e.type in SNAPSHOT_TYPES}
                  | {events[len(events) // 2].seq})


def export_run(events: list[ev.Event], stops: list[int] | None = None) -> dict[str, Any]:
    """The Python fold of one run, as the browser's fold must reproduce it.

    ``stops`` are the seqs to snapshot the fold at (default: after every event of the
    :data:`SNAPSHOT_TYPES` and at the middle event). ``anomalies``, ``overflows``,
    ``interruption``, ``cancellation``, ``unsaved``, ``concurrent`` and ``streams`` (the open
    model attempts' streamed text; also in a snapshot), and a branch's or barrier's
    ``interrupted`` flag, are listed only when the fold recorded any, so the exports of
    runs that have none keep their shape.
    """
    run = fold(events)
    finished = _finish_seqs(events)
    if stops is None:
        stops = default_stops(events)
    extra: dict[str, Any] = {}
    if run.anomalies:
        extra["anomalies"] = [{"seq": a.seq, "message": a.message} for a in run.anomalies]
    if run.overflows:
        extra["overflows"] = [{"seq": o.seq, "sink": o.sink, "first": o.first, "last": o.last}
                              for o in run.overflows]
    if run.interruption is not None:
        extra["interruption"] = run.interruption
    if run.cancellation is not None:
        extra["cancellation"] = run.cancellation
    if run.unsaved:
        extra["unsaved"] = run.unsaved
    if run.concurrent:
        extra["concurrent"] = export_groups(run.concurrent)
    if streams := _streams(run):
        extra["streams"] = streams
    if run.resumes is not None:
        extra["resumes"] = run.resumes
    return {**extra,
        "run_id": run.run_id, "session_id": run.session_id, "flow": run.flow,
        "status": run.status, "reply": run.reply, "error": run.error, "cursor": run.cursor,
        "tokens": run.tokens, "last_seq": run.last_seq, "conflicts": run.conflicts,
        "state": comparable(run.state),
        "branches": {path: _branch(run, path, finished)
                     for path in run.invocations if path},
        "barriers": {bid: _barrier(run, bid) for bid in run.barriers},
        "snapshots": [_snapshot(events, seq) for seq in stops],
    }


def export(name: str) -> dict[str, Any]:
    """The export of golden ``name`` (every run of its ``.jsonl``, in order)."""
    events = read_jsonl(GOLDEN_DIR / f"{name}.jsonl")
    return {"golden": name,
            "runs": [export_run(run_events) for run_events in runs_of(events).values()]}


def dumps(data: dict[str, Any]) -> str:
    """The committed text of an export."""
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write (or check) the exports of the goldens named in ``argv`` (default: all)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    known = golden_names()
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown golden(s) {unknown}; choose from {', '.join(known)}")
    stale = []
    for name in args.names or known:
        text = dumps(export(name))
        path = export_path(name)
        if args.check:
            same = path.exists() and path.read_text("utf-8") == text
            stale += [] if same else [name]
            print(f"{name}: {'same' if same else 'DIFFERS'}")
            continue
        path.write_text(text, encoding="utf-8")
        print(f"{name}: wrote {path.name}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
