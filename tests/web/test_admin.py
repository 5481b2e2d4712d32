"""The admin: projects, memberships and tokens managed (tokens revoked there); runs,
sessions and events read-only; staff project admins see only their projects."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from picoflow_web.models import ApiToken, EventRecord, Membership, Project, Run, StoredSession

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(client: Client, django_user_model: Any) -> Client:
    boss = django_user_model.objects.create_superuser("boss", password="pw-for-tests-1")
    client.force_login(boss)
    return client


@pytest.fixture
def rows(django_user_model: Any) -> dict[str, Any]:
    project = Project.objects.create(name="p")
    user = django_user_model.objects.create_user("ula", password="x")
    Membership.objects.create(project=project, user=user, role="operator")
    run = Run.objects.create(id="run-1", flow="HotelFlow", project=project,
                             session_id="s-1")
    EventRecord.objects.create(run=run, seq=0, type="turn.started", payload={"x": 1})
    StoredSession.objects.create(id="s-1", flow="HotelFlow", revision=0, run_status="x",
                                 doc={}, project=project)
    token, _ = ApiToken.issue(user, "t", project=project)
    return {"project": project, "user": user, "run": run, "token": token}


def test_every_model_is_listed(admin_client_: Client, rows: Any) -> None:
    for model in ("project", "membership", "apitoken", "run", "storedsession",
                  "eventrecord"):
        response = admin_client_.get(f"/admin/picoflow_web/{model}/")
        assert response.status_code == 200, model


def test_runs_sessions_and_events_are_read_only(admin_client_: Client, rows: Any) -> None:
    page = admin_client_.get("/admin/picoflow_web/run/run-1/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert admin_client_.get("/admin/picoflow_web/run/add/").status_code == 403
    posted = admin_client_.post("/admin/picoflow_web/run/run-1/change/", {"flow": "Other"})
    assert posted.status_code == 403
    assert Run.objects.get(id="run-1").flow == "HotelFlow"
    assert admin_client_.post("/admin/picoflow_web/storedsession/s-1/delete/",
                              {"post": "yes"}).status_code == 403
    assert StoredSession.objects.filter(id="s-1").exists()


def test_tokens_are_revoked_in_the_admin(admin_client_: Client, rows: Any) -> None:
    token = rows["token"]
    response = admin_client_.post("/admin/picoflow_web/apitoken/", {
        "action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    listing = admin_client_.get("/admin/picoflow_web/apitoken/").content.decode()
    assert token.digest not in listing


def test_a_staff_project_admin_sees_only_their_projects(client: Client, rows: Any,
                                                        django_user_model: Any) -> None:
    from django.contrib.auth.models import Permission

    Project.objects.create(name="q")
    staff = django_user_model.objects.create_user("sam", password="x", is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(
        content_type__app_label="picoflow_web", codename__startswith="view_"))
    Membership.objects.create(project_id="q", user=staff, role="admin")
    client.force_login(staff)
    listing = client.get("/admin/picoflow_web/project/").content.decode()
    assert "/admin/picoflow_web/project/q/" in listing
    assert "/admin/picoflow_web/project/p/" not in listing
    assert "run-1" not in client.get("/admin/picoflow_web/run/").content.decode()
