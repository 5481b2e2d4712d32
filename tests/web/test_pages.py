"""Pages through Django's test client: login required, then rendered."""

import pytest
from django.contrib.auth import get_user_model
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
