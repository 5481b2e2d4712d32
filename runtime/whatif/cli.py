"""``python -m runtime whatif FILE.jsonl``: the what-if of each run in an export."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from ..events import read_jsonl
from ..events.fold import runs_of
from . import what_if

USAGE = """  python -m runtime whatif FILE.jsonl [--run ID] [--json] [--max-concurrency N]
                                       each run under supersteps and local barriers"""


def main(argv: Sequence[str]) -> int:
    """Print each run's what-if summary (or its whole report as JSON, one per line)."""
    parser = argparse.ArgumentParser(
        prog="python -m runtime whatif",
        description="What each run of a JSONL export would cost under graph-wide supersteps "
                    "and under local barriers, from its events.")
    parser.add_argument("file", help="a JSONL export (python -m runtime trace reads the same)")
    parser.add_argument("--run", default=None, help="only this run id")
    parser.add_argument("--json", action="store_true", help="the whole report, as JSON")
    parser.add_argument("--max-concurrency", type=int, default=None,
                        help="graph-wide limit for the supersteps schedule")
    args = parser.parse_args(argv)
    if args.max_concurrency is not None and args.max_concurrency < 1:
        parser.error("--max-concurrency must be at least 1")
    try:
        runs = runs_of(read_jsonl(args.file))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}")
        return 1
    if args.run is not None:
        if args.run not in runs:
            print(f"error: no run {args.run!r} in {args.file}")
            return 1
        runs = {args.run: runs[args.run]}
    for run_id, events in runs.items():
        report = what_if(events, max_concurrency=args.max_concurrency).as_dict()
        if args.json:
            print(json.dumps(report, separators=(",", ":")))
        else:
            print(f"run {run_id} ({report['flow']})")
            for line in report["summary"]:
                print(f"  {line}")
    return 0
