"""The docs site builds with ``mkdocs build --strict`` (what ``make docs`` runs): every page
in the nav, no broken link or anchor, the API reference rendered from the docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                            "--site-dir", str(out)], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    pages = {p.relative_to(ROOT / "docs").with_suffix("").as_posix()
             for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(site).parent.as_posix() for p in site.rglob("index.html")}
    expected = {"." if p == "index" else p.removesuffix("/index") for p in pages}
    assert sorted(expected - built) == []


def test_the_api_reference_is_rendered_from_docstrings(site: Path) -> None:
    flows = (site / "reference" / "api" / "flows" / "index.html").read_text(encoding="utf-8")
    assert "run_steps" in flows and "save_state" in flows
    assert ":class:" not in flows  # docs_hooks.py: Sphinx roles read as code
    errors = (site / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    assert "ParallelStateConflictError" in errors


def test_the_home_page_shows_the_screenshot_and_the_two_commands(site: Path) -> None:
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'src="assets/run-page.png"' in home
    assert (site / "assets" / "run-page.png").is_file()
    assert home.index("make run") < home.index("make test")
