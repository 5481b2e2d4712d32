"""Layering: runtime/ imports only the standard library, pydantic, anyio and itself.

The runtime must run anywhere (web app, script, test) on asyncio or trio, so it may not
reach for the web stack or pick an event loop: no django, no channels, no asyncio, no trio.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
THIRD_PARTY_ALLOWED = frozenset({"pydantic", "anyio"})
FORBIDDEN = frozenset({"django", "channels", "asyncio", "trio"})
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


def _check(module: str, line: int, violations: list[str]) -> None:
    top = module.split(".", 1)[0]
    if top in FORBIDDEN:
        violations.append(f"line {line}: forbidden import '{module}'")
    elif top == "runtime":
        violations.append(f"line {line}: absolute import '{module}' (use a relative import)")
    elif top not in THIRD_PARTY_ALLOWED and top not in sys.stdlib_module_names:
        violations.append(f"line {line}: non-stdlib import '{module}'")


def import_violations(source: str, filename: str = "<source>") -> list[str]:
    """Every import in ``source`` that the runtime layer may not make, as readable lines.

    Looks at every ``import``/``from … import`` anywhere in the module (functions and
    ``TYPE_CHECKING`` blocks included) and at ``importlib.import_module("…")`` /
    ``__import__("…")`` calls with a literal name.
    """
    violations: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _check(alias.name, node.lineno, violations)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                _check(node.module, node.lineno, violations)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                name in DYNAMIC_IMPORTERS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                _check(first.value, node.lineno, violations)
    return violations


def runtime_modules() -> list[Path]:
    return sorted(RUNTIME.rglob("*.py"))


def test_the_scan_finds_the_runtime_modules() -> None:
    names = {path.name for path in runtime_modules()}
    assert {"__init__.py", "engine.py", "flow.py", "runner.py", "stores.py"} <= names


@pytest.mark.parametrize(
    "path", runtime_modules(), ids=lambda p: str(p.relative_to(RUNTIME))
)
def test_runtime_module_imports_only_stdlib_pydantic_anyio_and_itself(path: Path) -> None:
    assert import_violations(path.read_text(encoding="utf-8"), str(path)) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import django", "line 1: forbidden import 'django'"),
        ("from channels.layers import get_channel_layer", "forbidden import 'channels.layers'"),
        ("import asyncio", "forbidden import 'asyncio'"),
        ("import os, trio.lowlevel", "forbidden import 'trio.lowlevel'"),
        ("import requests", "non-stdlib import 'requests'"),
        ("from pydantic_core import core_schema", "non-stdlib import 'pydantic_core'"),
        ("from runtime.flow import Flow", "absolute import 'runtime.flow'"),
        ("def f():\n    import django.db\n", "line 2: forbidden import 'django.db'"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from django.http import X\n",
            "line 3: forbidden import 'django.http'",
        ),
        ("import importlib\nimportlib.import_module('django.conf')", "'django.conf'"),
        ("__import__('trio')", "forbidden import 'trio'"),
    ],
)
def test_the_scanner_catches_forbidden_imports(source: str, expected: str) -> None:
    violations = import_violations(source)
    assert len(violations) == 1
    assert expected in violations[0]


def test_the_scanner_accepts_what_the_runtime_may_import() -> None:
    source = (
        "from __future__ import annotations\n"
        "import json, sqlite3, contextvars\n"
        "import anyio.to_thread\n"
        "from pydantic import BaseModel\n"
        "from . import errors\n"
        "from .flow import Flow\n"
        "from ..runtime import x\n"
    )
    assert import_violations(source) == []


def test_importing_the_runtime_loads_no_web_stack() -> None:
    probe = (
        "import sys, runtime\n"
        "print(sorted(m for m in ('django', 'channels', 'trio') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True,
        cwd=RUNTIME.parent,
    )
    assert result.stdout.strip() == "[]"
