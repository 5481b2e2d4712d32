"""Login throttling (django-axes), the Content-Security-Policy (django-csp), and pages
without inline script."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from picoflow_web.models import Membership, Project, Run, StoredSession
from tests.webhelpers import PASSWORD

pytestmark = pytest.mark.django_db


def login(client: Client, username: str, password: str) -> Any:
    client.get("/login/")
    return client.post("/login/", {"username": username, "password": password},
                       REMOTE_ADDR="10.0.0.7")


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("alice", password=PASSWORD)
    Membership.objects.create(project=Project.objects.get_or_create(name="default")[0],
                              user=user, role="operator")
    return user


def test_repeated_failed_logins_lock_the_name_out(alice: Any, settings: Any,
                                                  django_user_model: Any) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(client, "alice", "wrong").status_code == 200  # the form again
    locked = login(client, "alice", "wrong")
    assert locked.status_code == 429
    # Locked: even the right password does not log in now.
    right = login(Client(), "alice", PASSWORD)
    assert right.status_code == 429 and "_auth_user_id" not in right.client.session
    # Another name from the same address is not locked out.
    django_user_model.objects.create_user("bob", password=PASSWORD)
    assert login(Client(), "bob", PASSWORD).status_code == 302


def test_a_good_login_resets_the_count(alice: Any, settings: Any) -> None:
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        login(client, "alice", "wrong")
    assert login(client, "alice", PASSWORD).status_code == 302
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(Client(), "alice", "wrong").status_code == 200


def _policy(response: Any) -> dict[str, str]:
    header = response["Content-Security-Policy"]
    return {part.split()[0]: part.strip() for part in header.split(";") if part.strip()}


@pytest.mark.parametrize("path", ["/login/", "/", "run", "session"])
def test_pages_carry_a_strict_policy_and_no_inline_script(path: str, alice: Any,
                                                          client: Client) -> None:
    client.force_login(alice)
    if path in ("run", "session"):
        Run.objects.create(id="r-1", flow="HotelFlow", session_id="s-1",
                           message="<script>alert(1)</script>")
        StoredSession.objects.create(id="s-1", flow="HotelFlow", revision=0,
                                     run_status="running", doc={"flow": {"steps": []}})
        path = "/runs/r-1/" if path == "run" else "/sessions/s-1/"
    response = client.get(path)
    assert response.status_code == 200
    policy = _policy(response)
    assert policy["script-src"] == "script-src 'self'"
    assert policy["default-src"] == "default-src 'self'"
    assert policy["object-src"] == "object-src 'none'"
    assert "unsafe-inline" not in response["Content-Security-Policy"]
    html = response.content.decode()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag, tag
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert not re.search(r"\sstyle\s*=", html), "inline style attribute"
