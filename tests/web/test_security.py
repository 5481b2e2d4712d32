"""Hostile strings from a real turn are escaped in server-rendered pages.

``manage.py check --deploy`` with production settings is covered by
``test_deploy_check.py``.
"""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from picoflow_web.models import Run, StoredSession
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
HOSTILE_MESSAGE = f"research {SCRIPT} and {IMG}"


async def hostile_turn() -> tuple[AsyncClient, str, str]:
    """A ResearchFlow turn over ``/ai/run`` whose topic, saved in state, is hostile.

    Returns a logged-in browser client, the session id and the run id.
    """
    user = await amake_user()
    answer = await AsyncClient().post(
        "/ai/run", data=json.dumps({"flowName": "ResearchFlow", "message": HOSTILE_MESSAGE}),
        content_type="application/json", headers=bearer(await atoken(user)))
    assert answer.status_code == 200, answer.content
    session_id = answer.json()["session"]
    # The strings really are in the stored state (else the test below proves nothing).
    doc = (await StoredSession.objects.aget(id=session_id)).doc
    states = json.dumps([step.get("state") for step in doc["flow"]["steps"]],
                        ensure_ascii=False)
    assert SCRIPT in states and IMG in states
    run = await Run.objects.aget(session_id=session_id)
    browser = AsyncClient()
    await browser.aforce_login(user)
    return browser, session_id, run.id


def assert_escaped(html: str) -> None:
    assert "<script>alert(1)" not in html
    assert "<img src=x" not in html
    assert "onerror=alert(1)>" not in html
    # Present, escaped, where the page shows it as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


async def test_session_page_escapes_hostile_state() -> None:
    browser, session_id, _ = await hostile_turn()
    response = await browser.get(f"/sessions/{session_id}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert_escaped(html)
    # The state section itself shows the topic, escaped.
    assert '"topic": "&lt;script&gt;alert(1)&lt;/script&gt; and &lt;img' in html.replace(
        "&quot;", '"')


@pytest.mark.parametrize("page", ["run", "index"])
async def test_run_page_and_runs_list_escape_the_hostile_message(page: str) -> None:
    browser, _, run_id = await hostile_turn()
    response = await browser.get(f"/runs/{run_id}/" if page == "run" else "/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script>alert(1)" not in html
    assert "<img src=x" not in html
    if page == "run":  # the run page shows the turn's message
        assert_escaped(html)


async def test_pages_and_api_send_hardening_headers() -> None:
    browser, session_id, _ = await hostile_turn()
    for path in (f"/sessions/{session_id}/", "/api/runs"):
        response = await browser.get(path)
        assert response.status_code == 200
        assert response["X-Frame-Options"] == "DENY"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert response["Referrer-Policy"] == "same-origin"
    api = await browser.get("/api/runs")
    assert api["Content-Type"] == "application/json"
