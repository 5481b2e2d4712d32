"""``manage.py redact_keys``: the names whose values are redacted, one a line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from picoflow_web.data.redact import BUILTIN_KEYS, secret_keys


class Command(BaseCommand):
    """Print the built-in secret names, then those ``PICOFLOW_REDACT_KEYS`` adds."""

    help = "List the names whose values are stored and shown as [redacted]."

    def handle(self, *args: Any, **options: Any) -> None:
        for name in secret_keys():
            origin = "built-in" if name in BUILTIN_KEYS else "PICOFLOW_REDACT_KEYS"
            self.stdout.write(f"{name}\t{origin}")
