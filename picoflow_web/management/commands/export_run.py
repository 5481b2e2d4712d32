"""``manage.py export_run RUN_ID [-o FILE]``: a run's events as JSONL (its export)."""

from __future__ import annotations

from picoflow_web.management.commands._export import ExportCommand
from picoflow_web.models import Run


class Command(ExportCommand):
    """One run's stored events, one per line, by ``seq``."""

    help = "Write a run's events as JSONL (one event per line) to stdout or -o FILE."
    what = "run"

    def run_ids(self, ident: str) -> list[str] | None:
        return [ident] if Run.objects.filter(id=ident).exists() else None
