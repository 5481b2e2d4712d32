"""Build hook: the wheel carries the top-level ``templates/`` and ``static/`` folders.

They stay at the repository's top level (where the checkout uses them, see
``picoflow_web/config/locations.py``); building copies them into the package as
``picoflow_web/templates`` and ``picoflow_web/static``, where Django's app-directories
template loader and static files finder find them in any project. All other metadata is in
``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("templates", "static")
"""Top-level folders copied into the ``picoflow_web`` package."""


class BuildPyWithSiteFiles(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install uses the checkout's folders directly
        for name in BUNDLED:
            source = ROOT / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing (an sdist without it?)")
            target = Path(self.build_lib) / "picoflow_web" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))


setup(cmdclass={"build_py": BuildPyWithSiteFiles})
