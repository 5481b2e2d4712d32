"""``/api/docs``: the API documentation page (the vendored Swagger UI reading
``/api/openapi.json``), for logged-in users, under the site's unchanged
Content-Security-Policy; the vendored files are found and collected like the app's own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.test import Client

from picoflow_web.models import Membership, Project
from tests.livedaphne import build_env, run_manage

pytestmark = pytest.mark.django_db

VERSION = "5.35.0"
VENDOR = "picoflow_web/vendor/swagger-ui"
BUNDLE = f"{VENDOR}/swagger-ui-bundle.js"
STYLES = f"{VENDOR}/swagger-ui.css"
STRICT = {
    "default-src": "'self'", "script-src": "'self'", "style-src": "'self'",
    "img-src": "'self' data:", "connect-src": "'self'", "font-src": "'self'",
    "object-src": "'none'", "base-uri": "'self'", "form-action": "'self'",
    "frame-ancestors": "'none'",
}


@pytest.fixture
def user_client(client: Client) -> Client:
    user = get_user_model().objects.create_user("reader", password="pw-for-tests-1")
    project, _ = Project.objects.get_or_create(name="default")
    Membership.objects.create(project=project, user=user, role="viewer")
    client.force_login(user)
    return client


def _policy(response: Any) -> dict[str, str]:
    parts = (p.strip().split(None, 1) for p in response["Content-Security-Policy"].split(";"))
    return {p[0]: p[1] if len(p) > 1 else "" for p in parts if p}


def test_a_logged_in_user_gets_the_page_with_the_vendored_viewer(user_client: Client) -> None:
    response = user_client.get("/api/docs")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert f'<script src="/static/{BUNDLE}"></script>' in html
    assert f'href="/static/{STYLES}"' in html
    assert '<script type="module" src="/static/picoflow_web/js/api_docs_ui.js">' in html
    assert 'data-spec-url="/api/openapi.json"' in html
    # No inline script, handler or style: the page lives under the strict policy.
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag, tag
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert not re.search(r"\sstyle\s*=", html), "inline style attribute"
    # The nav links it on every page.
    assert 'href="/api/docs"' in user_client.get("/").content.decode()


def test_anonymous_users_are_sent_to_the_login_page(client: Client) -> None:
    response = client.get("/api/docs")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/api/docs"


def test_unsafe_methods_are_refused_in_the_api_error_shape(user_client: Client) -> None:
    response = user_client.post("/api/docs")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_the_policy_is_the_strict_one_there_and_on_the_other_pages(
    user_client: Client,
) -> None:
    docs = _policy(user_client.get("/api/docs"))
    assert docs == STRICT
    for path in ("/", "/login/"):
        assert _policy(user_client.get(path)) == STRICT, path


def test_the_vendored_files_are_found_with_their_license_and_version() -> None:
    for name in (BUNDLE, STYLES, f"{VENDOR}/LICENSE", f"{VENDOR}/NOTICE", f"{VENDOR}/README.md"):
        assert finders.find(name), name
    bundle = Path(str(finders.find(BUNDLE))).read_text(encoding="utf-8")
    assert f'PACKAGE_VERSION:"{VERSION}"' in bundle
    readme = Path(str(finders.find(f"{VENDOR}/README.md"))).read_text(encoding="utf-8")
    assert f"swagger-ui-dist@{VERSION}" in readme
    assert "Apache License" in Path(str(finders.find(f"{VENDOR}/LICENSE"))).read_text()


def test_collectstatic_with_debug_off_hashes_and_compresses_the_vendored_files(
    tmp_path: Path,
) -> None:
    """Production mode's manifest storage post-processes every file (the stylesheet's
    source map comment included): the vendored files come out hashed and compressed."""
    data = tmp_path / "data"
    result = run_manage("collectstatic", "--noinput",
                        env=build_env(data, {"PICOFLOW_DEBUG": "0"}))
    assert result.returncode == 0, result.stderr
    collected = data / "staticfiles"
    manifest = json.loads((collected / "staticfiles.json").read_text())["paths"]
    for name in (BUNDLE, STYLES, "picoflow_web/js/api_docs_ui.js"):
        hashed = manifest[name]
        assert re.search(r"\.[0-9a-f]{12}\.(js|css)$", hashed), hashed
        assert (collected / hashed).is_file() and (collected / f"{hashed}.gz").is_file()
