"""``manage.py check --deploy`` is clean with production settings."""

import secrets
from pathlib import Path

from tests.livedaphne import build_env, run_manage


def test_check_deploy_passes_with_production_env(tmp_path: Path) -> None:
    env = build_env(
        tmp_path,
        {"PICOFLOW_DEBUG": "0", "PICOFLOW_SECRET_KEY": secrets.token_urlsafe(64)},
    )
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_debug(tmp_path: Path) -> None:
    env = build_env(tmp_path, {"PICOFLOW_DEBUG": "1"})
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W018" in result.stdout + result.stderr


def test_generated_secret_key_passes_check_deploy(tmp_path: Path) -> None:
    env = build_env(tmp_path, {"PICOFLOW_DEBUG": "0", "PICOFLOW_SECRET_KEY": None})
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    key = (tmp_path / "secret_key").read_text().strip()
    assert len(key) >= 50
    # A second start reuses the stored key.
    run_manage("check", env=env)
    assert (tmp_path / "secret_key").read_text().strip() == key
