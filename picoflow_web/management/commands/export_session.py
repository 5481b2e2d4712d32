"""``manage.py export_session SESSION_ID [-o FILE]``: a session's events as JSONL."""

from __future__ import annotations

from picoflow_web.data import exporting
from picoflow_web.management.commands._export import ExportCommand


class Command(ExportCommand):
    """The events of the session's runs, in turn order, each run's by ``seq``."""

    help = ("Write the events of a session's runs (in turn order) as JSONL to stdout or "
            "-o FILE.")
    what = "session"

    def run_ids(self, ident: str) -> list[str] | None:
        return exporting.session_runs(ident)
