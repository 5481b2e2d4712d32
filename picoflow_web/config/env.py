"""Helpers that turn environment variables into Django settings values.

Kept free of Django imports so that ``settings.py`` can use them at import time
and tests can call them directly.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, unquote, urlsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """Raised when an environment variable holds a value that cannot be used."""


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Read a boolean: 1/true/yes/on or 0/false/no/off (case-insensitive)."""
    env = os.environ if environ is None else environ
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_seconds(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """Read a positive number of seconds."""
    env = os.environ if environ is None else environ
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None, *,
            minimum: int = 1) -> int:
    """Read a whole number of at least ``minimum``."""
    env = os.environ if environ is None else environ
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be at least {minimum}")
    return value


def env_list(name: str, default: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """Read a comma-separated list; blank items are dropped."""
    env = os.environ if environ is None else environ
    raw = env.get(name, default)
    return [item.strip() for item in raw.split(",") if item.strip()]


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def loopback_only(hosts: list[str]) -> bool:
    """True when every name of ``ALLOWED_HOSTS`` is one of this machine's loopback names (a
    browser elsewhere cannot reach such a site: nothing else answers)."""
    return bool(hosts) and all(host.lower() in LOOPBACK_HOSTS for host in hosts)


def resolve_path(value: str, base_dir: Path) -> Path:
    """An absolute path is kept; a relative one is taken from ``base_dir``."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base_dir / path)


def sqlite_database(path: Path) -> dict[str, Any]:
    """Django settings for a SQLite file, in WAL mode with immediate transactions.

    WAL: readers (replays, pages) do not wait for the event writer, and a commit is not
    an fsync of a whole journal; the event log writes often.
    """
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # timeout: workers and the web server write from several processes; a writer
        # waits for the lock instead of failing at once.
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                    "transaction_mode": "IMMEDIATE", "timeout": 30},
        # Tests on a file too: an in-memory test database shares one cache between
        # threads, where a writer fails at once ("table is locked") instead of waiting.
        "TEST": {"NAME": str(path.with_name(f"{path.stem}-test{path.suffix}"))},
    }


def parse_database_url(url: str, base_dir: Path) -> dict[str, Any]:
    """Turn ``DATABASE_URL`` into one entry of Django's ``DATABASES``.

    Supported forms:

    * ``sqlite:///relative/file.sqlite3`` (relative to ``base_dir``)
    * ``sqlite:////absolute/file.sqlite3``
    * ``postgres://user:pass@host:port/dbname?sslmode=require``
      (``postgresql://`` too; query parameters become ``OPTIONS``)
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        raw = unquote(parts.path)
        if parts.netloc:
            raise ConfigError(
                "DATABASE_URL for SQLite takes no host: use sqlite:///relative/path "
                "or sqlite:////absolute/path"
            )
        if not raw or raw == "/":
            raise ConfigError("DATABASE_URL for SQLite needs a file path")
        # sqlite:///x -> path "/x" (relative x); sqlite:////x -> path "//x" (absolute /x)
        name = raw[1:]
        return sqlite_database(resolve_path(name, base_dir))
    if scheme in {"postgres", "postgresql"}:
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname:
            raise ConfigError("DATABASE_URL for PostgreSQL needs a database name")
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"DATABASE_URL has an invalid port: {exc}") from exc
        config: dict[str, Any] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": dbname,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": unquote(parts.hostname or ""),
            "PORT": str(port) if port is not None else "",
        }
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
        if options:
            config["OPTIONS"] = options
        return config
    raise ConfigError(
        f"DATABASE_URL scheme {parts.scheme!r} is not supported "
        "(use sqlite://, postgres:// or postgresql://)"
    )


PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def make_private_dir(path: Path) -> None:
    """Create the folder ``path`` (and its parents) if missing; the folder itself readable
    by its owner only. An existing folder keeps its mode: its owner chose it."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)


def create_private_file(path: Path) -> None:
    """Create an empty ``path`` readable by its owner only, unless it exists or its folder
    does not. For a SQLite database before its first connection: SQLite creates the
    journal, WAL and shared-memory files with the database file's mode."""
    if path.parent.is_dir():
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))


def open_private(path: str | os.PathLike[str], mode: str = "wb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for writing, creating a missing file readable by its owner only
    (an existing file keeps its mode)."""

    def opener(name: str, flags: int) -> int:
        return os.open(name, flags, PRIVATE_FILE_MODE)

    return open(path, mode, opener=opener, **kwargs)


def load_or_create_secret_key(path: Path) -> str:
    """Return the secret key stored at ``path``, creating it on first use.

    The file is written to a temporary name and linked into place, so two
    processes starting at once end up with the same key.
    """
    try:
        key = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        key = ""
    if key:
        return key
    make_private_dir(path.parent)
    new_key = secrets.token_urlsafe(50)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".secret-key-")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(new_key + "\n")
        os.chmod(tmp_name, 0o600)
        try:
            os.link(tmp_name, path)
        except FileExistsError:
            # Another process won the race (or an empty file is in the way).
            key = path.read_text(encoding="ascii").strip()
            if not key:
                raise ConfigError(
                    f"secret key file {path} is empty; delete it or fill it"
                ) from None
            return key
    finally:
        os.unlink(tmp_name)
    return new_key
