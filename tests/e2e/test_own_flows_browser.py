"""Your own flow in a real browser: a live Daphne started with ``PICOFLOW_FLOWS`` naming the
test package's flows, Debian's chromium driven by Playwright. The start form builds the
flow's config fields from ``GET /api/flows``, checks them, and starts the run."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.e2e.browsing import api_run, dashboard, logged_in_page, run_ended, shot
from tests.livedaphne import REPO_ROOT, LiveDaphne

playwright_api = pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

FORM = "#pf-start-form"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    env = {"PICOFLOW_FLOWS": "tests.flows_pkg.greeter:flows", "PYTHONPATH": str(REPO_ROOT),
           "PICOFLOW_DEMO_LATENCY": "0"}
    with dashboard(env) as found:
        yield found


@pytest.fixture
async def page(server: tuple[LiveDaphne, str], browser: Any) -> AsyncIterator[Any]:
    live, password = server
    async with logged_in_page(live.base_url, password, browser) as page:
        await page.wait_for_selector(f'{FORM}[data-ready="1"]')
        yield page


async def field_error(page: Any, name: str) -> str:
    box = page.locator(f'.pf-config-field[data-field="{name}"] .pf-field-error')
    return "" if await box.is_hidden() else str(await box.inner_text())


async def test_an_own_flow_starts_from_its_generated_config_fields_and_finishes(
    page: Any,
) -> None:
    await page.select_option(f"{FORM} select[name=flow]", "GreeterFlow")
    fields = page.locator("#pf-config-fields .pf-config-field")
    assert await fields.evaluate_all("els => els.map(e => e.dataset.field)") == [
        "name", "times", "tone", "shout"]
    assert await page.get_attribute('[name="config.times"]', "type") == "number"
    assert await page.get_attribute('[name="config.times"]', "max") == "5"
    assert await page.input_value('[name="config.name"]') == "Ada"
    assert await page.input_value('[name="config.times"]') == "1"
    assert await page.locator('[name="config.tone"] option').all_inner_texts() == [
        "warm", "formal"]
    assert await page.locator('[name="config.shout"]').is_checked() is False

    # An empty message is refused here, before anything is sent.
    await page.click(f"{FORM} button[type=submit]")
    assert await page.locator(f"{FORM} .pf-form-error").inner_text() == (
        "GreeterFlow needs a message.")
    assert page.url.endswith("/")

    # The example messages are offered as text (one of them is hostile).
    examples = page.locator("#pf-examples button.pf-example")
    assert await examples.all_inner_texts() == ["good morning", "<b>hostile</b> & sly"]
    assert await page.locator("#pf-examples b").count() == 0
    await examples.nth(1).click()
    assert await page.input_value(f"{FORM} [name=message]") == "<b>hostile</b> & sly"

    # A config field out of range gets its message; nothing starts.
    await page.fill('[name="config.times"]', "9")
    await page.fill('[name="config.name"]', "")
    await page.click(f"{FORM} button[type=submit]")
    assert await field_error(page, "times") == "Must be at most 5."
    assert await field_error(page, "name") == ""  # blank: the flow's default applies
    assert await page.get_attribute('[name="config.times"]', "aria-invalid") == "true"
    assert page.url.endswith("/")
    await shot(page, "own_flow_form_errors")

    await page.fill('[name="config.name"]', "Grace")
    await page.fill('[name="config.times"]', "2")
    await page.select_option('[name="config.tone"]', label="formal")
    await page.check('[name="config.shout"]')
    await page.click(f"{FORM} button[type=submit]")
    await page.wait_for_url(re.compile(r"/runs/[0-9a-f]+/"))
    run_id = str(re.search(r"/runs/([0-9a-f]+)/", page.url).group(1))  # type: ignore[union-attr]
    # The page's status comes from the run's last event, before the reply is stored.
    await run_ended(page, timeout=30_000)
    run = await api_run(page, run_id)
    assert run["flow"] == "GreeterFlow"
    assert run["reply"]["message"] == (
        "GOOD DAY, GRACE! GOOD DAY, GRACE! You said: <b>hostile</b> & sly")
    # The inspector names the model that answered, and what the flow asked for.
    await page.click(".pf-root")
    await page.wait_for_selector('#pf-inspector[data-path=""] .pf-model-call')
    assert "scripted/greeter-script (as greeter-models/greeter-large)" in await page.locator(
        "#pf-inspector .pf-call-head").first.inner_text()
    await shot(page, "own_flow_finished")

    await page.goto("/")
    row = page.locator(f'.pf-run-row[data-run-id="{run_id}"]')
    await row.wait_for()
    assert await row.get_attribute("data-status") == "finished"
    assert "GreeterFlow" in await row.inner_text()
    assert await page.evaluate("() => window.__pwned") is None


async def test_the_server_checks_the_config_too_and_its_messages_land_on_the_fields(
    page: Any,
) -> None:
    # The page is served a looser schema than the flow's (times up to 50), so it lets 50
    # through; the server refuses it, and the form shows why by the field.
    async def loosen(route: Any) -> None:
        response = await route.fetch()
        data = await response.json()
        for flow in data["flows"]:
            if flow["id"] == "GreeterFlow":
                flow["config_schema"]["properties"]["times"]["maximum"] = 50
        await route.fulfill(response=response, json=data)

    await page.route("**/api/flows", loosen)
    await page.reload()
    await page.wait_for_selector(f'{FORM}[data-ready="1"]')
    await page.select_option(f"{FORM} select[name=flow]", "GreeterFlow")
    await page.fill(f"{FORM} [name=message]", "hello")
    await page.fill('[name="config.times"]', "50")
    count_runs = "async () => (await (await fetch('/api/runs')).json()).runs.length"
    before = await page.evaluate(count_runs)
    await page.click(f"{FORM} button[type=submit]")
    await page.wait_for_selector('.pf-config-field[data-field="times"] .pf-field-error:visible')
    assert await field_error(page, "times") == "Input should be less than or equal to 5"
    assert (await page.locator(f"{FORM} .pf-form-error").inner_text()).startswith(
        "Config of flow 'GreeterFlow' is not valid: times:")
    assert page.url.endswith("/")
    assert await page.evaluate(count_runs) == before


async def test_ten_thousand_branches_start_from_the_page(page: Any) -> None:
    await page.select_option(f"{FORM} select[name=flow]", "FanOutFlow")
    assert await page.get_attribute('[name="config.branches"]', "max") == "100000"
    assert await page.input_value('[name="config.branches"]') == "1000"
    await page.fill('[name="config.branches"]', "100001")
    await page.click(f"{FORM} button[type=submit]")
    assert await field_error(page, "branches") == "Must be at most 100,000."
    await page.fill('[name="config.branches"]', "10000")
    await page.fill('[name="config.concurrency"]', "1000")
    await page.click(f"{FORM} button[type=submit]")
    await page.wait_for_url(re.compile(r"/runs/[0-9a-f]+/"))
    run_id = str(re.search(r"/runs/([0-9a-f]+)/", page.url).group(1))  # type: ignore[union-attr]
    await run_ended(page, timeout=180_000)
    run = await api_run(page, run_id)
    assert run["status"] == "finished"
    assert run["reply"]["message"] == "10000 of 10000 branches joined; total 10000."
    assert run["branch_count"] == 10_000
