"""``manage.py ensure_admin``: make sure a first user exists and say how to log in."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from picoflow_web import app_settings


class Command(BaseCommand):
    """Create the ``admin`` superuser once, keep its password in the data folder."""

    help = "Create the first user if there is none, and print how to log in."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        secret_file = app_settings.data_dir() / "admin_password"
        username = options["username"]
        if not users.objects.exists():
            password = secrets.token_urlsafe(12)
            users.objects.create_superuser(username=username, email="", password=password)
            secret_file.write_text(password + "\n", encoding="utf-8")
            secret_file.chmod(0o600)
        if secret_file.exists() and users.objects.filter(username=username).exists():
            password = secret_file.read_text(encoding="utf-8").strip()
            self.stdout.write(f"Log in as '{username}' with password '{password}' "
                              f"(kept in {secret_file}).")
        else:
            self.stdout.write("Users exist already; log in with yours "
                              "(manage.py createsuperuser makes another).")
