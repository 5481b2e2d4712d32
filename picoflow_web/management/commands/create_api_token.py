"""``manage.py create_api_token USER NAME``: a bearer token for the HTTP API."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from picoflow_web.models import ApiToken


class Command(BaseCommand):
    """Print a new token once; only its hash is stored."""

    help = "Create an API token for a user and print it (shown once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("name", nargs="?", default="api")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user {options['username']!r}.")
        _, raw = ApiToken.issue(user, options["name"])
        self.stdout.write(raw)
