"""What ``export_run`` and ``export_session`` share: where the JSONL goes (a file it
creates is readable by its owner only: runs hold what users typed)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from picoflow_web.config.env import open_private
from picoflow_web.data import exporting


class ExportCommand(BaseCommand):
    """Writes the events of the runs :meth:`run_ids` names, to stdout or ``-o FILE``."""

    what = "run"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ident", metavar=f"{self.what.upper()}_ID")
        parser.add_argument("-o", "--output", metavar="FILE",
                            help="write the JSONL to FILE (default: standard output)")

    def run_ids(self, ident: str) -> list[str] | None:
        raise NotImplementedError

    def handle(self, *args: Any, **options: Any) -> None:
        ids = self.run_ids(options["ident"])
        if ids is None:
            raise CommandError(f"No {self.what} {options['ident']!r}.")
        chunks = exporting.lines(ids)
        if options["output"]:
            with open_private(options["output"], "wb") as handle:
                handle.writelines(chunks)
        else:
            self._to_stdout(chunks)

    def _to_stdout(self, chunks: Iterable[bytes]) -> None:
        for chunk in chunks:
            self.stdout.write(chunk.decode("utf-8"), ending="")
        self.stdout.flush()
