"""tests/README.md's index names the tests of every module that has no test_<module>.py."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "tests" / "README.md"
ROW = re.compile(r"^\| `([\w.]+?)(\.\*)?` \| (.+) \|$", re.M)


def modules() -> list[str]:
    found = []
    for package in ("runtime", "picoflow_web"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts or path.name == "__init__.py":
                continue
            found.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def index() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(module rows, package rows) of the index, each to the test files it names."""
    rows: dict[str, list[str]] = {}
    groups: dict[str, list[str]] = {}
    for name, star, tests in ROW.findall(INDEX.read_text(encoding="utf-8")):
        (groups if star else rows)[name] = re.findall(r"`([^`]+)`", tests)
    return rows, groups


def untested(modules: list[str], rows: dict[str, list[str]], groups: dict[str, list[str]],
             own: set[str]) -> list[str]:
    return [m for m in modules
            if f"test_{m.rsplit('.', 1)[1].lstrip('_')}.py" not in own and m not in rows
            and not any(m.startswith(g + ".") for g in groups)]


def test_every_module_has_its_own_test_file_or_a_row_in_the_index() -> None:
    rows, groups = index()
    own = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
    assert untested(modules(), rows, groups, own) == []


def test_every_test_file_the_index_names_exists() -> None:
    rows, groups = index()
    named = {test for tests in [*rows.values(), *groups.values()] for test in tests}
    assert named  # the index was read
    assert sorted(t for t in named if not (ROOT / "tests" / t).is_file()) == []


def test_a_module_without_tests_or_a_row_is_found() -> None:
    rows, groups = index()
    assert untested(["picoflow_web.record.brand_new"], rows, groups, set()) == [
        "picoflow_web.record.brand_new"]
    assert untested(["runtime.events.fold.brand_new"], rows, groups, set()) == []
