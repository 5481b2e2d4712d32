"""API tokens: scoped, bound to a user and a project, hashed, expiring, revocable; refused
at once when revoked, expired, or when their user is deactivated or changes password."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import AsyncClient
from django.utils import timezone

from picoflow_web.models import ApiToken, Membership, Project, Run
from runtime import FlowEngine
from runtime.events import MemorySink, dump_event
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

NDJSON = "application/x-ndjson"


async def status_of(raw: str, path: str = "/api/runs") -> int:
    return (await AsyncClient().get(path, headers=bearer(raw))).status_code


async def test_a_token_is_stored_hashed_and_works() -> None:
    user = await amake_user()
    raw = await atoken(user)
    token = await ApiToken.objects.aget(user=user)
    assert raw not in (token.digest, token.name) and token.digest == ApiToken.hash(raw)
    assert token.project_id == "default"
    assert await status_of(raw) == 200


async def test_a_revoked_token_is_refused_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    raw = await atoken(await amake_user())
    assert await status_of(raw) == 200
    token = await ApiToken.objects.aget(digest=ApiToken.hash(raw))
    await sync_to_async(call_command)("api_tokens", "revoke", str(token.pk))
    response = await AsyncClient().get("/api/runs", headers=bearer(raw))
    assert response.status_code == 401
    assert response.json()["error_code"] == "unauthenticated"


async def test_an_expired_token_is_refused() -> None:
    user = await amake_user()
    raw = await atoken(user, expires_at=timezone.now() + timedelta(hours=1))
    assert await status_of(raw) == 200
    await ApiToken.objects.filter(user=user).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1))
    assert await status_of(raw) == 401


async def test_a_password_change_revokes_the_users_tokens() -> None:
    user = await amake_user()
    raw = await atoken(user)
    assert await status_of(raw) == 200
    user.set_password("another-long-password-5512")
    await user.asave()
    assert await status_of(raw) == 401
    token = await ApiToken.objects.aget(user=user)
    assert (token.revoked_at is not None, token.revoked_reason) == (True, "password_changed")


async def test_a_password_changed_without_signals_still_stops_the_token() -> None:
    user = await amake_user()
    raw = await atoken(user)
    await get_user_model().objects.filter(pk=user.pk).aupdate(password="md5$x$y")
    assert await status_of(raw) == 401


async def test_deactivating_the_user_revokes_their_tokens() -> None:
    user = await amake_user()
    raw = await atoken(user)
    user.is_active = False
    await user.asave()
    assert await status_of(raw) == 401
    user.is_active = True
    await user.asave()
    assert await status_of(raw) == 401, "reactivation must not bring old tokens back"


async def test_a_token_never_acts_beyond_the_users_role() -> None:
    viewer = await amake_user("vic", role="viewer")
    raw = await atoken(viewer, scopes=("read", "run"))
    response = await AsyncClient().post("/api/runs", data={"flow": "HotelFlow"},
                                        content_type="application/json", headers=bearer(raw))
    assert response.status_code == 403
    await Membership.objects.filter(user=viewer).adelete()
    assert (await AsyncClient().get("/api/runs", headers=bearer(raw))).json()["runs"] == []


def test_create_api_token_with_project_and_comma_scopes(
        capsys: pytest.CaptureFixture[str]) -> None:
    user = get_user_model().objects.create_user("cli", password="x")
    Project.objects.create(name="research")
    call_command("create_api_token", "cli", "--project", "research", "--scope",
                 "read,run,ingest", "--expires-in", "2")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    token = ApiToken.objects.get(digest=ApiToken.hash(raw))
    assert (token.user, token.project_id) == (user, "research")
    assert token.scope_set() == {"read", "run", "ingest"}
    assert token.expires_at is not None and token.expires_at > timezone.now()
    # The older spelling keeps working: a name, repeated --scope, the default project.
    call_command("create_api_token", "cli", "legacy", "--scope", "read", "--scope", "run")
    raw = capsys.readouterr().out.strip().splitlines()[-1]
    legacy = ApiToken.objects.get(digest=ApiToken.hash(raw))
    assert (legacy.name, legacy.project_id, legacy.scopes) == ("legacy", "default", "read,run")
    with pytest.raises(CommandError):
        call_command("create_api_token", "cli", "--scope", "read,admin")
    with pytest.raises(CommandError):
        call_command("create_api_token", "cli", "--project", "nope")


def test_api_tokens_lists_without_values_and_revokes(capsys: pytest.CaptureFixture[str]) -> None:
    user = get_user_model().objects.create_user("lister", password="x")
    _, raw = ApiToken.issue(user, "first")
    second, _ = ApiToken.issue(user, "second", ("read",))
    capsys.readouterr()
    call_command("api_tokens", "list")
    listing = capsys.readouterr().out
    assert "first" in listing and "second" in listing and raw not in listing
    assert listing.count("active") == 2
    call_command("api_tokens", "revoke", str(second.pk))
    capsys.readouterr()
    call_command("api_tokens", "list", "--user", "lister")
    listing = capsys.readouterr().out
    assert listing.count("active") == 1 and "revoked" in listing
    with pytest.raises(CommandError):
        call_command("api_tokens", "revoke", "999999")


async def _turn_lines(run_id: str) -> str:
    from tests.web.test_ingest import TeamSurvey

    sink = MemorySink()
    reply = await FlowEngine(flows=[TeamSurvey], sinks=[sink]).run(
        "TeamSurvey", "survey", config={"teams": 2}, run_id=run_id)
    assert reply.success
    return "".join(dump_event(e) + "\n" for e in sink.events)


async def _ingest(raw: str, body: str) -> Any:
    return await AsyncClient().post("/api/ingest", data=body.encode(), content_type=NDJSON,
                                    headers=bearer(raw))


async def test_an_ingest_token_for_p_cannot_write_into_q() -> None:
    for name in ("p", "q"):
        await Project.objects.acreate(name=name)
    p_token = await atoken(await amake_user("pat", project="p"), scopes=("ingest",),
                           project="p")
    q_token = await atoken(await amake_user("quin", project="q"), scopes=("ingest",),
                           project="q")
    q_body = await _turn_lines("q-run")
    lines = q_body.splitlines(keepends=True)
    first = await _ingest(q_token, "".join(lines[:3]))
    assert first.status_code == 200, first.content
    assert (await Run.objects.aget(id="q-run")).project_id == "q"
    # p's token continues q's run: refused as a run p does not have, nothing stored.
    refused = await _ingest(p_token, "".join(lines[3:]))
    assert refused.status_code == 409, refused.content
    assert (refused.json()["error_code"], refused.json()["expected_seq"]) == ("seq_gap", 0)
    assert (await Run.objects.aget(id="q-run")).last_seq == 2
    beat = await AsyncClient().post("/api/ingest/heartbeat", data={"runs": ["q-run"]},
                                    content_type="application/json", headers=bearer(p_token))
    assert beat.json() == {"runs": {}}
    # p's own runs go to p.
    own = await _ingest(p_token, await _turn_lines("p-run"))
    assert own.status_code == 200 and (await Run.objects.aget(id="p-run")).project_id == "p"


async def test_an_ingest_token_of_a_viewer_is_refused() -> None:
    raw = await atoken(await amake_user("vi", role="viewer"), scopes=("ingest",))
    response = await _ingest(raw, await _turn_lines("v-run"))
    assert response.status_code == 403
    assert not await Run.objects.filter(id="v-run").aexists()
