"""``manage.py import_events FILE [--project P] [--copy]``: store an export's runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from picoflow_web.http import transfer
from picoflow_web.models import DEFAULT_PROJECT, Project
from picoflow_web.record import importing
from picoflow_web.record.ingest import IngestError


class Command(BaseCommand):
    """Check every line, then store the runs in one transaction (or nothing)."""

    help = ("Import a JSONL export (export_run, export_session, the API's export) as runs "
            "of a project; a bad file is refused with its line number and stores nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the JSONL file ('-' for standard input)")
        parser.add_argument("--project", default=DEFAULT_PROJECT,
                            help=f"the project the runs go to (default: {DEFAULT_PROJECT})")
        parser.add_argument("--copy", action="store_true",
                            help="store the runs under new run and session ids (to import "
                                 "a file whose runs exist already)")

    def handle(self, *args: Any, **options: Any) -> None:
        project = options["project"]
        if project != DEFAULT_PROJECT and not Project.objects.filter(name=project).exists():
            raise CommandError(f"No project {project!r} "
                               "(manage.py picoflow_project create NAME).")
        body = self._read(options["file"])
        try:
            done = importing.import_jsonl(body, project=project, copy=options["copy"],
                                          origin={"by": "manage.py import_events"})
        except IngestError as exc:
            raise CommandError(f"{exc.message} [{exc.code}]") from None
        summary = transfer.reply(done, project)
        for run in summary.runs:
            renamed = f" (was {run.original_id})" if run.id != run.original_id else ""
            self.stdout.write(f"{run.id}{renamed}: {run.status}, {run.event_count} events")
        self.stdout.write(f"Imported {len(summary.runs)} run(s), {summary.events} events, "
                          f"into project {project!r}.")

    def _read(self, name: str) -> bytes:
        limit = importing.MAX_IMPORT_BYTES
        if name == "-":
            body = sys.stdin.buffer.read(limit + 1)
        else:
            path = Path(name)
            if not path.is_file():
                raise CommandError(f"No file {name!r}.")
            with path.open("rb") as handle:
                body = handle.read(limit + 1)
        if len(body) > limit:
            raise CommandError(f"The file is larger than {limit} bytes; export fewer runs "
                               "at a time. [body_too_large]")
        return body
