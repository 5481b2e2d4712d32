"""The ``python -m runtime`` command line.

    python -m runtime run module:FlowClass "message" [--session ID] [--config JSON]
                                                     [--store PATH]
    python -m runtime trace FILE.jsonl
    python -m runtime whatif FILE.jsonl [--run ID] [--json] [--max-concurrency N]
    python -m runtime schema

``run`` runs one turn of a flow: ``module`` is a dotted module path (importable from the
current directory) or a path to a ``.py`` file. It prints the reply, then the session id on
a line of its own (``session: <id>``) so the next turn can continue it with ``--session``,
and exits 1 when the turn failed. Sessions live in memory unless ``--store PATH`` names a
SQLite file, which is what lets ``--session`` continue a session across invocations.

Models: the ``providers`` the flow's module defines (a mapping of provider name to model,
or a function returning one), plus an ``openai`` provider
(:meth:`~runtime.adapters.openai.OpenAICompatibleModel.from_env`, the ``openai`` extra)
when ``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` is set. Flows made only of logic steps
need none. With ``PICOFLOW_DASHBOARD_URL`` and ``PICOFLOW_DASHBOARD_TOKEN`` set, the turn's
events go to that dashboard, flushed before the command exits.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio

from .engine import FlowEngine
from .events.trace import USAGE as TRACE_USAGE
from .events.trace import main as trace_main
from .flow import Flow
from .llm import Model
from .openai_compat import OpenAIExtraMissing, load_openai_model
from .stores import MemorySessionStore, SessionStore, SQLiteSessionStore
from .whatif.cli import USAGE as WHATIF_USAGE
from .whatif.cli import main as whatif_main

USAGE = f"""{TRACE_USAGE}
{WHATIF_USAGE}
  python -m runtime run module:FlowClass "message" [--session ID] [--config JSON]
                                                   [--store PATH]
                                       one turn of a flow; prints the reply and the session"""


class UsageError(Exception):
    """A command line that cannot run (exit status 2)."""


def load_flow(spec: str) -> tuple[type[Flow], ModuleType]:
    """``module:FlowClass`` (a dotted module or a ``.py`` path) to the flow class."""
    module_name, sep, class_name = spec.rpartition(":")
    if not sep or not module_name or not class_name:
        raise UsageError(f"expected module:FlowClass, not {spec!r}")
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = Path(module_name).resolve()
        if not path.is_file():
            raise UsageError(f"no such file: {module_name}")
        unique = f"picoflow_cli_{path.stem}"
        loader = importlib.util.spec_from_file_location(unique, path)
        if loader is None or loader.loader is None:
            raise UsageError(f"cannot import {module_name}")
        module = importlib.util.module_from_spec(loader)
        sys.modules[unique] = module
        sys.path.insert(0, str(path.parent))  # its own sibling imports
        try:
            loader.loader.exec_module(module)
        except Exception as exc:
            raise UsageError(f"cannot import {module_name}: {_why(exc)}") from None
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise UsageError(f"cannot import {module_name}: {_why(exc)}") from None
    if not hasattr(module, class_name):
        raise UsageError(f"{module_name} has no {class_name!r}")
    flow = getattr(module, class_name)
    if not (isinstance(flow, type) and issubclass(flow, Flow)):
        raise UsageError(f"{class_name!r} in {module_name} is not a Flow subclass "
                         f"(it is {type(flow).__name__!r})")
    return flow, module


def _why(exc: Exception) -> str:
    """One line on why an import failed, with the file and line it failed at when that is
    the user's code (a raw traceback of the import machinery says less)."""
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if "importlib" not in f.filename and f.filename != __file__]
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    text = " ".join(str(exc).split()) if not isinstance(exc, SyntaxError) else exc.msg
    return f"{type(exc).__name__}: {text}{where}"


def providers_for(module: ModuleType, environ: Mapping[str, str]) -> dict[str, Model]:
    """The module's own ``providers`` and, when configured, the ``openai`` provider."""
    providers: dict[str, Model] = {}
    if environ.get("OPENAI_BASE_URL") or environ.get("OPENAI_API_KEY"):
        try:
            providers["openai"] = load_openai_model().from_env(environ)
        except OpenAIExtraMissing as exc:
            raise UsageError(f"OPENAI_BASE_URL or OPENAI_API_KEY is set: {exc}") from None
    own: Any = getattr(module, "providers", None)
    if callable(own):
        own = own()
    if isinstance(own, Mapping):
        providers.update(own)
    return providers


async def run_turn(args: argparse.Namespace) -> int:
    flow, module = load_flow(args.flow)
    try:
        config = json.loads(args.config) if args.config is not None else None
    except ValueError as exc:
        raise UsageError(f"--config is not JSON: {exc}") from None
    if config is not None and not isinstance(config, dict):
        raise UsageError("--config must be a JSON object")
    store: SessionStore = SQLiteSessionStore(args.store) if args.store else MemorySessionStore()
    engine = FlowEngine(flows=[flow], providers=providers_for(module, os.environ), store=store)
    try:
        reply = await engine.run(flow.id, args.message, session_id=args.session, config=config)
    finally:
        await engine.close()
    stream = sys.stdout if reply.success else sys.stderr
    print(reply.message, file=stream)
    print(f"session: {reply.session_id}")
    if not reply.success:
        print(f"error: {reply.error_code}", file=sys.stderr)
    return 0 if reply.success else 1


def main(argv: Sequence[str]) -> int:
    """Dispatch ``run`` here, ``trace`` and ``schema`` to :mod:`runtime.events.trace`,
    ``whatif`` to :mod:`runtime.whatif.cli`."""
    argv = list(argv)
    if not argv or argv[0] != "run":
        if argv and argv[0] in ("trace", "schema"):
            return trace_main(argv)
        if argv and argv[0] == "whatif":
            return whatif_main(argv[1:])
        print(USAGE)
        return 2
    parser = argparse.ArgumentParser(prog="python -m runtime run",
                                     description="Run one turn of a flow.")
    parser.add_argument("flow", help="module:FlowClass (dotted module or path to a .py file)")
    parser.add_argument("message", help="the user message")
    parser.add_argument("--session", default=None, help="continue this session")
    parser.add_argument("--config", default=None, help="the turn's config, a JSON object")
    parser.add_argument("--store", default=None,
                        help="SQLite file for sessions (default: in memory, this run only)")
    args = parser.parse_args(argv[1:])
    try:
        return anyio.run(run_turn, args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
