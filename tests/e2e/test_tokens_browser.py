"""The API tokens page in a real browser (Debian's chromium), against a live dashboard:
the first user (admin of ``default``) follows the navigation to the page, creates a token
(its value shown once), an API client without a session uses it (200), the user revokes it
on the page and the same request is refused (401). Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from tests.e2e.browsing import dashboard, shot
from tests.livedaphne import LiveDaphne
from tests.webhelpers import HttpSession, bearer

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard() as found:
        yield found


async def api_status(live: LiveDaphne, raw: str) -> int:
    """``GET /api/runs`` with the token only (no cookie): its status."""
    client = HttpSession(live.base_url)
    answer = await anyio.to_thread.run_sync(lambda: client.get("/api/runs", headers=bearer(raw)))
    return answer.status


async def test_create_use_and_revoke_a_token_on_the_page(
    page: Any, server: tuple[LiveDaphne, str],
) -> None:
    live = server[0]
    await page.click(".pf-nav a:has-text('Tokens')")
    await page.wait_for_url(re.compile(r"/projects/default/tokens/$"))
    assert await page.locator("#pf-tokens-empty").is_visible()

    await page.fill("#pf-token-form [name=name]", "ci-laptop")
    await page.fill("#pf-token-form [name=expires_in]", "30")
    await page.click("#pf-token-form button[type=submit]")
    raw = (await page.text_content("#pf-token-raw") or "").strip()
    assert raw.startswith("pf_")
    row = page.locator("#pf-tokens-table tbody tr", has_text="ci-laptop")
    assert await row.get_attribute("data-state") == "active"
    assert "read,run" in await row.inner_text()
    await shot(page, "tokens-created")

    assert await api_status(live, raw) == 200
    # Shown once: the list, reloaded, has the token but never its value.
    await page.goto("/projects/default/tokens/")
    assert raw not in await page.content()
    row = page.locator("#pf-tokens-table tbody tr", has_text="ci-laptop")
    assert await row.locator(".pf-token-last-used time").count() == 1  # used just now

    await row.locator("button", has_text="Revoke").click()
    await page.wait_for_selector('#pf-tokens-table tr[data-state="revoked"]')
    assert await row.locator("button").count() == 0
    await shot(page, "tokens-revoked")
    assert await api_status(live, raw) == 401
