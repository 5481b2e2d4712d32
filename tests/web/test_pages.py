"""Pages through Django's test client: login required, then rendered."""

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.test import Client

from picoflow_web.models import Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def user_client(client: Client) -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-for-tests-1")
    project, _ = Project.objects.get_or_create(name="default")
    Membership.objects.create(project=project, user=user, role="operator")
    client.force_login(user)
    return client


def test_pages_redirect_to_login_when_logged_out(client: Client) -> None:
    for path in ["/", "/runs/unknown/", "/sessions/unknown/"]:
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")


def test_login_page_renders_the_form(client: Client) -> None:
    body = client.get("/login/").content.decode()
    assert 'id="id_username"' in body and 'id="id_password"' in body


def test_index_renders_title_stylesheet_and_start_form(user_client: Client) -> None:
    response = user_client.get("/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert "<title>" in body and "PicoFlow Web" in body
    assert "/static/picoflow_web/css/app.css" in body
    assert 'id="pf-start-form"' in body
    assert "ResearchFlow" in body


def test_unknown_run_and_session_are_404_for_a_user(user_client: Client) -> None:
    assert user_client.get("/runs/nope/").status_code == 404
    assert user_client.get("/sessions/nope/").status_code == 404


def test_healthz_returns_ok_json_without_login(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_head_is_allowed(user_client: Client, path: str) -> None:
    assert user_client.head(path).status_code == 200


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_post_is_rejected(user_client: Client, path: str) -> None:
    assert user_client.post(path).status_code == 405


def test_unknown_path_is_404(user_client: Client) -> None:
    assert user_client.get("/no-such-page").status_code == 404


def test_the_session_picker_says_how_each_session_stands(user_client: Client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from picoflow_web.models import Run, StoredSession

    start = timezone.now() - timedelta(hours=1)
    cases = {  # session id: (the document's run_status, its runs' statuses, oldest first)
        "s-open": ("running", ["finished"]),
        "s-live": ("running", ["finished", "queued"]),
        "s-done": ("completed", ["finished"]),
        "s-failed": ("running", ["finished", "failed"]),
        "s-new": ("running", []),
    }
    for session_id, (run_status, statuses) in cases.items():
        StoredSession.objects.create(id=session_id, flow="HotelFlow", revision=1,
                                     run_status=run_status, doc={})
        for n, status in enumerate(statuses):
            run = Run.objects.create(id=f"{session_id}-{n}", flow="HotelFlow",
                                     session_id=session_id, status=status)
            # Distinct start times, so which run is the latest does not hang on the clock.
            Run.objects.filter(id=run.id).update(started_at=start + timedelta(minutes=n))
    body = user_client.get("/").content.decode()
    # A session whose last turn finished is waiting for the next one, not "running".
    assert "HotelFlow · s-open (open)" in body
    assert "HotelFlow · s-live (turn running)" in body
    assert "HotelFlow · s-done (completed)" in body
    assert "HotelFlow · s-failed (last turn failed)" in body
    assert "HotelFlow · s-new (open)" in body
    assert "(running)" not in body


def test_the_compare_page_names_both_runs_and_loads_its_module(user_client: Client) -> None:
    from picoflow_web.models import Run

    a = Run.objects.create(id="r-cmp-a", flow="TimingFlow", session_id="s-a", status="finished")
    b = Run.objects.create(id="r-cmp-b", flow="TimingFlow", session_id="s-b", status="finished")
    response = user_client.get(f"/runs/{a.id}/compare/{b.id}/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="pf-compare"' in body and 'data-a="r-cmp-a" data-b="r-cmp-b"' in body
    assert "/static/picoflow_web/js/compare_ui.js" in body
    # Swapping a and b is a link to the same page the other way round.
    assert f'href="/runs/{b.id}/compare/{a.id}/"' in body
    names = {link.removeprefix("/static/picoflow_web/js/") for link in _preloads(body)}
    assert {"compare.js", "whatif.js", "whatif_ui.js", "layout.js"} <= names


def test_the_compare_page_needs_login_and_two_runs_the_user_may_see(
        user_client: Client) -> None:
    from picoflow_web.models import Run

    mine = Run.objects.create(id="r-cmp-mine", flow="TimingFlow", session_id="s-m",
                              status="finished")
    other = Project.objects.create(name="elsewhere")
    theirs = Run.objects.create(id="r-cmp-theirs", flow="TimingFlow", session_id="s-t",
                                status="finished", project=other)
    assert Client().get(f"/runs/{mine.id}/compare/{mine.id}/").status_code == 302
    assert user_client.get(f"/runs/{mine.id}/compare/nope/").status_code == 404
    assert user_client.get(f"/runs/nope/compare/{mine.id}/").status_code == 404
    assert user_client.get(f"/runs/{mine.id}/compare/{theirs.id}/").status_code == 404
    assert user_client.get(f"/runs/{theirs.id}/compare/{mine.id}/").status_code == 404


def test_the_run_page_offers_the_what_if_view_and_a_compare_picker(user_client: Client) -> None:
    from picoflow_web.models import Run

    run = Run.objects.create(id="r-whatif", flow="TimingFlow", session_id="s-w",
                             status="finished")
    body = user_client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-view="whatif"' in body and 'id="pf-whatif"' in body
    assert 'id="pf-compare-with" class="pf-input pf-input-small pf-compare-with" ' \
           'data-flow="TimingFlow"' in body


def _preloads(body: str) -> list[str]:
    return re.findall(r'<link rel="modulepreload" href="([^"]+)">', body)


def test_pages_preload_their_whole_module_graph_once(user_client: Client) -> None:
    """Every module a page's entry reaches is preloaded, however deep (fold/undo.js is three
    imports below run_ui.js, in a folder), each once, under the URL its importers resolve to."""
    from picoflow_web.models import Run

    run = Run.objects.create(id="r-preload", flow="HotelFlow", session_id="s-preload",
                             status="finished")
    pages = {f"/runs/{run.id}/": {"fold/undo.js", "labels.js", "cascade.js", "store.js"},
             "/": {"runs_filter.js", "config_form.js", "api.js"}}
    for path, deep in pages.items():
        links = _preloads(user_client.get(path).content.decode())
        assert len(links) == len(set(links)), f"{path}: a module preloaded twice"
        names = {link.removeprefix("/static/picoflow_web/js/") for link in links}
        assert deep <= names, f"{path}: missing {deep - names}"
        assert all(link.startswith("/static/picoflow_web/js/") for link in links)
        # No entry module among them: it is the page's own script tag.
        assert not names & {"run_ui.js", "runs_ui.js", "import_ui.js"}
        for link in links:
            assert finders.find(link.removeprefix("/static/")), f"{link} is no static file"


def test_the_module_graph_follows_imports_and_re_exports_and_skips_what_is_missing(
        tmp_path: Path, settings: Any) -> None:
    from picoflow_web.templatetags.picoflow_modules import module_graph

    js = tmp_path / "app"
    js.mkdir()
    (js / "entry.js").write_text(
        'import { a } from "./a.js";\nimport "./side.js";\nexport { b } from "./lib/b.js";\n'
        '// import { no } from "./commented.js" is a comment, not an import\n'
        'const later = () => import("./lazy.js");\n')
    (js / "a.js").write_text('import { b } from "./lib/b.js";\nimport { gone } from "./gone.js";\n')
    (js / "side.js").write_text("")
    (js / "lib").mkdir()
    (js / "lib" / "b.js").write_text('import { a } from "../a.js";\n')  # a cycle
    settings.STATICFILES_DIRS = [str(tmp_path)]
    assert module_graph("app/entry.js") == ["app/a.js", "app/side.js", "app/lib/b.js",
                                            "app/gone.js"]
