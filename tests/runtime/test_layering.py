"""Layering: every import of the runtime and of the web app obeys ``runtime/LAYERS.toml``.

The rules file says which layer may import which; this test reads every import statement
of every module (function-level and ``TYPE_CHECKING`` imports included, and
``importlib.import_module("…")`` / ``__import__("…")`` calls with a literal name) and
checks it against them. The scanner is tested on sources and on a copy of the tree with a
deliberately forbidden module added, so a scanner that stopped finding imports would fail
here too.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "runtime" / "LAYERS.toml"
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class Rules:
    forbidden: frozenset[str]
    exceptions: dict[str, frozenset[str]]
    """module -> the forbidden packages it alone may import"""
    layers: dict[str, tuple[frozenset[str], tuple[str, ...]]]
    """layer -> (third-party packages, layers it uses)"""
    consumers: dict[str, frozenset[str]]
    """consumer package -> the runtime modules it may import"""
    web: dict[str, tuple[str, ...]]
    """web part -> the web parts it uses (``*``: any)"""
    plugins: dict[str, frozenset[str]]
    """core module -> the modules it may load by name at run time (never import)"""

    @classmethod
    def load(cls, path: Path = RULES_FILE) -> Rules:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return cls(
            forbidden=frozenset(data["runtime"]["forbidden"]),
            exceptions={name: frozenset(tops)
                        for name, tops in data["runtime"].get("exceptions", {}).items()},
            layers={name: (frozenset(spec["third_party"]), tuple(spec["uses"]))
                    for name, spec in data["layer"].items()},
            consumers={name: frozenset(spec["runtime"])
                       for name, spec in data["consumers"].items()},
            web={name: tuple(spec["uses"]) for name, spec in data.get("web", {}).items()},
            plugins={name: frozenset(targets)
                     for name, targets in data["runtime"].get("plugins", {}).items()},
        )

    def layer_of(self, module: str) -> str | None:
        return _most_specific(module, self.layers)

    def consumer_of(self, module: str) -> str | None:
        return _most_specific(module, self.consumers)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _most_specific(module: str, names: object) -> str | None:
    matches = [name for name in names if _within(module, name)]  # type: ignore[attr-defined]
    return max(matches, key=len) if matches else None


def imports_of(source: str, module: str, is_package: bool, tree_root: Path | None = None
               ) -> list[tuple[int, str]]:
    """Every module ``source`` (the module named ``module``) imports, as absolute names.

    ``from . import name`` counts as importing ``pkg.name`` when that is a module in
    ``tree_root`` (``from . import events``); ``from pkg import name`` as importing ``pkg``.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(node, package)
            for alias in node.names:
                # ``from . import events`` imports the submodule; ``from .events import
                # fold`` imports a name of the package (even where a submodule is named
                # like it), so only a bare package is resolved to its submodules.
                sub = f"{target}.{alias.name}"
                bare = node.module is None
                hit = (node.lineno, sub if bare and _is_module(sub, tree_root) else target)
                if hit not in found:
                    found.append(hit)
    return sorted(found + _literal_loads(source, module))


def _from_target(node: ast.ImportFrom, package: str) -> str:
    """The absolute name a ``from … import`` statement of a module in ``package`` reads."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _literal_loads(source: str, module: str) -> list[tuple[int, str]]:
    """The ``import_module("…")`` / ``__import__("…")`` calls with a literal name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (name in DYNAMIC_IMPORTERS and isinstance(first, ast.Constant)
                    and isinstance(first.value, str)):
                found.append((node.lineno, first.value))
    return found


def _dynamic_imports(source: str, module: str) -> set[tuple[int, str]]:
    """The lines of :func:`_literal_loads` that no import statement shares."""
    statements = {node.lineno for node in ast.walk(ast.parse(source, module))
                  if isinstance(node, ast.Import | ast.ImportFrom)}
    return {(line, name) for line, name in _literal_loads(source, module)
            if line not in statements}


def _is_module(name: str, tree_root: Path | None) -> bool:
    if tree_root is None:
        return False
    path = tree_root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def violations(source: str, module: str, *, is_package: bool = False,
               rules: Rules | None = None, tree_root: Path | None = None) -> list[str]:
    """What ``source`` (module ``module``) imports that ``rules`` forbid, as readable lines."""
    rules = rules or Rules.load()
    out: list[str] = []
    consumer = rules.consumer_of(module)
    part = _most_specific(module, rules.web)
    loaded = _dynamic_imports(source, module) & {
        (line, target) for line, target in _literal_loads(source, module)
        if target in rules.plugins.get(module, ())}
    for line, target in imports_of(source, module, is_package, tree_root):
        top = target.split(".", 1)[0]
        if (line, target) in loaded:
            continue
        if part is not None and top == "picoflow_web" and target != "picoflow_web":
            target_part = _most_specific(target, rules.web) or "picoflow_web"
            uses = rules.web[part]
            if "*" not in uses and target_part != part and target_part not in uses:
                out.append(f"line {line}: {part} may not import '{target}' ({target_part})")
            continue
        if consumer is not None:
            if top == "runtime" and target not in rules.consumers[consumer]:
                allowed = sorted(rules.consumers[consumer]) or ["nothing"]
                out.append(f"line {line}: '{target}' is not the runtime's public API for "
                           f"{consumer} (it may import {', '.join(allowed)})")
            continue
        layer = rules.layer_of(module)
        if layer is None:
            continue
        third_party, uses = rules.layers[layer]
        if top in rules.forbidden and top not in rules.exceptions.get(module, ()):
            out.append(f"line {line}: forbidden import '{target}'")
        elif top == "runtime":
            target_layer = rules.layer_of(target) or "runtime"
            # A sub-layer with a [layer] of its own is another layer, not part of this one.
            if target_layer != layer and not any(_within(target_layer, allowed)
                                                 for allowed in uses):
                out.append(f"line {line}: layer {layer} may not import '{target}' "
                           f"(layer {target_layer})")
        elif top not in third_party and top not in sys.stdlib_module_names:
            out.append(f"line {line}: layer {layer} may not import '{target}'")
    return out


def scan(tree_root: Path, packages: tuple[str, ...] = ("runtime", "picoflow_web"),
         rules: Rules | None = None) -> dict[str, list[str]]:
    """Violations per module of the named packages under ``tree_root``."""
    found: dict[str, list[str]] = {}
    for package in packages:
        for path in sorted((tree_root / package).rglob("*.py")):
            rel = path.relative_to(tree_root).with_suffix("")
            is_package = rel.name == "__init__"
            module = ".".join(rel.parent.parts if is_package else rel.parts)
            bad = violations(path.read_text(encoding="utf-8"), module, is_package=is_package,
                             rules=rules, tree_root=tree_root)
            if bad:
                found[module] = bad
    return found


def test_the_rules_file_names_every_runtime_package() -> None:
    rules = Rules.load()
    packages = {".".join(p.parent.relative_to(ROOT).parts)
                for p in (ROOT / "runtime").rglob("__init__.py")}
    assert packages <= set(rules.layers)
    assert {"runtime.barrier", "runtime.events"} <= packages


def test_the_tree_obeys_the_rules() -> None:
    assert scan(ROOT) == {}


def test_a_forbidden_module_added_to_a_copy_of_the_tree_fails_the_scan(tmp_path: Path) -> None:
    for package in ("runtime", "picoflow_web"):
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    assert scan(tmp_path) == {}
    (tmp_path / "runtime" / "barrier" / "_shortcut.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ..flow import Flow\n"
        "def reach() -> None:\n"
        "    from .. import engine\n"
    )
    (tmp_path / "runtime" / "events" / "_peek.py").write_text("from ..barrier import views\n")
    (tmp_path / "picoflow_web" / "_deep.py").write_text("from runtime.barrier import views\n")
    assert scan(tmp_path) == {
        "runtime.barrier._shortcut": [
            "line 4: layer runtime.barrier may not import 'runtime.flow' (layer runtime)",
            "line 6: layer runtime.barrier may not import 'runtime.engine' (layer runtime)",
        ],
        "runtime.events._peek": [
            "line 1: layer runtime.events may not import 'runtime.barrier' "
            "(layer runtime.barrier)",
        ],
        "picoflow_web._deep": [
            "line 1: 'runtime.barrier' is not the runtime's public API for "
            "picoflow_web (it may import runtime, runtime.events, runtime.integrations.otel, "
            "runtime.whatif)",
        ],
    }


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("runtime.flow", "import django", "line 1: forbidden import 'django'"),
        ("runtime.flow", "from channels.layers import get_channel_layer",
         "forbidden import 'channels.layers'"),
        ("runtime.engine", "import asyncio", "forbidden import 'asyncio'"),
        # The one exception is for one module and one package.
        ("runtime.barrier.types", "import asyncio", "forbidden import 'asyncio'"),
        ("runtime.barrier._spawn", "import asyncio, trio", "forbidden import 'trio'"),
        ("runtime.engine", "import os, trio.lowlevel", "forbidden import 'trio.lowlevel'"),
        ("runtime.engine", "import requests", "may not import 'requests'"),
        ("runtime.events.schema", "import anyio", "layer runtime.events may not import 'anyio'"),
        ("runtime.events.fold", "from ..barrier import types", "'runtime.barrier'"),
        # The channels' rules are pure: the join and the fold read them without pydantic.
        ("runtime.events.channels", "from . import schema", "'runtime.events'"),
        ("runtime.barrier._driver", "from ..turn import Turn", "'runtime.turn'"),
        ("runtime.barrier.views", "def f():\n    from ..step import Step\n",
         "line 2: layer runtime.barrier may not import 'runtime.step'"),
        ("runtime.barrier.types",
         "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..flow import Flow\n",
         "line 3: layer runtime.barrier may not import 'runtime.flow'"),
        ("runtime.errors", "from .jsonutil import json_copy", "'runtime.jsonutil'"),
        ("runtime.flow", "import importlib\nimportlib.import_module('django.conf')",
         "'django.conf'"),
        ("runtime.flow", "__import__('trio')", "forbidden import 'trio'"),
        # The engine loads the OTel sink by name, at run time; nothing imports it.
        ("runtime.engine", "def f():\n    from runtime.integrations.otel import sink\n",
         "layer runtime may not import 'runtime.integrations.otel'"),
        ("runtime.flow", "import importlib\nimportlib.import_module("
         "'runtime.integrations.otel.sink')", "'runtime.integrations.otel.sink'"),
        # httpx2 (the http extra) is loaded by name where it sends, never imported.
        ("runtime.concurrent", "from .transport import clients",
         "layer runtime may not import 'runtime.transport'"),
        ("runtime.events.dashboard", "import httpx2",
         "layer runtime.events may not import 'httpx2'"),
        ("runtime.engine", "import httpx2", "layer runtime may not import 'httpx2'"),
        ("picoflow_web.record.recorder", "from runtime.bus import MemorySink", "'runtime.bus'"),
        ("picoflow_web.live.consumers", "from runtime.events import parse_event",
         "'runtime.events' is not the runtime's public API for picoflow_web.live.consumers"),
    ],
)
def test_the_scanner_catches_forbidden_imports(module: str, source: str, expected: str) -> None:
    found = violations(source, module)
    assert len(found) == 1
    assert expected in found[0]


def test_the_scanner_accepts_what_the_rules_allow() -> None:
    assert violations(
        "from __future__ import annotations\n"
        "import json, sqlite3, contextvars\n"
        "import anyio.to_thread\n"
        "from pydantic import BaseModel\n"
        "from . import errors\n"
        "from .barrier import run_barrier\n"
        "from .events import EventBus\n",
        "runtime.flow") == []
    assert violations("from ..events import BarrierOptions\nfrom ..errors import X\n"
                      "from .views import BranchView\nimport anyio\n",
                      "runtime.barrier._driver") == []
    assert violations("import asyncio\nimport anyio.lowlevel\n", "runtime.barrier._spawn") == []
    assert violations("import importlib\ndef f():\n    importlib.import_module("
                      "'runtime.integrations.otel.sink')\n", "runtime.engine") == []
    assert violations("import importlib\ndef f():\n    importlib.import_module("
                      "'runtime.transport.clients')\n", "runtime.events.ingest_client") == []
    assert violations("import httpx2\nfrom ..concurrent import ChildNotSent\n",
                      "runtime.transport.clients") == []
    assert violations("from .schema import Event\nfrom . import values\n",
                      "runtime.events.fold") == []
    assert violations("from runtime import Flow\nfrom runtime.events import parse_event\n",
                      "picoflow_web.record.recorder") == []
    # ``fold`` is a name runtime.events exports (it shadows the submodule of that name).
    assert violations("from runtime.events import fold\n", "picoflow_web.record.ingest",
                      tree_root=ROOT) == []


def test_importing_the_runtime_loads_no_web_stack() -> None:
    probe = (
        "import sys, runtime\n"
        "print(sorted(m for m in ('django', 'channels', 'trio') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT,
    )
    assert result.stdout.strip() == "[]"


# -- import cycles -----------------------------------------------------------------------


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that runs: inside functions too, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for orelse in child.orelse:
                    visit_one(orelse)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        visit(node)

    visit(tree)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(tree_root: Path, packages: tuple[str, ...] = ("runtime", "picoflow_web")
                 ) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports when it runs (a package's own
    ``__init__`` counts only when it is imported by name, not as every submodule's parent)."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((tree_root / package).rglob("*.py")):
            rel = path.relative_to(tree_root).with_suffix("")
            name = ".".join(rel.parent.parts if rel.name == "__init__" else rel.parts)
            modules[name] = path
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        package = module if is_package else module.rpartition(".")[0]
        edges: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), module)):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
                continue
            target = _from_target(node, package)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    edges.add(sub)
                elif target in modules:
                    edges.add(target)
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def test_no_import_cycle_in_the_runtime_or_the_web_app() -> None:
    assert cycles(import_graph(ROOT)) == []


def test_a_cycle_planted_in_a_copy_of_the_tree_is_found(tmp_path: Path) -> None:
    for package in ("runtime", "picoflow_web"):
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    assert cycles(import_graph(tmp_path)) == []
    (tmp_path / "picoflow_web" / "data" / "_loop_a.py").write_text(
        "def late() -> None:\n    from picoflow_web.data import _loop_b\n")
    (tmp_path / "picoflow_web" / "data" / "_loop_b.py").write_text(
        "from . import _loop_a\n")
    # Imports only a type checker runs make no cycle.
    (tmp_path / "runtime" / "_typed_a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runtime import _typed_b\n")
    (tmp_path / "runtime" / "_typed_b.py").write_text("from runtime import _typed_a\n")
    assert cycles(import_graph(tmp_path)) == [
        ["picoflow_web.data._loop_a", "picoflow_web.data._loop_b"]]


def test_the_scanner_catches_a_web_part_importing_above_itself() -> None:
    found = violations("from picoflow_web.execute import services\n",
                       "picoflow_web.live.consumers")
    assert found == ["line 1: picoflow_web.live may not import "
                     "'picoflow_web.execute' (picoflow_web.execute)"]
    assert violations("from picoflow_web.data import selectors\n",
                      "picoflow_web.live.consumers") == []
