"""``manage.py export_otlp RUN_ID [-o FILE] [--protobuf]``: a stored run as an OTLP trace,
OTLP/JSON or (``--protobuf``) a serialised ``ExportTraceServiceRequest`` (a file it
creates is readable by its owner only)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from picoflow_web.config.env import open_private
from picoflow_web.data import otlp_export
from picoflow_web.models import Run


class Command(BaseCommand):
    """Write a run's trace for Jaeger, Phoenix, Langfuse or an OpenTelemetry collector."""

    help = "Export a run as OTLP/JSON traces (one span per turn, barrier, branch, model " \
           "and tool call)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("-o", "--output", help="write to this file (default: stdout)")
        parser.add_argument("--protobuf", action="store_true",
                            help="write OTLP protobuf (an ExportTraceServiceRequest, what "
                                 "Phoenix and collectors take at /v1/traces) instead of JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        if not Run.objects.filter(id=run_id).exists():
            raise CommandError(f"No run {run_id!r}.")
        try:
            if options["protobuf"]:
                body = otlp_export.run_to_protobuf(run_id)
            else:
                text = otlp_export.run_to_json(run_id)
        except otlp_export.OtlpUnavailable as exc:
            raise CommandError(str(exc)) from None
        if options["protobuf"]:
            if options["output"]:
                with open_private(options["output"], "wb") as out:
                    out.write(body)
                self.stderr.write(f"Wrote {options['output']}.")
            else:
                self.stdout.flush()
                sys.stdout.buffer.write(body)
                sys.stdout.buffer.flush()
        elif options["output"]:
            with open_private(options["output"], "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
            self.stderr.write(f"Wrote {options['output']}.")
        else:
            self.stdout.write(text)
