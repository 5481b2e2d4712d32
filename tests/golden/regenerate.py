"""Regenerate the golden traces: ``.venv/bin/python tests/golden/regenerate.py [NAME ...]``.

Plays every golden run (or the named ones) on asyncio and writes ``<name>.jsonl`` and
``<name>.txt`` next to this file. ``--check`` writes nothing and exits 1 when a fresh
recording's text dump differs from the committed one (the contract tests check the same).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

# Run as a script, so the checkout is not on sys.path yet; the tests import the same
# module as ``tests.golden.goldens``.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.golden.goldens import BY_NAME, GOLDENS, dump_text, record, write  # noqa: E402


def main(argv: list[str]) -> int:
    """Record and write (or check) the goldens named in ``argv`` (default: all)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"goldens to regenerate ({', '.join(BY_NAME)})")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown golden(s) {unknown}; choose from {', '.join(BY_NAME)}")
    chosen = [BY_NAME[name] for name in args.names] or list(GOLDENS)
    stale = []
    for golden in chosen:
        recorded = anyio.run(record, golden, backend="asyncio")
        failed = {i for i, reply in enumerate(recorded.replies, 1)
                  if reply is not None and not reply.success
                  and reply.error_code != "turn_cancelled"}
        stopped = {i for i, reply in enumerate(recorded.replies, 1)
                   if reply is not None and reply.error_code == "turn_cancelled"}
        if failed != golden.fails or stopped != set(golden.stops):
            print(f"{golden.name}: turns {sorted(failed)} failed and {sorted(stopped)} were "
                  f"stopped, expected {sorted(golden.fails)} and {sorted(golden.stops)}",
                  file=sys.stderr)
            return 1
        if args.check:
            committed = golden.txt_path.read_text("utf-8") if golden.txt_path.exists() else ""
            same = committed == dump_text(recorded.events)
            stale += [] if same else [golden.name]
            print(f"{golden.name}: {'same' if same else 'DIFFERS'}")
            continue
        write(golden, recorded)
        print(f"{golden.name}: {len(recorded.events)} events in {len(golden.turns)} runs")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
