"""``manage.py api_tokens list [--user U] [--project P]`` and ``api_tokens revoke ID...``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from picoflow_web.models import ApiToken


class Command(BaseCommand):
    """List tokens (never their values: only hashes are stored) and revoke them."""

    help = "List API tokens, or revoke some by id."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="id, user, project, name, scopes, state")
        listing.add_argument("--user")
        listing.add_argument("--project")
        revoke = actions.add_parser("revoke", help="revoke tokens by id (from list)")
        revoke.add_argument("ids", nargs="+", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "revoke":
            found = set(ApiToken.objects.filter(pk__in=options["ids"]).values_list(
                "pk", flat=True))
            missing = sorted(set(options["ids"]) - found)
            if missing:
                raise CommandError(f"No token with id {', '.join(map(str, missing))}.")
            ApiToken.objects.filter(pk__in=found, revoked_at__isnull=True).update(
                revoked_at=timezone.now(), revoked_reason="revoked")
            self.stdout.write(f"Revoked {len(found)} token(s).")
            return
        tokens = ApiToken.objects.select_related("user").order_by("pk")
        if options["user"]:
            tokens = tokens.filter(user__username=options["user"])
        if options["project"]:
            tokens = tokens.filter(project_id=options["project"])
        self.stdout.write("id\tuser\tproject\tname\tscopes\tstate\texpires\tlast used")
        for token in tokens:
            state = token.refusal() or "active"
            self.stdout.write("\t".join(str(v) for v in (
                token.pk, token.user, token.project_id, token.name, token.scopes, state,
                token.expires_at.isoformat() if token.expires_at else "never",
                token.last_used_at.isoformat() if token.last_used_at else "never")))
