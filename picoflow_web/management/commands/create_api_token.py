"""``manage.py create_api_token USER [NAME] [--scope S ...]``: a bearer token for the API."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from picoflow_web.models import DEFAULT_SCOPES, SCOPES, ApiToken


class Command(BaseCommand):
    """Print a new token once, on the last line; only its hash is stored."""

    help = "Create an API token for a user and print it (shown once, on the last line)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("name", nargs="?", default="api")
        parser.add_argument(
            "--scope", action="append", choices=SCOPES, dest="scopes",
            help=f"what the token may do (repeatable; default: {DEFAULT_SCOPES}): read runs "
                 "and sessions, run turns, or ingest events from another process")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user {options['username']!r}.")
        scopes = tuple(options["scopes"] or DEFAULT_SCOPES.split(","))
        token, raw = ApiToken.issue(user, options["name"], scopes)
        self.stderr.write(f"Token {token.name!r} for {user} with scopes {token.scopes}:")
        self.stdout.write(raw)
