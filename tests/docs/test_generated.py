"""The generated docs pages are current: the event catalogue is what
scripts/gen_event_catalogue.py writes from runtime/events/schema.py, and the OpenAPI copy
and its endpoints page what scripts/gen_openapi.py writes from picoflow_web/http/openapi.py.
A change to either source fails here until the script is run again."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from runtime.events import EVENT_TYPES

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"docs_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_event_catalogue_is_generated_from_the_schema() -> None:
    catalogue = script("gen_event_catalogue")
    committed = (ROOT / "docs" / "reference" / "events.md").read_text(encoding="utf-8")
    assert committed == catalogue.render(), (
        "docs/reference/events.md is stale: run python scripts/gen_event_catalogue.py")


def test_the_catalogue_has_a_section_for_every_event_type() -> None:
    text = (ROOT / "docs" / "reference" / "events.md").read_text(encoding="utf-8")
    missing = [t for t in EVENT_TYPES
               if f"### `{t}` {{#{t.replace('.', '-').replace('_', '-')}}}" not in text]
    assert missing == []


def test_the_catalogue_shows_field_docstrings_and_types() -> None:
    text = (ROOT / "docs" / "reference" / "events.md").read_text(encoding="utf-8")
    assert "| `requested_by` | `str | None` | required | Who asked" in text
    assert "| `seq` | `int (≥ 0)` | required | Per-run, gap-free sequence number. |" in text


def test_the_openapi_copy_and_its_page_are_generated_from_the_document() -> None:
    # A process of its own: the document is a default server's (the demo flows), built
    # under the standalone settings, not this test session's.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    checked = subprocess.run([sys.executable, str(SCRIPTS / "gen_openapi.py"), "--check"],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_endpoints_page_lists_every_path_of_the_document() -> None:
    document = json.loads((ROOT / "docs" / "reference" / "openapi.json").read_text("utf-8"))
    page = (ROOT / "docs" / "reference" / "openapi.md").read_text(encoding="utf-8")
    listed = [f"`{method.upper()} {path}`" for path, item in document["paths"].items()
              for method in item if method in ("get", "post", "put", "patch", "delete")]
    assert listed and [m for m in listed if m not in page] == []
