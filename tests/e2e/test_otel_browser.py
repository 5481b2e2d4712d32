"""A run read from OpenTelemetry spans on the run page in a real browser (Debian's
chromium): the demo agent (picoflow_web/demos/otel_agent.py, instrumented only with the
OpenTelemetry SDK) runs in its own process and ships its trace to a live dashboard; the
page draws the barrier of its six overlapping tool spans, their lanes, the model call's
tokens, span words for barrier and branches, and says that all of it is inferred from
spans, with no state views, instead of empty state panels. Screenshots go to
``test-artifacts/``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.browsing import FRAME, run_ended, shot
from tests.livedaphne import LiveDaphne, SharedServer

pytest.importorskip("playwright.async_api", reason="pip install playwright")
pytest.importorskip("opentelemetry.sdk", reason='pip install "picoflow-web[otel]"')

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ["search_flights", "search_hotels", "weather_forecast", "currency_rates",
         "local_events", "visa_rules"]


@pytest.fixture(scope="module")
def server(shared_daphne: SharedServer) -> tuple[LiveDaphne, str, str]:
    return shared_daphne.server, shared_daphne.password, shared_daphne.token


def run_agent(server: tuple[LiveDaphne, str, str]) -> str:
    """Run the demo agent as its tutorial says, shipping to the live dashboard with the
    standard OTLP variables; its trace id."""
    live, _, token = server
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "PYTEST_", "OTEL_", "PICOFLOW_"))}
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": live.base_url,
                "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {token}",
                "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-m", "picoflow_web.demos.otel_agent", "--unit",
                           "0.05"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("run: ")]
    return line.removeprefix("run: ")


async def test_an_otel_run_reads_in_span_words(page: Any,
                                               server: tuple[LiveDaphne, str, str]) -> None:
    run_id = run_agent(server)
    assert len(run_id) == 32 and int(run_id, 16), run_id
    await page.goto(f"/runs/{run_id}/")
    await run_ended(page, "finished")
    await page.evaluate(FRAME)
    assert (await page.inner_text("#pf-run-flow")).strip() == "OpenTelemetry:trip-planner"
    origin = await page.inner_text("#pf-origin")
    assert re.fullmatch(r"remote · OpenTelemetry on \S+ \(pid \d+\)", origin.strip()), origin
    assert "inferred from the spans" in str(await page.get_attribute("#pf-origin", "title"))

    # The Turn panel: the notice, the model call's tokens, no empty state panel.
    await page.wait_for_selector('#pf-inspector[data-path=""]:not([data-barrier])')
    panel = await page.inner_text("#pf-inspector")
    assert "Inferred from OpenTelemetry spans of trip-planner" in panel, panel
    assert "No state views" in panel, panel
    assert "Canonical state" not in panel and "Empty: no step state yet" not in panel, panel
    assert "412 in · 38 out" in panel, panel
    assert "Plan a weekend in Lisbon for two." in panel and "jazz festival" in panel, panel
    # The chat span's prompt, in the GenAI conventions' message parts, reads as its text.
    request = await page.inner_text("#pf-inspector .pf-model-call .pf-request")
    assert "Plan the trip." in request and "3 flights from 212 EUR" in request, request
    await shot(page, "otel-turn")

    # The tree: the root span's turn, one barrier in span words, six branches keyed by
    # their spans' names.
    root = await page.inner_text(".pf-root .pf-row-step")
    assert root == "root span invoke_agent trip-planner", root
    labels = await page.eval_on_selector_all(
        ".pf-barrier .pf-barrier-label", "labels => labels.map(l => l.textContent)")
    assert labels == ["overlapping child spans of invoke_agent trip-planner"], labels
    rows = dict(await page.eval_on_selector_all(
        ".pf-branch", "rows => rows.map(r => [r.querySelector('.pf-row-key').textContent,"
        " r.dataset.path])"))
    assert set(rows) == {f"execute_tool {tool}" for tool in TOOLS}, rows
    # No publication marks: spans publish nothing.
    assert await page.locator(".pf-barrier .pf-join-badge").count() == 0
    assert await page.locator(".pf-branch .pf-chip").count() == 0

    # The lanes: each branch's span a running segment, all six open at once (the tools
    # start their work together).
    spans = []
    for key, path in rows.items():
        box = await page.locator(f'.pf-lane[data-path="{path}"] .pf-seg-running').first \
            .bounding_box()
        assert box is not None and box["width"] > 0, key
        spans.append((box["x"], box["x"] + box["width"]))
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans

    # A branch: its span, its tool call, the notice instead of what it could see.
    path = rows["execute_tool search_flights"]
    await page.click(f'.pf-branch[data-path="{path}"]')
    await page.wait_for_selector(f'#pf-inspector[data-path="{path}"]')
    head = await page.inner_text("#pf-inspector .pf-inspector-head")
    assert "span execute_tool search_flights" in head, head
    inspector = await page.inner_text("#pf-inspector")
    assert "this branch is the span execute_tool search_flights" in inspector, inspector
    assert "No state views" in inspector, inspector
    assert await page.locator("#pf-inspector .pf-visible-state").count() == 0
    assert await page.locator("#pf-inspector .pf-invisible").count() == 0
    assert await page.locator("#pf-inspector .pf-published").count() == 0
    assert await page.locator("#pf-inspector .pf-tool-call").count() >= 1
    assert "3 flights from 212 EUR" in inspector, inspector
    # The span's own attributes, as the dashboard stored them.
    assert "Span attributes" in inspector and "gen_ai.tool.call.id" in inspector, inspector
    assert "call_1" in inspector, inspector
    await shot(page, "otel-branch")

    # The barrier: inferred, six fulfilled, no publication section.
    barrier = await page.get_attribute(".pf-barrier", "data-barrier")
    await page.click(f'.pf-barrier[data-barrier="{barrier}"]')
    await page.wait_for_selector(f'#pf-inspector[data-barrier="{barrier}"]')
    inspector = await page.inner_text("#pf-inspector")
    assert "inferred from spans" in inspector and "6 fulfilled" in inspector, inspector
    assert "child spans of invoke_agent trip-planner that overlap in time" in inspector
    assert "Branches see" not in inspector, inspector
    assert await page.locator("#pf-inspector .pf-published").count() == 0
    await shot(page, "otel-barrier")


async def test_a_page_watching_a_trace_redraws_it_when_its_run_is_rebuilt(
        page: Any, server: tuple[LiveDaphne, str, str]) -> None:
    """Two overlapping child spans arrive first, without their root: the page draws what
    the receiver made of them. The root then arrives and the run is rebuilt on the server
    (its events replaced from seq 0): the page starts over and draws the rebuilt run, not
    the old events with the new ones after them."""
    import asyncio

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import set_span_in_context

    live, _, token = server
    provider = TracerProvider(resource=Resource.create({"service.name": "rebuilt-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{live.base_url}/v1/traces", headers={"Authorization": f"Bearer {token}"})))
    tracer = provider.get_tracer("test")
    root = tracer.start_span("agent")
    under = set_span_in_context(root)
    first, second = (tracer.start_span(name, context=under) for name in ("left", "right"))
    await asyncio.to_thread(second.end)  # each exported as it ends (SimpleSpanProcessor)
    await asyncio.to_thread(first.end)
    run_id = format(root.get_span_context().trace_id, "032x")
    await page.goto(f"/runs/{run_id}/")
    await page.wait_for_selector('.pf-branch[data-path="1"]')
    assert await page.get_attribute("#pf-run", "data-status") == "running"
    # Following the run live: its socket is in the run's group (it joins before it opens).
    await page.wait_for_selector('#pf-status[data-state="open"][data-mode="ws"]')
    await asyncio.to_thread(root.end)
    await asyncio.to_thread(provider.shutdown)
    await page.wait_for_function(
        """() => document.querySelector(".pf-root .pf-row-step")?.textContent
                  === "root span agent" """)
    await run_ended(page, "finished")
    await page.evaluate(FRAME)
    labels = await page.eval_on_selector_all(
        ".pf-barrier .pf-barrier-label", "labels => labels.map(l => l.textContent)")
    assert labels == ["overlapping child spans of agent"], labels
    # In the order drawn: rows are recycled slots placed by transform, so after the run
    # was redrawn from scratch their order in the document says nothing.
    rows = await page.eval_on_selector_all(
        ".pf-branch", "rows => rows.map(r => [Number(r.getAttribute('aria-rowindex')),"
        " r.querySelector('.pf-row-key').textContent]).sort((a, b) => a[0] - b[0])"
        ".map(([, key]) => key)")
    assert rows == ["left", "right"], rows
    stored = await page.evaluate(
        "async id => (await (await fetch(`/api/runs/${id}/events?after=-1&limit=5000`))"
        ".json()).events.length", run_id)
    assert await page.inner_text("#pf-event-count") == str(stored)
    # No event of the old record is left in the fold: no stream problems either.
    await page.click(".pf-root")
    await page.wait_for_selector('#pf-inspector[data-path=""]')
    assert "Stream problems" not in await page.inner_text("#pf-inspector")
