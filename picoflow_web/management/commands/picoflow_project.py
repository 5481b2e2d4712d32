"""``manage.py picoflow_project create NAME`` and ``add-member NAME USER --role ROLE``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from picoflow_web.models import Membership, Project


class Command(BaseCommand):
    """Projects and their members, from the command line (the admin does the same)."""

    help = "Create a project, or give a user a role in one (viewer, operator or admin)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="create a project")
        create.add_argument("name")
        member = actions.add_parser("add-member", help="give a user a role in a project "
                                    "(a user who has one gets the new one)")
        member.add_argument("name")
        member.add_argument("username")
        member.add_argument("--role", choices=Membership.Role.values,
                            default=Membership.Role.VIEWER)
        actions.add_parser("list", help="projects and their members")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            name = options["name"]
            if slugify(name) != name or not name:
                raise CommandError(f"{name!r} is not a valid project name: use lowercase "
                                   "letters, digits, hyphens and underscores.")
            _, created = Project.objects.get_or_create(name=name)
            self.stdout.write(f"Project {name!r} {'created' if created else 'exists already'}.")
        elif action == "add-member":
            project = Project.objects.filter(name=options["name"]).first()
            if project is None:
                raise CommandError(f"No project {options['name']!r}.")
            user = get_user_model().objects.filter(username=options["username"]).first()
            if user is None:
                raise CommandError(f"No user {options['username']!r}.")
            Membership.objects.update_or_create(project=project, user=user,
                                                defaults={"role": options["role"]})
            self.stdout.write(f"{user} is {options['role']} of {project}.")
        else:
            for project in Project.objects.all():
                members = ", ".join(f"{m.user} ({m.role})" for m in
                                    project.memberships.select_related("user"))
                self.stdout.write(f"{project}: {members or 'no members'}")
