"""``/api/docs`` in Debian's chromium: the vendored Swagger UI draws the OpenAPI document's
operations under the site's Content-Security-Policy (no violation reported, no console
error). Screenshots: ``test-artifacts/api_docs.png`` (the first screen, an operation opened)
and ``api_docs_try_it.png`` (a call tried from the page)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import ARTIFACTS, dashboard
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

# Recorded from the page's start: a violation can happen before any test code runs.
VIOLATIONS = """document.addEventListener("securitypolicyviolation", (e) => {
  (window.pfViolations ??= []).push(`${e.violatedDirective} ${e.blockedURI}`);
});"""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard() as found:
        yield found


def operation(page: Any, method: str, path: str) -> Any:
    return page.locator(f"#pf-api-docs .opblock-{method}").filter(
        has=page.locator(f'.opblock-summary-path[data-path="{path}"]'))


async def try_it(page: Any, method: str, path: str, **params: str) -> str:
    """Open ``method path``, fill ``params``, execute it: the status the page shows."""
    block = operation(page, method, path)
    if not await block.locator(".try-out__btn").count():
        await block.locator(".opblock-summary").click()
    await block.locator(".try-out__btn").click()
    for name, value in params.items():
        await block.locator(f'tr[data-param-name="{name}"] input').fill(value)
    await block.locator("button.execute").click()
    status = block.locator(".live-responses-table tr.response .response-col_status").first
    await status.wait_for()
    return str(await status.inner_text()).strip()


async def test_the_api_docs_page_draws_the_operations_under_the_policy(page: Any) -> None:
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    await page.add_init_script(VIOLATIONS)
    response = await page.goto("/api/docs")
    assert response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    await page.wait_for_selector("#pf-api-docs[data-ready='1']")
    summaries = page.locator("#pf-api-docs .opblock-summary")
    await summaries.first.wait_for()
    text = await page.locator("#pf-api-docs").inner_text()
    for path in ("/api/runs", "/api/runs/{run_id}/events", "/api/ingest", "/ai/run"):
        assert path in text, path
    # Every operation of the document is drawn, with its summary.
    document = await page.evaluate("async () => (await fetch('/api/openapi.json')).json()")
    expected = sorted((method.upper(), path, operation["summary"])
                      for path, item in document["paths"].items()
                      for method, operation in item.items())
    drawn = await summaries.evaluate_all("""ss => ss.map(s => [
      s.querySelector(".opblock-summary-method").textContent,
      s.querySelector(".opblock-summary-path").dataset.path,
      s.querySelector(".opblock-summary-description").textContent])""")
    assert sorted(map(tuple, drawn)) == expected
    methods = await page.locator("#pf-api-docs .opblock-summary-method").all_inner_texts()
    assert "GET" in methods and "POST" in methods
    # An operation opens (its parameters and responses drawn by the vendored bundle).
    await page.locator("#pf-api-docs .opblock-get .opblock-summary").first.click()
    await page.locator("#pf-api-docs .opblock-get .responses-wrapper").first.wait_for()
    assert console == []
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "api_docs.png"))
    # "Try it out" runs as the logged-in user: a read, and a write (which needs Django's
    # CSRF token: a refused one would be a 403, not the API's 404 for an unknown run).
    assert await try_it(page, "get", "/api/flows") == "200"
    assert await try_it(page, "post", "/api/runs/{run_id}/cancel", run_id="no-such-run") == "404"
    flows = operation(page, "get", "/api/flows")
    await flows.locator(".live-responses-table").scroll_into_view_if_needed()
    await page.screenshot(path=str(ARTIFACTS / "api_docs_try_it.png"))
    assert await page.evaluate("window.pfViolations ?? []") == []
    # The one console error since: chromium reporting the 404 the page was asked to get.
    assert console == ["Failed to load resource: the server responded with a status of 404 "
                       "(Not Found)"]
