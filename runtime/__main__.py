"""``python -m runtime trace FILE.jsonl`` and ``python -m runtime schema``."""

from __future__ import annotations

import sys

from .events.trace import main

raise SystemExit(main(sys.argv[1:]))
