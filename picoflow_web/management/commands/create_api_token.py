"""``manage.py create_api_token USER [NAME] [--project P] [--scope S ...]
[--expires-in DAYS]``: a bearer token for the API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from picoflow_web.models import DEFAULT_PROJECT, DEFAULT_SCOPES, SCOPES, ApiToken, Project


def scope_list(values: list[str] | None) -> tuple[str, ...]:
    """``--scope read --scope run`` or ``--scope read,run``, checked."""
    chosen = tuple(s.strip() for value in values or [] for s in value.split(",") if s.strip())
    unknown = sorted(set(chosen) - set(SCOPES))
    if unknown:
        raise CommandError(f"Unknown scope(s) {', '.join(unknown)}; choose from "
                           f"{', '.join(SCOPES)}.")
    return chosen or tuple(DEFAULT_SCOPES.split(","))


class Command(BaseCommand):
    """Print a new token once, on the last line; only its hash is stored."""

    help = "Create an API token for a user and print it (shown once, on the last line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("name", nargs="?", default="api")
        parser.add_argument("--project", default=DEFAULT_PROJECT,
                            help=f"the project the token acts in (default: {DEFAULT_PROJECT})")
        parser.add_argument(
            "--scope", action="append", dest="scopes",
            help=f"what the token may do, comma-separated or repeated (default: "
                 f"{DEFAULT_SCOPES}): read runs and sessions, run turns, or ingest events "
                 "from another process; never more than the user's role in the project")
        parser.add_argument("--expires-in", type=float, default=None, metavar="DAYS",
                            help="days until the token stops working (default: never)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user {options['username']!r}.")
        project = Project.objects.filter(name=options["project"]).first()
        if project is None and options["project"] == DEFAULT_PROJECT:
            project = Project.objects.create(name=DEFAULT_PROJECT)
        if project is None:
            raise CommandError(f"No project {options['project']!r} "
                               "(manage.py picoflow_project create NAME).")
        days = options["expires_in"]
        if days is not None and days <= 0:
            raise CommandError("--expires-in must be a positive number of days.")
        expires = timezone.now() + timedelta(days=days) if days is not None else None
        token, raw = ApiToken.issue(user, options["name"], scope_list(options["scopes"]),
                                    project=project, expires_at=expires)
        if not user.is_superuser and not project.memberships.filter(user=user).exists():
            self.stderr.write(f"Note: {user} is no member of {project}; the token works once "
                              "they are (manage.py picoflow_project add-member).")
        until = f", expires {token.expires_at.isoformat()}" if token.expires_at else ""
        self.stderr.write(f"Token {token.name!r} (id {token.pk}) for {user} in {project} with "
                          f"scopes {token.scopes}{until}:")
        self.stdout.write(raw)
