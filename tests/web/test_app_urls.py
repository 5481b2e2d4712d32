"""The app's URLs without the admin (``picoflow_web.urls``, what a project includes) and
the standalone site's (``picoflow_web.config.site_urls``: the app and the admin)."""

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def user_client(client: Client) -> Client:
    client.force_login(get_user_model().objects.create_user("viewer", password="pw-tests-1"))
    return client


def test_the_standalone_site_links_its_admin(user_client: Client) -> None:
    body = user_client.get("/").content.decode()
    assert 'href="/admin/">Admin</a>' in body
    assert user_client.get("/admin/").status_code == 302  # not staff: to the admin login


def test_a_project_without_the_admin_renders_the_pages_without_its_link(
    user_client: Client, settings: Any,
) -> None:
    settings.ROOT_URLCONF = "picoflow_web.urls"
    response = user_client.get("/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="pf-start-form"' in body and "Admin</a>" not in body
    assert user_client.get("/admin/").status_code == 404
