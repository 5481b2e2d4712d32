"""``serve`` gives its workers what coordinators need to call the dashboard itself: the
server's URL, and a run-scoped token (a fresh one per start, the last one revoked)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from picoflow_web.management.commands.serve import SELF_TOKEN_NAME, self_call_env
from picoflow_web.models import ApiToken

pytestmark = pytest.mark.django_db

RELAY = {"PICOFLOW_RELAY_URL": "http://127.0.0.1:8000"}


def _token(raw: str) -> ApiToken:
    return ApiToken.objects.select_related("user").get(digest=ApiToken.hash(raw))


def test_a_start_issues_a_run_scoped_token_and_revokes_the_last_one() -> None:
    admin = get_user_model().objects.create_superuser("root", password="pw-for-tests-1")
    first = self_call_env(dict(RELAY))
    assert first["PICOFLOW_SELF_URL"] == "http://127.0.0.1:8000"
    token = _token(first["PICOFLOW_SELF_TOKEN"])
    assert token.user == admin and token.name == SELF_TOKEN_NAME
    assert token.scope_set() == {"run"} and token.refusal() is None
    second = self_call_env(dict(RELAY))
    assert second["PICOFLOW_SELF_TOKEN"] != first["PICOFLOW_SELF_TOKEN"]
    assert _token(first["PICOFLOW_SELF_TOKEN"]).refusal() == "revoked"
    assert _token(second["PICOFLOW_SELF_TOKEN"]).refusal() is None


def test_what_the_environment_sets_is_kept_and_no_superuser_means_no_token() -> None:
    assert self_call_env({**RELAY, "PICOFLOW_SELF_URL": "http://lb:80",
                          "PICOFLOW_SELF_TOKEN": "pf_mine"}) == {}
    assert self_call_env(dict(RELAY)) == {"PICOFLOW_SELF_URL": "http://127.0.0.1:8000"}
    assert not ApiToken.objects.exists()
