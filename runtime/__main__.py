"""``python -m runtime run|trace|schema`` (see :mod:`runtime.cli`)."""

from __future__ import annotations

import sys

from .cli import main

raise SystemExit(main(sys.argv[1:]))
