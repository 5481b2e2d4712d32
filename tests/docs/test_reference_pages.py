"""The reference pages name what the code has: every ``PICOFLOW_*`` variable the code reads
is in docs/reference/configuration.md, and every command and option the command lines
declare is in docs/reference/cli.md."""

from __future__ import annotations

import re
from pathlib import Path

from picoflow_web.config.app_settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "reference"
VARIABLE = re.compile(r"\bPICOFLOW_[A-Z][A-Z0-9_]*[A-Z0-9]\b")
OPTION = re.compile(r"""add_argument\(\s*(?:"-\w",\s*)?"(--[a-z][a-z-]*)\"""")
COMMAND_LINES = [
    ROOT / "picoflow_web" / "cli.py",
    ROOT / "runtime" / "cli.py",
    ROOT / "runtime" / "whatif" / "cli.py",
    ROOT / "runtime" / "integrations" / "langgraph_demos.py",
    ROOT / "picoflow_web" / "demos" / "otel_agent.py",
    *sorted((ROOT / "picoflow_web" / "management" / "commands").glob("*.py")),
]


def code_variables() -> set[str]:
    found = {f"PICOFLOW_{name}" for name in DEFAULTS}
    for package in ("runtime", "picoflow_web"):
        for path in (ROOT / package).rglob("*.py"):
            found |= set(VARIABLE.findall(path.read_text(encoding="utf-8")))
    return found


def test_every_variable_the_code_reads_is_in_the_configuration_page() -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    table = set(re.findall(r"^\| `(PICOFLOW_[A-Z0-9_]+)` \|", page, re.MULTILINE))
    variables = code_variables()
    assert len(variables) > 30
    assert sorted(variables - table) == []


def test_every_option_and_command_is_in_the_command_line_page() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    options = {option for path in COMMAND_LINES
               for option in OPTION.findall(path.read_text(encoding="utf-8"))}
    assert {"--data-dir", "--store", "--max-concurrency", "--expires-in"} <= options
    assert sorted(o for o in options if f"{o}" not in page) == []
    commands = [p.stem for p in (ROOT / "picoflow_web" / "management" / "commands").glob("*.py")
                if not p.stem.startswith("_")]
    assert sorted(c for c in commands if f"`{c}" not in page) == []


def test_a_variable_missing_from_the_page_is_found() -> None:
    assert VARIABLE.findall('os.environ.get("PICOFLOW_BRAND_NEW", "")') == ["PICOFLOW_BRAND_NEW"]
    assert OPTION.findall('parser.add_argument("-o", "--output", help="x")') == ["--output"]


def test_every_file_the_readme_and_the_docs_name_exists() -> None:
    # A page that names a module the code no longer has describes code that is gone.
    path = re.compile(r"`((?:runtime|picoflow_web|tests|scripts|bench|static|templates|docs)"
                      r"/[\w/.-]+\.(?:py|toml|mjs|js|json|md|sh))`")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {(page.relative_to(ROOT).as_posix(), name) for page in pages
             for name in path.findall(page.read_text(encoding="utf-8"))}
    assert len(named) > 20
    assert sorted((page, name) for page, name in named if not (ROOT / name).exists()) == []
