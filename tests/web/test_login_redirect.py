"""Logging in at ``/login/`` with no ``next`` lands on the runs list, in the standalone site
and in a project of one's own that leaves ``LOGIN_REDIRECT_URL`` at Django's default
(``/accounts/profile/``, which nothing serves); a project's own setting is honoured."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import global_settings
from django.test import Client, override_settings

from tests.webhelpers import PASSWORD

pytestmark = pytest.mark.django_db


def login(django_user_model: Any, **query: str) -> Any:
    django_user_model.objects.create_user("alice", password=PASSWORD)
    client = Client()
    client.get("/login/")
    path = "/login/" + (f"?next={query['next']}" if "next" in query else "")
    return client.post(path, {"username": "alice", "password": PASSWORD})


def test_a_direct_login_lands_on_the_runs_list(django_user_model: Any) -> None:
    answer = login(django_user_model)
    assert answer.status_code == 302 and answer.url == "/"


@override_settings(LOGIN_REDIRECT_URL=global_settings.LOGIN_REDIRECT_URL)
def test_a_project_without_login_redirect_url_lands_on_the_runs_list_too(
        django_user_model: Any) -> None:
    answer = login(django_user_model)
    assert answer.status_code == 302 and answer.url == "/"


@override_settings(LOGIN_REDIRECT_URL="/admin/")
def test_a_projects_own_login_redirect_url_and_next_are_honoured(
        django_user_model: Any) -> None:
    assert login(django_user_model).url == "/admin/"


def test_next_is_honoured(django_user_model: Any) -> None:
    assert login(django_user_model, next="/tokens/").url == "/tokens/"
