"""Projects and roles: a user sees and does only what their role in a project allows.

Two projects, P and Q, each with runs and a session; members of P must find nothing of
Q's through pages, the API, the runs-list websocket and a run websocket (another project's
ids answer 404, as unknown ones do), and cannot continue, end or stop what is Q's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.management import call_command
from django.test import AsyncClient

from picoflow_web.asgi import application
from picoflow_web.execute import services
from picoflow_web.live.consumers import CLOSE_NOT_FOUND
from picoflow_web.models import Membership, Project, Run, StoredSession
from tests.webhelpers import (
    amake_user,
    amember,
    asession_cookie,
    atoken,
    bearer,
    wait_run_done,
    ws_headers,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]


async def post_json(client: AsyncClient, path: str, body: Any, **headers: str) -> Any:
    return await client.post(path, data=json.dumps(body), content_type="application/json",
                             headers=headers)


async def turn_in(project: str, message: str = "Hi") -> Run:
    """A finished HotelFlow turn of ``project`` (with its session)."""
    run = await services.run_start(flow="HotelFlow", message=message, project=project)
    return await wait_run_done(run.id)


@pytest.fixture
async def two_projects() -> dict[str, Any]:
    for name in ("p", "q"):
        await Project.objects.aget_or_create(name=name)
    p_run, q_run = await turn_in("p"), await turn_in("q")
    pam = await amake_user("pam", project="p", role="operator")
    quinn = await amake_user("quinn", project="q", role="operator")
    return {"p_run": p_run, "q_run": q_run, "pam": pam, "quinn": quinn}


async def test_runs_and_sessions_are_stored_in_their_project(two_projects: Any) -> None:
    q_run = two_projects["q_run"]
    assert q_run.project_id == "q" and q_run.session_id
    session = await StoredSession.objects.aget(id=q_run.session_id)
    assert session.project_id == "q"


async def test_a_member_of_p_sees_nothing_of_q_through_the_api(two_projects: Any) -> None:
    p_run, q_run = two_projects["p_run"], two_projects["q_run"]
    auth = bearer(await atoken(two_projects["pam"], project="p"))
    client = AsyncClient()
    listed = (await client.get("/api/runs", headers=auth)).json()["runs"]
    assert [r["id"] for r in listed] == [p_run.id]
    assert listed[0]["project"] == "p"
    for path in (f"/api/runs/{q_run.id}", f"/api/runs/{q_run.id}/events",
                 f"/api/sessions/{q_run.session_id}"):
        response = await client.get(path, headers=auth)
        assert response.status_code == 404, (path, response.content)
        assert response.json()["error_code"] == "not_found"
    assert (await client.get(f"/api/runs/{p_run.id}", headers=auth)).status_code == 200
    assert (await client.get(f"/api/runs?session={q_run.session_id}",
                             headers=auth)).json()["runs"] == []


async def test_a_browser_session_sees_only_its_projects_pages(two_projects: Any) -> None:
    p_run, q_run = two_projects["p_run"], two_projects["q_run"]
    client = AsyncClient()
    await client.aforce_login(two_projects["pam"])
    assert (await client.get(f"/runs/{p_run.id}/")).status_code == 200
    assert (await client.get(f"/sessions/{p_run.session_id}/")).status_code == 200
    assert (await client.get(f"/runs/{q_run.id}/")).status_code == 404
    assert (await client.get(f"/sessions/{q_run.session_id}/")).status_code == 404
    index = (await client.get("/")).content.decode()
    assert p_run.session_id in index and q_run.session_id not in index
    listed = (await client.get("/api/runs")).json()["runs"]
    assert {r["id"] for r in listed} == {p_run.id}


async def test_a_superuser_sees_every_project(two_projects: Any) -> None:
    boss = await amake_user("boss", project=None, is_superuser=True, is_staff=True)
    client = AsyncClient()
    await client.aforce_login(boss)
    listed = {r["id"] for r in (await client.get("/api/runs")).json()["runs"]}
    assert listed == {two_projects["p_run"].id, two_projects["q_run"].id}
    assert (await client.get(f"/runs/{two_projects['q_run'].id}/")).status_code == 200


def ws(path: str, cookie: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=ws_headers(cookie))


async def test_a_run_socket_of_another_project_closes_as_unknown(two_projects: Any) -> None:
    cookie = await asession_cookie(two_projects["pam"])
    theirs = ws(f"/ws/runs/{two_projects['q_run'].id}/", cookie)
    assert await theirs.connect(timeout=5) == (True, None)
    assert await theirs.receive_output(timeout=5) == {"type": "websocket.close",
                                                       "code": CLOSE_NOT_FOUND}
    mine = ws(f"/ws/runs/{two_projects['p_run'].id}/", cookie)
    assert (await mine.connect(timeout=5))[0]
    assert (await mine.receive_json_from(timeout=5))["run"]["id"] == two_projects["p_run"].id
    await mine.disconnect()


async def test_the_runs_list_socket_carries_only_the_users_projects(two_projects: Any) -> None:
    cookie = await asession_cookie(two_projects["pam"])
    runs_socket = ws("/ws/runs/", cookie)
    assert (await runs_socket.connect(timeout=5))[0]
    try:
        q_run = await turn_in("q")
        p_run = await turn_in("p")
        seen = set()
        while True:
            message = await runs_socket.receive_json_from(timeout=5)
            seen.add((message["run"]["id"], message["run"]["project"]))
            if message["run"]["id"] == p_run.id and message["run"]["status"] == "finished":
                break
        assert {project for _, project in seen} == {"p"}
        assert q_run.id not in {run_id for run_id, _ in seen}
    finally:
        await runs_socket.disconnect()


async def test_a_viewer_cannot_start_a_run(two_projects: Any) -> None:
    viewer = await amake_user("vic", project="p", role="viewer")
    client = AsyncClient()
    for auth in (bearer(await atoken(viewer, project="p")),):
        for path, body in (("/api/runs", {"flow": "HotelFlow", "message": "Hi"}),
                           ("/ai/run", {"flowName": "HotelFlow", "message": "Hi"})):
            response = await post_json(client, path, body, **auth)
            assert response.status_code == 403, response.content
            assert response.json()["error_code"] == "role"
    # In the browser too; reading is allowed.
    await client.aforce_login(viewer)
    assert (await client.get("/api/runs")).status_code == 200
    csrf = await client.get("/")
    assert csrf.status_code == 200
    response = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi"},
                               **{"X-CSRFToken": client.cookies["csrftoken"].value})
    assert response.status_code == 403 and response.json()["error_code"] == "role"
    assert await Run.objects.filter(started_by=viewer).acount() == 0


async def test_a_viewer_cannot_stop_runs_or_end_sessions(two_projects: Any) -> None:
    viewer = await amake_user("vic", project="p", role="viewer")
    auth = bearer(await atoken(viewer, project="p"))
    run = await services.run_start(flow="HotelFlow", message="Hi", project="p")
    client = AsyncClient()
    stopped = await client.post(f"/api/runs/{run.id}/cancel", headers=auth)
    assert stopped.status_code == 403, stopped.content
    done = await wait_run_done(run.id)
    assert done.status == Run.Status.FINISHED
    ended = await client.post("/ai/end", headers={"Chat-Session-Id": done.session_id, **auth})
    assert ended.status_code == 403
    assert await StoredSession.objects.filter(id=done.session_id).aexists()


async def test_another_projects_session_cannot_be_continued_or_ended(two_projects: Any) -> None:
    q_run = two_projects["q_run"]
    before = await StoredSession.objects.aget(id=q_run.session_id)
    client = AsyncClient()
    # As a member of p, by token and by browser session: the session does not exist.
    auth = bearer(await atoken(two_projects["pam"], project="p"))
    for headers in (auth, {**auth, "Chat-Session-Id": q_run.session_id}):
        body = {"flowName": "HotelFlow", "message": "yes"}
        if "Chat-Session-Id" not in headers:
            body["session"] = q_run.session_id
        response = await post_json(client, "/ai/run", body, **headers)
        assert response.status_code == 404, response.content
    response = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "yes",
                                                     "session_id": q_run.session_id}, **auth)
    assert response.status_code == 404
    ended = await client.post("/ai/end", headers={"Chat-Session-Id": q_run.session_id, **auth})
    assert ended.status_code == 404
    after = await StoredSession.objects.aget(id=q_run.session_id)
    assert (after.revision, after.doc) == (before.revision, before.doc)
    assert await Run.objects.filter(session_id=q_run.session_id).acount() == 1
    # Its own member continues it.
    quinn = bearer(await atoken(two_projects["quinn"], project="q"))
    response = await post_json(client, "/ai/run", {"flowName": "HotelFlow", "message": "yes",
                                                   "session": q_run.session_id}, **quinn)
    assert response.status_code == 200, response.content


async def test_another_projects_run_cannot_be_stopped(two_projects: Any) -> None:
    run = await services.run_start(flow="HotelFlow", message="Hi", project="q")
    auth = bearer(await atoken(two_projects["pam"], project="p"))
    response = await AsyncClient().post(f"/api/runs/{run.id}/cancel", headers=auth)
    assert response.status_code == 404
    assert (await wait_run_done(run.id)).status == Run.Status.FINISHED


async def test_a_token_acts_only_in_its_project(two_projects: Any) -> None:
    both = await amake_user("bo", project="p", role="operator")
    await amember(both, "q", "operator")
    auth = bearer(await atoken(both, project="p"))
    client = AsyncClient()
    listed = (await client.get("/api/runs", headers=auth)).json()["runs"]
    assert {r["project"] for r in listed} == {"p"}
    response = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi",
                                                     "project": "q"}, **auth)
    assert response.status_code == 404, response.content
    made = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi"}, **auth)
    assert made.status_code == 201 and made.json()["run"]["project"] == "p"
    await wait_run_done(made.json()["run"]["id"])


async def test_a_multi_project_user_picks_the_project_or_gets_default_first() -> None:
    for name in ("alpha", "beta"):
        await Project.objects.aget_or_create(name=name)
    user = await amake_user("multi", project="beta", role="operator")
    await amember(user, "alpha", "operator")
    client = AsyncClient()
    await client.aforce_login(user)
    await client.get("/")
    csrf = {"X-CSRFToken": client.cookies["csrftoken"].value}
    made = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi"}, **csrf)
    assert made.json()["run"]["project"] == "alpha"  # no default membership: first by name
    await wait_run_done(made.json()["run"]["id"])
    made = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi",
                                                 "project": "beta"}, **csrf)
    assert made.json()["run"]["project"] == "beta"
    await wait_run_done(made.json()["run"]["id"])
    index = (await client.get("/")).content.decode()
    assert 'name="project"' in index  # the start form offers the choice
    unknown = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi",
                                                    "project": "gamma"}, **csrf)
    assert unknown.status_code == 404


async def test_a_user_without_a_project_can_start_nothing() -> None:
    loner = await amake_user("loner", project=None)
    client = AsyncClient()
    await client.aforce_login(loner)
    await client.get("/")
    response = await post_json(client, "/api/runs", {"flow": "HotelFlow", "message": "Hi"},
                               **{"X-CSRFToken": client.cookies["csrftoken"].value})
    assert response.status_code == 403
    assert (await client.get("/api/runs")).json()["runs"] == []


def test_picoflow_project_command_creates_projects_and_members(
        django_user_model: Any, capsys: pytest.CaptureFixture[str]) -> None:
    user = django_user_model.objects.create_user("cmd-user", password="x")
    call_command("picoflow_project", "create", "research")
    call_command("picoflow_project", "add-member", "research", "cmd-user", "--role", "admin")
    assert Membership.objects.get(project_id="research", user=user).role == "admin"
    call_command("picoflow_project", "add-member", "research", "cmd-user", "--role", "viewer")
    assert Membership.objects.get(project_id="research", user=user).role == "viewer"
    from django.core.management.base import CommandError
    with pytest.raises(CommandError):
        call_command("picoflow_project", "create", "Not A Slug")
    with pytest.raises(CommandError):
        call_command("picoflow_project", "add-member", "nope", "cmd-user")


def test_ensure_admin_makes_the_default_project_with_the_first_user_its_admin(
        django_user_model: Any, capsys: pytest.CaptureFixture[str]) -> None:
    Project.objects.all().delete()
    call_command("ensure_admin")
    admin = django_user_model.objects.get(username="admin")
    assert Membership.objects.get(project_id="default", user=admin).role == "admin"


async def test_existing_rows_went_to_the_default_project_by_default() -> None:
    run = await Run.objects.acreate(id="legacy", flow="HotelFlow")
    assert run.project_id == "default"
    assert await sync_to_async(Project.objects.filter(name="default").exists)()


def test_the_migration_puts_existing_rows_and_users_into_the_default_project() -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = ("picoflow_web", "0003_worker_runs"), ("picoflow_web",
                                                          "0004_projects_roles_tokens")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("picoflow_web")
    executor.migrate([before])
    try:
        old = executor.loader.project_state([before]).apps
        users = old.get_model("auth", "User")
        users.objects.create(username="old-admin", is_superuser=True, is_staff=True)
        users.objects.create(username="old-user")
        old.get_model("picoflow_web", "Run").objects.create(id="old-run", flow="HotelFlow")
        old.get_model("picoflow_web", "StoredSession").objects.create(
            id="old-session", flow="HotelFlow", revision=0, run_status="completed", doc={})
        executor = MigrationExecutor(connection)
        executor.migrate([after])
        new = executor.loader.project_state([after]).apps
        assert new.get_model("picoflow_web", "Run").objects.get(id="old-run").project_id \
            == "default"
        assert new.get_model("picoflow_web", "StoredSession").objects.get(
            id="old-session").project_id == "default"
        roles = dict(new.get_model("picoflow_web", "Membership").objects.values_list(
            "user__username", "role"))
        assert roles == {"old-admin": "admin", "old-user": "operator"}
    finally:
        MigrationExecutor(connection).migrate(latest)
