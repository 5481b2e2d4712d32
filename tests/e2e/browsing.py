"""A logged-in page in Debian's chromium, shared by the browser tests."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from tests.webhelpers import wait_until

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
"""Where browser tests leave their screenshots."""
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    """Debian's chromium, driven by Playwright until the block ends."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()


LOGINS: dict[str, Any] = {}
"""Per server (its base URL): the cookies a login through its form gave, which later pages
of it start with (no form, no password hash per test)."""


@asynccontextmanager
async def logged_in_page(base_url: str, password: str, browser: Any = None
                         ) -> AsyncIterator[Any]:
    """A page of ``base_url``'s runs list, logged in as the first user, in a browser context
    of its own (its own storage; only the session's cookies are shared with the server's
    other pages) in ``browser`` (None: a chromium of its own); on exit, no JavaScript error
    may have happened on it."""
    if browser is None:
        async with chromium() as own, logged_in_page(base_url, password, own) as page:
            yield page
        return
    saved = LOGINS.get(base_url)
    context = await browser.new_context(viewport={"width": 1400, "height": 900},
                                        base_url=base_url, storage_state=saved)
    try:
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        if saved is not None:
            await page.goto("/")
        # The first page of a server logs in; so does one whose saved session the server
        # no longer knows (it sends it to the login form).
        if saved is None or "/login/" in page.url:
            await page.goto("/login/")
            await page.fill("#id_username", "admin")
            await page.fill("#id_password", password)
            await page.click("button[type=submit], input[type=submit]")
            await page.wait_for_url(re.compile(r"/$"))
            LOGINS[base_url] = {"cookies": await context.cookies(), "origins": []}
        page.js_errors = errors
        yield page
    finally:
        await context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


async def stored_events(page: Any, run_id: str) -> list[dict[str, Any]]:
    """Run ``run_id``'s stored events (its first 5,000), fetched by the page itself and
    handed over as one JSON text (thousands of objects cost the driver far more)."""
    return json.loads(await page.evaluate(  # type: ignore[no-any-return]
        "async id => JSON.stringify((await (await fetch("
        "`/api/runs/${id}/events?after=-1&limit=5000`)).json()).events)", run_id))


FRAME = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
"""Resolves two frames on: a render the page scheduled before it has run."""

DRAWN_TO = """n => !document.querySelector("#pf-run").classList.contains("pf-replaying")
  && document.querySelector("#pf-last-seq").textContent === String(n)"""
"""The run page is at its end, and its end is event ``n``."""


async def api_run(page: Any, run_id: str) -> dict[str, Any]:
    """Run ``run_id``'s record as the API gives it, fetched by the page itself."""
    return await page.evaluate(  # type: ignore[no-any-return]
        "async id => (await (await fetch(`/api/runs/${id}`)).json()).run", run_id)


async def run_ended(page: Any, status: str = "finished", timeout: float = 30_000) -> None:
    """Wait until the run page shows its run ended ``status`` with every stored event
    drawn, and the server has recorded that end.

    ``#pf-run[data-status]`` alone says neither: the template renders the run's status, so
    a run that ended before its page loaded is ``finished`` before any event is drawn (the
    socket's first message, the summary, can likewise come before the last events); and the
    run's last event is stored and sent before the server records the end (the run's status,
    reply and new session id). The server is asked from here: ``wait_for_function`` takes a
    returned promise for a truthy answer."""
    await page.wait_for_selector(f"#pf-run[data-status={status}]", timeout=timeout)
    run_id = await page.get_attribute("#pf-run", "data-run-id")
    run: dict[str, Any] = {}

    async def recorded() -> bool:
        run.update(await api_run(page, run_id))
        return bool(run["status"] == status)

    await wait_until(recorded, timeout=timeout / 1000, interval=0.05,
                     what=f"run {run_id} to be recorded {status}")
    await page.wait_for_function(DRAWN_TO, arg=run["event_count"] - 1, timeout=timeout)


async def start_run(page: Any, flow: str, message: str, *, goto: bool = True) -> str:
    """Start a run of ``flow`` in a new session from the runs list's form; its id (the
    page is then on the run's page)."""
    if goto:
        await page.goto("/")
    await page.select_option("#pf-start-form select[name=flow]", flow)
    await page.fill("#pf-start-form [name=message]", message)
    await page.select_option("#pf-start-form select[name=session]", "")
    await page.click("#pf-start-form button[type=submit]")
    await page.wait_for_url(re.compile(r"/runs/[0-9a-f]+/"))
    return str(re.search(r"/runs/([0-9a-f]+)/", page.url).group(1))  # type: ignore[union-attr]


async def start_run_watched(page: Any, live: Any, flow: str, message: str) -> str:
    """Start a run of ``flow`` as ``start_run`` does, with the run page listening before the
    run's first event (a gate rather than a time): ``live``'s workers are stopped, so the
    run waits queued until the page's socket is open, then a new worker takes it. A page a
    busy machine opened late would get the whole run from storage and never see it live."""
    from tests.livedaphne import stop_process

    for worker in live.workers:
        stop_process(worker)
    live.workers.clear()
    try:
        run_id = await start_run(page, flow, message)
        await page.wait_for_selector("#pf-status[data-state=open]")
        run = await api_run(page, run_id)
        assert run["status"] == "queued", run
    finally:
        live.start_worker()  # later tests on this server need one, whatever happened here
    return run_id


@contextmanager
def dashboard(env: Mapping[str, str] | None = None, **kwargs: Any) -> Iterator[tuple[Any, str]]:
    """A live Daphne (``tests/livedaphne.py``) with its first user made: the server and
    that user's password. Fails at once where Debian's chromium is missing."""
    import pytest

    from tests.livedaphne import ADMIN_PASSWORD, live_daphne

    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is missing: apt-get install chromium (make test does)")
    with live_daphne(env, admin=True, **kwargs) as live:
        yield live, (live.data_dir / ADMIN_PASSWORD).read_text().strip()


def admin_token(live: Any, name: str, scope: str) -> str:
    """A new API token of the first user, with ``scope``, named ``name``."""
    from tests.livedaphne import run_manage

    made = run_manage("create_api_token", "admin", name, "--scope", scope, env=live.env)
    assert made.returncode == 0, made.stderr
    return str(made.stdout.strip().splitlines()[-1])


async def shot(page: Any, name: str) -> None:
    """A full-page screenshot in ``test-artifacts/<name>.png``."""
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
