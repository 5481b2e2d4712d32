"""Data files are private: the data folder is created 0700, the SQLite database (and so
the WAL and shared-memory files SQLite gives its mode), the secret key and the first
user's password 0600; so is what an export command writes."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
from django.core.management import call_command

from picoflow_web.models import Run, StoredSession
from tests.livedaphne import build_env, run_manage

# While a connection is open in WAL mode, the -wal and -shm files exist.
WAL_SCRIPT = """
import os, stat
from django.db import connection
from picoflow_web.models import Project
Project.objects.get_or_create(name="modes")
name = connection.settings_dict["NAME"]
for suffix in ("", "-wal", "-shm"):
    print(suffix or "db", oct(stat.S_IMODE(os.stat(name + suffix).st_mode)))
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_fresh_data_folder_and_its_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "new" / "data"
    env = build_env(data, {"DATABASE_URL": None, "PICOFLOW_DEBUG": None})
    for args in (("migrate", "--noinput"), ("ensure_admin",)):
        result = run_manage(*args, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
    assert mode(data) == 0o700
    for name in ("picoflow.sqlite3", "secret_key", "admin_password"):
        assert oct(mode(data / name)) == oct(0o600), name
    shown = run_manage("shell", "-c", WAL_SCRIPT, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[-3:] == ["db 0o600", "-wal 0o600", "-shm 0o600"]


@pytest.mark.django_db
@pytest.mark.parametrize("command", ["export_run", "export_otlp", "export_session"])
def test_exports_are_written_private(tmp_path: Path, command: str) -> None:
    StoredSession.objects.create(id="s1", flow="F", revision=1, run_status="finished", doc={})
    Run.objects.create(id="r1", flow="F", session_id="s1")
    ident = "s1" if command == "export_session" else "r1"
    out = tmp_path / f"{command}.out"
    call_command(command, ident, "-o", str(out), stderr=io.StringIO())
    assert out.is_file()
    assert oct(mode(out)) == oct(0o600)
