"""The app in a Django project of someone else's: ``django-admin startproject``, the
install guide's snippets (docs/how-to/install.md) appended as they are written there,
``migrate``, ``manage.py serve`` (Daphne on the project's ASGI application, one worker),
then the runs page, a websocket, and a run that reaches that websocket from the worker.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.packaging.installed import (
    REPO_ROOT,
    Venv,
    background,
    free_port,
    outside_env,
    run,
    wait_healthy,
)
from tests.webhelpers import HttpSession, bearer

pytestmark = [pytest.mark.slow]

websockets = pytest.importorskip("websockets", reason="pip install websockets")


def docs_snippets() -> dict[str, str]:
    """The install guide's ``<!-- django-project: FILE -->`` code blocks, by file name."""
    text = (REPO_ROOT / "docs" / "how-to" / "install.md").read_text(encoding="utf-8")
    found = dict(re.findall(r"<!-- django-project: (\S+) -->\n```py\n(.*?)```", text, re.DOTALL))
    assert set(found) == {"settings.py", "urls.py", "asgi.py"}, sorted(found)
    return found


@pytest.fixture(scope="module")
def project(web_venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mysite``, made by the installed ``django-admin`` and set up as the docs say."""
    home = tmp_path_factory.mktemp("project")
    env = outside_env(home)
    run([web_venv.bin("django-admin"), "startproject", "mysite"], env=env, cwd=home)
    root = home / "mysite"
    for name, snippet in docs_snippets().items():
        with (root / "mysite" / name).open("a", encoding="utf-8") as handle:
            handle.write("\n" + snippet)
    with (root / "mysite" / "settings.py").open("a", encoding="utf-8") as handle:
        handle.write('PICOFLOW["DEMO_LATENCY"] = 0.02  # the test: quick demo runs\n')
    return root


def manage(venv: Venv, project: Path, *args: str) -> str:
    return run([venv.python, "manage.py", *args], env=outside_env(project), cwd=project).stdout


def test_the_project_checks_migrates_and_finds_the_apps_files(
    web_venv: Venv, project: Path,
) -> None:
    manage(web_venv, project, "check")
    manage(web_venv, project, "migrate", "--noinput")
    found = manage(web_venv, project, "findstatic", "picoflow_web/js/run_ui.js")
    assert "site-packages/picoflow_web/static/picoflow_web/js/run_ui.js" in found
    login = manage(web_venv, project, "ensure_admin")
    # The app's data folder is the one the project's PICOFLOW dict names.
    assert str(project / "picoflow" / "admin_password") in login


@pytest.mark.anyio
async def test_the_project_serves_the_runs_page_and_a_run_reaches_its_websocket(
    web_venv: Venv, project: Path,
) -> None:
    manage(web_venv, project, "migrate", "--noinput")
    manage(web_venv, project, "ensure_admin")
    password = (project / "picoflow" / "admin_password").read_text().strip()
    token = manage(web_venv, project, "create_api_token", "admin", "tests",
                   "--scope", "read", "--scope", "run").strip().splitlines()[-1]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with background([web_venv.python, "manage.py", "serve", "--port", str(port),
                     "--workers", "1"], env=outside_env(project), cwd=project,
                    log_path=project / "serve.log") as process:
        wait_healthy(base, process, project / "serve.log")
        browser = HttpSession(base)
        assert browser.get("/").status == 302  # the app's login_required, to LOGIN_URL
        browser.login("admin", password)
        page = browser.get("/")
        assert page.status == 200 and b'id="pf-runs"' in page.body
        assert b"/static/picoflow_web/" in page.body
        assert browser.get("/static/picoflow_web/js/runs_ui.js").status == 200
        async with websockets.connect(
            f"ws://127.0.0.1:{port}/ws/runs/",
            additional_headers={"Cookie": browser.cookie_header(), "Origin": base},
        ) as socket:
            started = browser.post("/api/runs", json_body={"flow": "ResearchFlow",
                                                           "message": "tide pools"},
                                   headers=bearer(token))
            assert started.status == 201, started.body
            run_id = started.json()["run"]["id"]
            statuses = await asyncio.wait_for(_statuses_until_finished(socket, run_id), 60)
        assert statuses[-1] == "finished"
        assert browser.get(f"/runs/{run_id}/").status == 200


async def _statuses_until_finished(socket: Any, run_id: str) -> list[str]:
    """The statuses the runs socket announced for ``run_id``, up to its end."""
    seen: list[str] = []
    while not seen or seen[-1] not in ("finished", "failed", "interrupted", "cancelled"):
        message = json.loads(await socket.recv())
        if message.get("type") == "run" and message["run"]["id"] == run_id:
            seen.append(message["run"]["status"])
    return seen


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
