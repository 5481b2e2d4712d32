"""Environment parsing used by ``picoflow_web.config.settings``."""

import os
import stat
from pathlib import Path

import pytest

from picoflow_web.config.env import (
    ConfigError,
    env_bool,
    env_list,
    load_or_create_secret_key,
    loopback_only,
    parse_database_url,
)

BASE = Path("/srv/picoflow")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        ("0", False),
        ("off", False),
        ("", False),
        ("False", False),
    ],
)
def test_env_bool(raw: str, expected: bool) -> None:
    assert env_bool("X", not expected, {"X": raw}) is expected


def test_env_bool_default_and_garbage() -> None:
    assert env_bool("X", True, {}) is True
    with pytest.raises(ConfigError, match="X='maybe'"):
        env_bool("X", True, {"X": "maybe"})


def test_env_list() -> None:
    assert env_list("H", "a,b", {}) == ["a", "b"]
    assert env_list("H", "a", {"H": " x.example , ,[::1] "}) == ["x.example", "[::1]"]
    assert env_list("H", "", {}) == []


def test_sqlite_relative_and_absolute() -> None:
    parsed = parse_database_url("sqlite:///var/db.sqlite3", BASE)
    assert (parsed["ENGINE"], parsed["NAME"]) == ("django.db.backends.sqlite3",
                                                  "/srv/picoflow/var/db.sqlite3")
    # Same WAL settings as the default database: the event log writes often.
    assert "journal_mode=WAL" in parsed["OPTIONS"]["init_command"]
    assert parsed["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert parse_database_url("sqlite:////tmp/x/db.sqlite3", BASE)["NAME"] == "/tmp/x/db.sqlite3"


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_postgres(scheme: str) -> None:
    url = f"{scheme}://flow%40user:p%3Ass%2Fw@db.internal:6543/pico%2Dflow?sslmode=require"
    assert parse_database_url(url, BASE) == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "pico-flow",
        "USER": "flow@user",
        "PASSWORD": "p:ss/w",
        "HOST": "db.internal",
        "PORT": "6543",
        "OPTIONS": {"sslmode": "require"},
    }


def test_postgres_minimal() -> None:
    assert parse_database_url("postgres://localhost/flows", BASE) == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "flows",
        "USER": "",
        "PASSWORD": "",
        "HOST": "localhost",
        "PORT": "",
    }


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@h/db",
        "postgres://localhost/",
        "sqlite://host/db",
        "sqlite://",
        "postgres://h:x/db",
    ],
)
def test_bad_database_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_database_url(url, BASE)


def test_secret_key_is_created_once_and_private(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "secret_key"
    first = load_or_create_secret_key(path)
    assert len(first) >= 50
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_secret_key(path) == first
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]


def test_secret_key_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    path.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        load_or_create_secret_key(path)


@pytest.mark.parametrize(("hosts", "local"), [
    (["127.0.0.1", "localhost", "[::1]"], True), (["LOCALHOST"], True),
    (["127.0.0.1", "flows.example.com"], False), (["*"], False), ([".localhost"], False),
    ([], False),
])
def test_a_site_is_loopback_only_when_it_answers_loopback_names_only(
        hosts: list[str], local: bool) -> None:
    assert loopback_only(hosts) is local
