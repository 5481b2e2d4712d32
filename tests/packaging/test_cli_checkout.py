"""``picoflow-web`` from the checkout, the code ``make run`` runs: ``serve --data-dir``
prepares that folder (database, secret key, first user once) and serves; ``manage`` runs
management commands on the same settings."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.packaging.installed import (
    REPO_ROOT,
    background,
    free_port,
    outside_env,
    run,
    wait_healthy,
)


def checkout_env(home: Path) -> dict[str, str]:
    return outside_env(home, {"PYTHONPATH": str(REPO_ROOT), "PICOFLOW_DEMO_LATENCY": "0"})


def serve_once(home: Path, data: Path) -> str:
    """Start ``python -m picoflow_web serve --data-dir data``, wait for it, stop it; its
    output."""
    port = free_port()
    log = home / f"serve-{port}.log"
    with background([sys.executable, "-m", "picoflow_web", "serve", "--port", str(port),
                     "--workers", "1", "--data-dir", str(data)],
                    env=checkout_env(home), cwd=home, log_path=log) as process:
        wait_healthy(f"http://127.0.0.1:{port}", process, log)
    return log.read_text(errors="replace")


def test_serve_prepares_its_data_folder_and_makes_the_first_user_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = serve_once(tmp_path, data)
    password = (data / "admin_password").read_text().strip()
    assert f"Log in as 'admin' with password '{password}'" in first
    assert "with 1 worker(s)" in first
    assert (data / "picoflow.sqlite3").is_file() and (data / "secret_key").is_file()
    # Again on the same folder: the same user and password, no second user.
    second = serve_once(tmp_path, data)
    assert f"Log in as 'admin' with password '{password}'" in second
    users = run([sys.executable, "-m", "picoflow_web", "manage", "shell", "-c",
                 "from django.contrib.auth.models import User; print(User.objects.count())"],
                env=checkout_env(tmp_path) | {"PICOFLOW_DATA_DIR": str(data)}, cwd=tmp_path)
    assert users.stdout.strip().splitlines()[-1] == "1"


def test_the_command_names_its_version_and_forwards_to_management_commands(
    tmp_path: Path,
) -> None:
    from picoflow_web import __version__

    env = checkout_env(tmp_path) | {"PICOFLOW_DATA_DIR": str(tmp_path / "data")}
    version = run([sys.executable, "-m", "picoflow_web", "--version"], env=env, cwd=tmp_path)
    assert version.stdout.strip() == f"picoflow-web {__version__}"
    listed = run([sys.executable, "-m", "picoflow_web", "manage", "help"], env=env,
                 cwd=tmp_path).stdout
    assert "[picoflow_web]" in listed and "ensure_admin" in listed and "serve" in listed


def test_manage_uses_the_data_folder_serve_was_given(tmp_path: Path) -> None:
    """``manage --data-dir DIR`` (anywhere on its line, or ``PICOFLOW_DATA_DIR``) works on
    the database ``serve --data-dir DIR`` made, and writes no database anywhere else."""
    data, elsewhere = tmp_path / "data", tmp_path / "cwd"
    elsewhere.mkdir()
    env = checkout_env(tmp_path)
    manage = [sys.executable, "-m", "picoflow_web", "manage"]
    # What serve does to its folder before it starts.
    run([*manage, "--data-dir", data, "migrate", "--noinput"], env=env, cwd=elsewhere)
    run([*manage, f"--data-dir={data}", "ensure_admin"], env=env, cwd=elsewhere)
    made = run([*manage, "create_api_token", "admin", "laptop", "--data-dir", data],
               env=env, cwd=elsewhere)
    raw = made.stdout.strip().splitlines()[-1]
    assert raw.startswith("pf_") and "laptop" in made.stderr
    listed = run([*manage, "api_tokens", "list"], env=env | {"PICOFLOW_DATA_DIR": str(data)},
                 cwd=elsewhere).stdout
    assert "\tadmin\tdefault\tlaptop\tread,run\tactive\t" in listed
    databases = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.sqlite3*"))
    assert databases == ["data/picoflow.sqlite3"]
    assert not (tmp_path / "xdg-data").exists()
