"""The API tokens page: a project's admin creates a token (its value shown in that answer
only), lists the project's tokens (name, scopes, last used, expiry) and revokes them; the
revoked token is refused by the API at once; members with a lesser role get a forbidden
page, others a 404; the navigation offers the page to admins only; forms need CSRF."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import AsyncClient

from picoflow_web.models import ApiToken
from tests.webhelpers import amake_user, amember, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

RAW = re.compile(r'id="pf-token-raw">(pf_[\w-]+)<')


async def logged_in(user: Any, **kwargs: Any) -> AsyncClient:
    client = AsyncClient(**kwargs)
    await client.aforce_login(user)
    return client


def row_of(page: str, token_id: int) -> str:
    """The table row of token ``token_id`` on the page."""
    found = re.search(rf'<tr data-token-id="{token_id}".*?</tr>', page, re.S)
    assert found is not None, f"no row of token {token_id}"
    return found.group(0)


async def create(client: AsyncClient, project: str = "default", **fields: Any) -> Any:
    data = {"name": "laptop", "scopes": ["read", "run"]} | fields
    return await client.post(f"/projects/{project}/tokens/", data)


async def test_create_shows_the_raw_token_once_and_stores_only_its_hash() -> None:
    admin = await amake_user("ada", role="admin")
    client = await logged_in(admin)
    made = await create(client, name="laptop", scopes=["read"], expires_in="30")
    assert made.status_code == 200
    assert "no-store" in made["Cache-Control"]
    page = made.content.decode()
    raw = RAW.search(page).group(1)  # type: ignore[union-attr]
    token = await ApiToken.objects.aget(digest=ApiToken.hash(raw))
    assert (token.name, token.scopes, token.project_id, token.user_id) == (
        "laptop", "read", "default", admin.pk)
    assert token.expires_at is not None
    assert raw not in (token.name, token.digest, token.scopes, token.user_stamp)
    again = (await client.get("/projects/default/tokens/")).content.decode()
    assert raw not in again and "laptop" in again
    assert (await AsyncClient().get("/api/runs", headers=bearer(raw))).status_code == 200


async def test_the_list_shows_name_scopes_last_used_and_expiry() -> None:
    admin = await amake_user("ada", role="admin")
    raw = await atoken(admin, "ci-bot", scopes=("read", "ingest"))
    await atoken(admin, "never-used")
    assert (await AsyncClient().get("/api/runs", headers=bearer(raw))).status_code == 200
    client = await logged_in(admin)
    page = (await client.get("/projects/default/tokens/")).content.decode()
    used = await ApiToken.objects.aget(name="ci-bot")
    row = row_of(page, used.pk)
    assert "ci-bot" in row and "read,ingest" in row and 'data-state="active"' in row
    assert used.last_used_at is not None
    assert used.last_used_at.strftime("%Y-%m-%d") in row
    assert re.search(r'pf-token-expires">never<', row)
    idle = await ApiToken.objects.aget(name="never-used")
    idle_row = row_of(page, idle.pk)
    assert re.search(r'pf-token-last-used">never<', idle_row)


async def test_revoke_on_the_page_and_the_api_refuses_the_token() -> None:
    admin = await amake_user("ada", role="admin")
    other = await amake_user("bob", role="operator")
    raw = await atoken(other, "bobs")  # an admin revokes any token of the project
    token = await ApiToken.objects.aget(name="bobs")
    client = await logged_in(admin)
    revoked = await client.post(f"/projects/default/tokens/{token.pk}/revoke")
    assert revoked.status_code == 303 and revoked["Location"] == "/projects/default/tokens/"
    await token.arefresh_from_db()
    assert token.revoked_at is not None and token.revoked_reason == "revoked"
    refused = await AsyncClient().get("/api/runs", headers=bearer(raw))
    assert refused.status_code == 401 and refused.json()["error_code"] == "unauthenticated"
    page = (await client.get("/projects/default/tokens/")).content.decode()
    assert f'data-token-id="{token.pk}" data-state="revoked"' in page
    assert f"/tokens/{token.pk}/revoke" not in page


async def test_a_non_admin_is_refused_and_an_outsider_sees_no_project() -> None:
    operator = await amake_user("otto", role="operator")
    raw = await atoken(operator, "mine")
    token = await ApiToken.objects.aget(name="mine")
    outsider = await amake_user("olga", project="elsewhere", role="admin")
    for user, status in ((operator, 403), (outsider, 404)):
        client = await logged_in(user)
        assert (await client.get("/projects/default/tokens/")).status_code == status
        assert (await create(client)).status_code == status
        revoke = await client.post(f"/projects/default/tokens/{token.pk}/revoke")
        assert revoke.status_code == status
    assert await ApiToken.objects.filter(project_id="default").acount() == 1
    await token.arefresh_from_db()
    assert token.revoked_at is None
    assert (await AsyncClient().get("/api/runs", headers=bearer(raw))).status_code == 200
    # The index: a forbidden page for who administers nothing.
    assert (await (await logged_in(operator)).get("/tokens/")).status_code == 403
    # Another project's token is not found through this project's page.
    other = await ApiToken.objects.acreate(user=outsider, project_id="elsewhere", name="x",
                                           digest="0" * 64)
    admin = await amake_user("ada", role="admin")
    assert (await (await logged_in(admin)).post(
        f"/projects/default/tokens/{other.pk}/revoke")).status_code == 404


async def test_anonymous_users_are_sent_to_log_in() -> None:
    for response in (await AsyncClient().get("/tokens/"),
                     await AsyncClient().get("/projects/default/tokens/")):
        assert response.status_code == 302 and response["Location"].startswith("/login/")


async def test_the_nav_links_the_page_for_admins_only_and_the_index_leads_there() -> None:
    admin = await amake_user("ada", role="admin")
    operator = await amake_user("otto", role="operator")
    admin_client = await logged_in(admin)
    assert 'href="/tokens/"' in (await admin_client.get("/")).content.decode()
    assert 'href="/tokens/"' not in (await (await logged_in(operator)).get("/")).content.decode()
    one = await admin_client.get("/tokens/")
    assert one.status_code == 302 and one["Location"] == "/projects/default/tokens/"
    await amember(admin, "research", "admin")
    choice = (await admin_client.get("/tokens/")).content.decode()
    assert 'href="/projects/default/tokens/"' in choice
    assert 'href="/projects/research/tokens/"' in choice


async def test_bad_input_is_shown_on_the_form_and_nothing_is_made() -> None:
    client = await logged_in(await amake_user("ada", role="admin"))
    for fields in ({"name": ""}, {"scopes": ["sudo"]}, {"scopes": []}, {"expires_in": "0"}):
        answer = await create(client, **fields)
        assert answer.status_code == 400, fields
        assert "pf-field-error" in answer.content.decode()
    assert await ApiToken.objects.acount() == 0


async def test_the_forms_need_the_csrf_token() -> None:
    admin = await amake_user("ada", role="admin")
    await atoken(admin, "kept")
    token = await ApiToken.objects.aget(name="kept")
    client = await logged_in(admin, enforce_csrf_checks=True)
    assert (await create(client)).status_code == 403
    assert (await client.post(f"/projects/default/tokens/{token.pk}/revoke")).status_code == 403
    await token.arefresh_from_db()
    assert token.revoked_at is None and await ApiToken.objects.acount() == 1
