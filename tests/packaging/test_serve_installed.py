"""``pip install`` the wheel into a fresh virtualenv, ``picoflow-web serve``, and use it.

The wheel must carry what the dashboard renders (templates, ES modules, CSS, the events'
JSON Schema), its migrations and demo data; the installed command must find them with no
checkout around, keep its data in the per-user folder, and run a demo flow to its end in
Debian's chromium.
"""

from __future__ import annotations

import re
import tarfile
import urllib.request
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest

from picoflow_web import __version__
from tests.e2e.browsing import CHROMIUM, logged_in_page, start_run
from tests.packaging.conftest import Dists
from tests.packaging.installed import REPO_ROOT, Served, Venv, run, served

pytestmark = [pytest.mark.slow]

SITE_FILES = (
    "picoflow_web/templates/picoflow_web/base.html",
    "picoflow_web/templates/picoflow_web/run.html",
    "picoflow_web/static/picoflow_web/js/run_ui.js",
    "picoflow_web/static/picoflow_web/css/app.css",
    "picoflow_web/static/picoflow_web/schema/events.schema.json",
    "picoflow_web/migrations/0001_initial.py",
    "picoflow_web/demos/hotel/catalog.json",
)


def test_the_wheel_carries_templates_static_files_migrations_and_demo_data(
    dists: Dists,
) -> None:
    print(f"build (sdist, then the wheel from it): {dists.seconds:.1f} s")
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = Parser().parsestr(
            wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode())
        entry_points = wheel.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert set(SITE_FILES) <= names, set(SITE_FILES) - names
    # Every static file of the checkout is in the wheel, under the package.
    for folder in ("static", "templates"):
        for path in (REPO_ROOT / folder).rglob("*"):
            if path.is_file():
                assert f"picoflow_web/{path.relative_to(REPO_ROOT)}" in names, path
    assert not any(n.startswith(("tests/", "static/", "templates/")) for n in names)
    assert {"runtime/py.typed", "picoflow_web/py.typed"} <= names  # PEP 561: typed packages
    assert metadata["Version"] == __version__
    assert metadata["License-Expression"] == "MIT"
    assert "Framework :: Django" in metadata.get_all("Classifier", [])
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)} <= set(
        metadata.get_all("Classifier", []))
    assert any(u.startswith("Changelog, ") for u in metadata.get_all("Project-URL", []))
    # The base requirements are the runtime's; the dashboard's come with the web extra.
    plain = [r for r in metadata.get_all("Requires-Dist", []) if "extra ==" not in r]
    assert sorted(re.split(r"[<>=\[ ]", r)[0].lower() for r in plain) == ["anyio", "pydantic"]
    assert any(r.startswith("django") and 'extra == "web"' in r.lower()
               for r in metadata.get_all("Requires-Dist", []))
    assert "picoflow-web = picoflow_web.cli:main" in entry_points
    with tarfile.open(dists.sdist) as sdist:
        members = {m.split("/", 1)[1] for m in sdist.getnames() if "/" in m}
    assert {"CHANGELOG.md", "LICENSE", "setup.py", "templates/picoflow_web/run.html",
            "static/picoflow_web/js/run_ui.js"} <= members


def test_serve_keeps_its_data_in_the_per_user_folder_and_serves_static_files(
    dashboard: Served, web_venv: Venv,
) -> None:
    data = dashboard.data_dir
    assert str(data).endswith("xdg-data/picoflow-web")
    assert (data / "picoflow.sqlite3").is_file()
    assert (data / "admin_password").is_file()
    # collectstatic wrote into the data folder, not into site-packages.
    assert (data / "staticfiles" / "picoflow_web" / "js" / "run_ui.js").is_file()
    assert f"Log in as 'admin' with password '{(data / 'admin_password').read_text().strip()}'" \
        in dashboard.log()
    with urllib.request.urlopen(dashboard.base_url + "/static/picoflow_web/js/api.js") as r:
        assert r.status == 200 and b"export" in r.read()
    # It is the installed copy that answers, at the version the wheel was built with.
    where = run([web_venv.python, "-c", "import importlib.metadata as m, picoflow_web; "
                 "print(m.version('picoflow-web'), picoflow_web.__file__)"],
                env=dashboard.env, cwd=dashboard.data_dir).stdout
    assert where.startswith(f"{__version__} ")
    assert "site-packages/picoflow_web/__init__.py" in where
    assert str(REPO_ROOT) not in where


@pytest.mark.browser
@pytest.mark.anyio
async def test_an_installed_dashboard_logs_in_and_runs_a_demo_to_its_end(
    dashboard: Served,
) -> None:
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: apt-get install chromium (make test does)")
    password = (dashboard.data_dir / "admin_password").read_text().strip()
    page: Any
    async with logged_in_page(dashboard.base_url, password) as page:
        run_id = await start_run(page, "ResearchFlow", "research tide pools", goto=False)
        # The run executes in the worker serve started; its page follows it to the end.
        await page.wait_for_selector("#pf-run[data-status=finished]", timeout=90_000)
        assert await page.locator(".pf-branch").count() == 4
        # The runs list (server-rendered template, live ES modules) lists it as finished.
        await page.goto("/")
        await page.wait_for_selector(
            f'.pf-run-row[data-run-id="{run_id}"][data-status=finished]', timeout=30_000)


@pytest.fixture
def anyio_backend() -> str:
    """Playwright's async API runs on asyncio."""
    return "asyncio"


def test_with_debug_off_the_installed_copy_serves_its_collected_hashed_static_files(
    web_venv: Venv, tmp_path: Path,
) -> None:
    """Production mode: WhiteNoise serves what ``serve`` collected into the data folder
    (hashed names, from the manifest), not the package's source files."""
    production = {"PICOFLOW_DEBUG": "0", "PICOFLOW_SECURE_SSL_REDIRECT": "0",
                  "PICOFLOW_SECRET_KEY": "a-test-secret-key-" + "x" * 40}
    with served(web_venv, tmp_path, workers=0, env=production) as server:
        with urllib.request.urlopen(server.base_url + "/login/") as r:
            page = r.read().decode()
        css = re.search(r'href="(/static/picoflow_web/css/app\.[0-9a-f]{12}\.css)"', page)
        assert css is not None, page
        with urllib.request.urlopen(server.base_url + css.group(1)) as r:
            assert r.status == 200 and b"--" in r.read()
        assert (server.data_dir / "staticfiles" / "staticfiles.json").is_file()
