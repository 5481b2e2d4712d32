"""One accessor for the app's settings, so it runs in any Django project.

A project that adds ``picoflow_web`` to its ``INSTALLED_APPS`` sets the app up in one dict::

    PICOFLOW = {"WORKER_LEASE": 20, "DATA_DIR": BASE_DIR / "picoflow", "DEMOS": False}

:func:`get` looks a name up there first, then as a flat ``PICOFLOW_<NAME>`` setting (what
``picoflow_web.config.settings`` defines, and what tests override), then in the environment
variable ``PICOFLOW_<NAME>`` with the embedded default. Every read of the app's own
settings goes through it; nothing assumes the app owns the project's settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from picoflow_web.config import env, locations


def _text(name: str, default: str) -> str:
    return os.environ.get(name, default).strip()


def _url(name: str, default: str) -> str:
    return _text(name, default).rstrip("/")


def _path(name: str, default: str) -> Path:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return locations.default_data_dir()
    return env.resolve_path(raw, locations.relative_base())


def _int0(name: str, default: int) -> int:
    return env.env_int(name, default, minimum=0)


def _latency(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise env.ConfigError(f"{name}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise env.ConfigError(f"{name}={raw!r} must be 0 or more")
    return value


Reader = Callable[[str, Any], Any]

DEFAULTS: dict[str, tuple[Reader, Any]] = {
    "DATA_DIR": (_path, ""),
    "REMOTE_TIMEOUT": (env.env_seconds, 30.0),
    "WORKER_LEASE": (env.env_seconds, 10.0),
    "WORKER_POLL": (env.env_seconds, 0.1),
    "RUN_WAIT": (env.env_seconds, 300.0),
    "WORKER_CONCURRENCY": (env.env_int, 1),
    "WORKERS": (_int0, 4),
    "WORKER_NICE": (_int0, 10),
    "MAX_BRANCHES": (env.env_int, 100_000),
    "RELAY_URL": (_url, ""),
    "FLOWS": (env.env_list, ""),
    "DEMOS": (env.env_bool, True),
    "MODEL": (_text, "scripted"),
    "DEMO_LATENCY": (_latency, 0.25),
    "DEMO_STREAM": (_int0, 8),
    "REDACT_KEYS": (lambda name, default: tuple(env.env_list(name, default)), ""),
}
"""Every name the ``PICOFLOW`` dict may hold: how its environment variable is read, and
the default when that variable is unset."""


class UnknownSetting(KeyError):
    """A name that is not one of :data:`DEFAULTS` (a typo in code)."""


def get(name: str) -> Any:
    """The value of setting ``name`` (``"WORKER_LEASE"``): ``settings.PICOFLOW[name]``,
    else ``settings.PICOFLOW_<name>``, else the environment variable or its default."""
    if name not in DEFAULTS:
        raise UnknownSetting(name)
    table = getattr(settings, "PICOFLOW", None) or {}
    if name in table:
        return table[name]
    flat = f"PICOFLOW_{name}"
    if hasattr(settings, flat):
        return getattr(settings, flat)
    reader, default = DEFAULTS[name]
    return reader(flat, default)


def data_dir() -> Path:
    """The app's data folder (first user's password), created on first use."""
    path = Path(get("DATA_DIR"))
    path.mkdir(parents=True, exist_ok=True, mode=0o700)  # private: a password is kept there
    return path
