"""``manage.py ensure_admin``: make sure a first user and the ``default`` project exist (the
first user its admin), and say how to log in."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from picoflow_web.config import app_settings
from picoflow_web.config.env import PRIVATE_FILE_MODE, open_private
from picoflow_web.models import DEFAULT_PROJECT, Membership, Project


class Command(BaseCommand):
    """Create the ``admin`` superuser once, keep its password in the data folder."""

    help = "Create the first user if there is none, and print how to log in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        secret_file = app_settings.data_dir() / "admin_password"
        username = options["username"]
        if not users.objects.exists():
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser(username=username, email="", password=password)
            # Private from its first byte; a file left over from before keeps no wider mode.
            with open_private(secret_file, "w", encoding="utf-8") as handle:
                handle.write(password + "\n")
            secret_file.chmod(PRIVATE_FILE_MODE)
        project, _ = Project.objects.get_or_create(name=DEFAULT_PROJECT)
        first = users.objects.order_by("pk").first()
        if first is not None and not project.memberships.exists():
            Membership.objects.create(project=project, user=first, role=Membership.Role.ADMIN)
        if secret_file.exists() and users.objects.filter(username=username).exists():
            password = secret_file.read_text(encoding="utf-8").strip()
            self.stdout.write(f"Log in as '{username}' with password '{password}' "
                              f"(kept in {secret_file}).")
        else:
            self.stdout.write("Users exist already; log in with yours "
                              "(manage.py createsuperuser makes another).")
