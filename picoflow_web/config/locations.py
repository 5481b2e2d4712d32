"""Where the app's files are: in this repository's checkout, or in an installed wheel.

The repository keeps ``templates/`` and ``static/`` at its top level; a built wheel carries
them inside the package (``picoflow_web/templates``, ``picoflow_web/static``, copied there by
``setup.py``), where Django's app-directories template loader and static files finder find
them in any project. Only the checkout needs the top-level folders named in the settings.

Free of Django imports: ``settings.py`` and the ``picoflow-web`` command use it before
Django is set up.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # picoflow_web/, above config/
APP_NAME = "picoflow-web"


def checkout_dir() -> Path | None:
    """The repository root when the package runs from a checkout (editable install or
    ``PYTHONPATH``), else None (an installed wheel: ``site-packages`` has no manage.py)."""
    root = PACKAGE_DIR.parent
    if (root / "manage.py").is_file() and (root / "templates").is_dir():
        return root
    return None


def _bundled_or_checkout(name: str) -> Path | None:
    if (PACKAGE_DIR / name).is_dir():
        return None  # in the package: found through INSTALLED_APPS, like any app's
    root = checkout_dir()
    return root / name if root is not None else None


def extra_templates_dir() -> Path | None:
    """The checkout's ``templates/`` when the package does not carry its own."""
    return _bundled_or_checkout("templates")


def extra_static_dir() -> Path | None:
    """The checkout's ``static/`` when the package does not carry its own."""
    return _bundled_or_checkout("static")


def user_data_dir(environ: dict[str, str] | None = None, platform: str | None = None) -> Path:
    """The per-user data folder of the platform: ``$XDG_DATA_HOME/picoflow-web``
    (``~/.local/share/picoflow-web``) on Linux and other Unixes,
    ``~/Library/Application Support/picoflow-web`` on macOS,
    ``%LOCALAPPDATA%\\picoflow-web`` on Windows."""
    env = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if platform.startswith("win"):
        base = env.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / APP_NAME
    if platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP_NAME
    base = env.get("XDG_DATA_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".local" / "share") / APP_NAME


def default_data_dir() -> Path:
    """``var/`` of the checkout (``make run``), else the per-user data folder."""
    root = checkout_dir()
    return root / "var" if root is not None else user_data_dir()


def relative_base() -> Path:
    """What a relative ``PICOFLOW_DATA_DIR`` or SQLite path is taken from: the checkout,
    else the current folder."""
    root = checkout_dir()
    return root if root is not None else Path.cwd()
