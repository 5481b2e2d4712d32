"""``manage.py check --deploy`` is clean with production settings: those the deploy guide's
production start sets, with ``PICOFLOW_DEBUG`` left unset (off by default) or ``0``."""

import secrets
from pathlib import Path

import pytest

from tests.livedaphne import build_env, run_manage


@pytest.mark.parametrize("debug", [None, "0"], ids=["debug-unset", "debug-0"])
def test_check_deploy_passes_with_production_env(tmp_path: Path, debug: str | None) -> None:
    env = build_env(
        tmp_path,
        {"PICOFLOW_DEBUG": debug, "PICOFLOW_SECRET_KEY": secrets.token_urlsafe(64),
         "PICOFLOW_ALLOWED_HOSTS": "flows.example.com", "PICOFLOW_HTTPS": None},
    )
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_flags_debug(tmp_path: Path) -> None:
    env = build_env(tmp_path, {"PICOFLOW_DEBUG": "1"})
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "security.W018" in result.stdout + result.stderr


@pytest.mark.parametrize("plain", [{"PICOFLOW_ALLOWED_HOSTS": None},
                                   {"PICOFLOW_ALLOWED_HOSTS": "flows.example.com",
                                    "PICOFLOW_HTTPS": "0"}], ids=["loopback-only", "https-0"])
def test_plain_http_is_flagged_as_no_deployment(tmp_path: Path,
                                                plain: dict[str, str | None]) -> None:
    """A site on loopback names only (the defaults) serves plain HTTP, and so does
    ``PICOFLOW_HTTPS=0``: neither is a production setting."""
    env = build_env(tmp_path, {"PICOFLOW_DEBUG": None, "PICOFLOW_HTTPS": None,
                               "PICOFLOW_SECRET_KEY": secrets.token_urlsafe(64), **plain})
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "security.W012" in out and "security.W008" in out  # Secure cookie, redirect


def test_generated_secret_key_passes_check_deploy(tmp_path: Path) -> None:
    env = build_env(tmp_path, {"PICOFLOW_DEBUG": None, "PICOFLOW_SECRET_KEY": None,
                               "PICOFLOW_ALLOWED_HOSTS": "flows.example.com"})
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    key = (tmp_path / "secret_key").read_text().strip()
    assert len(key) >= 50
    # A second start reuses the stored key.
    run_manage("check", env=env)
    assert (tmp_path / "secret_key").read_text().strip() == key
