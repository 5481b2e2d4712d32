"""The run page's Stop control and ended panel, as the server renders them: the control
shows for a run that may still stop, and the page's script takes over from there."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from picoflow_web.models import Membership, Project, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def user_client(client: Client) -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-for-tests-1")
    project, _ = Project.objects.get_or_create(name="default")
    Membership.objects.create(project=project, user=user, role="operator")
    client.force_login(user)
    return client


def stop_box(body: str) -> str:
    match = re.search(r'<div class="pf-stop" id="pf-stop-box"[^>]*>', body)
    assert match, "no #pf-stop-box"
    return match.group(0)


@pytest.mark.parametrize(("status", "shown"), [
    ("queued", True), ("running", True),
    ("finished", False), ("failed", False), ("interrupted", False), ("cancelled", False),
])
def test_the_stop_control_renders_only_for_a_run_that_may_still_stop(
        user_client: Client, status: str, shown: bool) -> None:
    Run.objects.create(id=f"run-{status}", flow="CancelFlow", message="watch", status=status)
    body = user_client.get(f"/runs/run-{status}/").content.decode()
    assert ("hidden" not in stop_box(body)) is shown
    assert 'id="pf-stop"' in body and 'id="pf-stop-note"' in body and 'id="pf-stop-error"' in body
    assert re.search(r'<section class="pf-ended" id="pf-ended"[^>]*hidden', body)
    assert f'id="pf-run-status" class="pf-badge pf-badge-{status}"' in body
