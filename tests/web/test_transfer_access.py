"""Who may export and import what: scopes, roles and projects.

Exports take the ``read`` scope and see only the requester's readable projects (another
project's run or session is a 404, as an unknown id); an import takes the ``run`` scope
and the operator role in its target project.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import AsyncClient

from picoflow_web.models import Run
from tests.golden.goldens import BY_NAME
from tests.webhelpers import amake_user, amember, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

NDJSON = "application/x-ndjson"
FILE = BY_NAME["ab_timing"].jsonl_path.read_bytes()
RUN, SESSION = "ab_timing-1", "golden-ab_timing"


async def post(auth: dict[str, str], query: str = "", body: bytes = FILE) -> Any:
    return await AsyncClient().post(f"/api/import{query}", data=body, content_type=NDJSON,
                                    headers=auth)


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert (body["type"], body["code"]) == ("error", code), body


async def test_another_projects_run_and_session_are_not_found() -> None:
    alice = await amake_user("alice", project="research")
    bob = await amake_user("bob")
    imported = await post(bearer(await atoken(alice, project="research")))
    assert imported.status_code == 201, imported.content
    assert (await Run.objects.aget(id=RUN)).project_id == "research"

    client, theirs = AsyncClient(), bearer(await atoken(bob))
    for path in (f"/api/runs/{RUN}/export", f"/api/sessions/{SESSION}/export",
                 "/api/runs/no-such-run/export", "/api/sessions/no-such/export"):
        assert_error(await client.get(path, headers=theirs), 404, "not_found")
    mine = bearer(await atoken(alice, "reader", ("read",), project="research"))
    ok = await client.get(f"/api/sessions/{SESSION}/export", headers=mine)
    assert ok.status_code == 200
    assert ok["Content-Disposition"] == f'attachment; filename="session-{SESSION}.jsonl"'
    # A token of alice's other project does not see research's runs either.
    await amember(alice, "default", "operator")
    elsewhere = bearer(await atoken(alice, "default-token", project="default"))
    assert_error(await client.get(f"/api/runs/{RUN}/export", headers=elsewhere), 404,
                 "not_found")


async def test_export_needs_the_read_scope_and_import_the_run_scope() -> None:
    alice = await amake_user()
    client = AsyncClient()
    assert_error(await client.get(f"/api/runs/{RUN}/export"), 401, "unauthenticated")
    assert_error(await post({}), 401, "unauthenticated")
    runner = bearer(await atoken(alice, "runner", ("run",)))
    assert_error(await client.get(f"/api/runs/{RUN}/export", headers=runner), 403, "scope")
    reader = bearer(await atoken(alice, "reader", ("read",)))
    assert_error(await post(reader), 403, "scope")
    assert_error(await client.get("/api/import", headers=runner), 405,
                 "method_not_allowed")
    assert not await Run.objects.aexists()


async def test_import_needs_an_operator_in_the_target_project() -> None:
    viewer = await amake_user("vera", role="viewer")
    assert_error(await post(bearer(await atoken(viewer))), 403, "role")
    alice = await amake_user("alice")
    auth = bearer(await atoken(alice))
    # A token acts in its own project only; a project the user has no role in is unknown.
    assert_error(await post(auth, "?project=research"), 404, "not_found")
    await amember(alice, "research", "operator")
    assert_error(await post(auth, "?project=research"), 404, "not_found")
    assert not await Run.objects.aexists()
    client = AsyncClient()
    await client.aforce_login(alice)  # a browser session acts in any of its projects
    done = await client.post("/api/import?project=research", data=FILE, content_type=NDJSON)
    assert done.status_code == 201, done.content
    assert done.json()["project"] == "research"
    assert {r.project_id async for r in Run.objects.all()} == {"research"}


async def test_the_export_commands_write_what_the_api_sends(tmp_path: Any) -> None:
    alice = await amake_user()
    auth = bearer(await atoken(alice))
    assert (await post(auth)).status_code == 201
    response = await AsyncClient().get(f"/api/runs/{RUN}/export", headers=auth)
    sent = b"".join([chunk async for chunk in response.streaming_content])
    out = StringIO()
    await sync_to_async(call_command)("export_run", RUN, stdout=out)
    assert out.getvalue().encode() == sent
    target = tmp_path / "run.jsonl"
    await sync_to_async(call_command)("export_run", RUN, "-o", str(target))
    assert target.read_bytes() == sent
    with pytest.raises(CommandError, match="No run 'nope'"):
        await sync_to_async(call_command)("export_run", "nope", stdout=StringIO())
    with pytest.raises(CommandError, match="No session 'nope'"):
        await sync_to_async(call_command)("export_session", "nope", stdout=StringIO())


async def test_imported_runs_and_sessions_have_pages_that_say_so() -> None:
    alice = await amake_user()
    assert (await post(bearer(await atoken(alice)))).status_code == 201
    client = AsyncClient()
    await client.aforce_login(alice)
    page = await client.get(f"/runs/{RUN}/")
    assert page.status_code == 200
    assert "Read from an exported file" in page.content.decode()
    assert (await client.get(f"/sessions/{SESSION}/")).status_code == 200
    listed = await client.get("/api/runs")
    assert {r["origin"]["label"] for r in listed.json()["runs"]} == {"imported"}
