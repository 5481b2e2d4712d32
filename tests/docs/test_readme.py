"""The README and the docs pages: their Python examples run as written, and the README stays
what a newcomer reads on a screen or two (the two commands first, links that lead
somewhere)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def examples() -> list[tuple[str, str]]:
    """Every ```python block of the README and the docs, named by its page and place."""
    found = []
    for page in PAGES:
        blocks = PYTHON.findall(page.read_text(encoding="utf-8"))
        name = page.relative_to(ROOT).as_posix()
        found += [(f"{name} example {i + 1}", block) for i, block in enumerate(blocks)]
    return found


EXAMPLES = examples()


def test_the_readme_and_the_docs_have_python_examples() -> None:
    names = [name for name, _ in EXAMPLES]
    assert any(name.startswith("README.md") for name in names)
    assert len(names) >= 8, names


@pytest.mark.parametrize("name, source", EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_runs(name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module of its own, as a script would be: libraries that resolve a class's
    # annotations (LangGraph reading a TypedDict state) look its module up in sys.modules.
    module = types.ModuleType(re.sub(r"\W", "_", name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, name, "exec"), module.__dict__)


def test_the_readme_is_short() -> None:
    assert README.stat().st_size < 25_000


def test_the_readme_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first_section = re.search(r"^## (.+)$", text, re.MULTILINE)
    assert first_section is not None and first_section.group(1) == "Quick start"
    first_block = re.search(r"^```\w*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make run", "make test"]


def test_the_readmes_relative_links_lead_to_files() -> None:
    text = README.read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
               if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    assert sorted(t for t in targets if not (ROOT / t).exists()) == []


def test_every_docs_page_is_reachable_from_the_readme_or_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    assert sorted(p for p in pages if p not in nav) == []
