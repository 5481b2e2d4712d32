"""The LangGraph demos (runtime/integrations/langgraph_demos.py) on the run page in a real
browser (Debian's chromium): each demo runs in its own process as a user runs it, shipping
to a live Daphne through the dashboard sink, and the page must draw it in LangGraph's words
(superstep, node, ``Send``, channel) with the same tree, lanes and conflict card as our own
runs; the Turn panel at the run's last event tells how it ended. Screenshots go to
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
pytest.importorskip("langgraph")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(shared_daphne: SharedServer) -> tuple[LiveDaphne, str, str]:
    return shared_daphne.server, shared_daphne.password, shared_daphne.token


def run_demo(server: tuple[LiveDaphne, str, str], demo: str, *args: str) -> str:
    """Run ``demo`` as the LangGraph tutorial says, shipping to the live dashboard; its run id."""
    live, _, token = server
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "PYTEST_"))}
    env.update({"PICOFLOW_DASHBOARD_URL": live.base_url, "PICOFLOW_DASHBOARD_TOKEN": token,
                "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-m", "runtime.integrations.langgraph_demos", demo,
                           *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("run: ")]
    return line.removeprefix("run: ")


async def open_run(page: Any, run_id: str, status: str) -> None:
    """Open the run's page and wait until it drew every stored event."""
    await page.goto(f"/runs/{run_id}/")
    await run_ended(page, status)
    await page.evaluate(FRAME)


async def turn_panel(page: Any) -> str:
    """The inspector's Turn panel as it stands (the turn is selected when the page opens)."""
    await page.wait_for_selector('#pf-inspector[data-path=""]:not([data-barrier])')
    return str(await page.inner_text("#pf-inspector"))


async def branches(page: Any) -> dict[str, str]:
    """The tree's branch rows: key -> path."""
    rows = await page.eval_on_selector_all(
        ".pf-branch", "rows => rows.map(r => [r.querySelector('.pf-row-key').textContent,"
        " r.dataset.path])")
    return dict(rows)


async def barrier_labels(page: Any) -> list[str]:
    return list(await page.eval_on_selector_all(
        ".pf-barrier .pf-barrier-label", "labels => labels.map(l => l.textContent)"))


async def running_span(page: Any, path: str) -> tuple[float, float]:
    """Where branch ``path``'s running segment starts and ends on its lane (pixels)."""
    box = await page.locator(f'.pf-lane[data-path="{path}"] .pf-seg-running').first.bounding_box()
    assert box is not None, f"no running segment on lane {path}"
    return box["x"], box["x"] + box["width"]


async def test_ab_demo(page: Any, server: tuple[LiveDaphne, str, str]) -> None:
    """The seed's A/B graph: two supersteps; A2 starts on its lane after B1 ends."""
    run_id = run_demo(server, "ab", "--unit", "0.05")
    await open_run(page, run_id, "finished")
    panel = await turn_panel(page)
    assert "finished" in panel and "running" not in panel, panel
    assert re.search(r"Barriers\s+[1-9]", panel) and "Empty: no step state yet" not in panel, panel
    assert "Recorded from LangGraph" in panel, panel
    labels = await barrier_labels(page)
    assert labels and all(label.startswith("superstep ") for label in labels), labels
    assert "superstep 1" in labels and "superstep 2" in labels, labels
    keys = await branches(page)
    assert {"A1", "B1", "A2", "B2"} <= set(keys), keys
    _, b1_end = await running_span(page, keys["B1"])
    a2_start, _ = await running_span(page, keys["A2"])
    assert a2_start >= b1_end - 1, (a2_start, b1_end)
    await shot(page, "langgraph-ab-turn")
    await page.click(f'.pf-branch[data-path="{keys["A1"]}"]')
    await page.wait_for_selector(f'#pf-inspector[data-path="{keys["A1"]}"]')
    assert "node A1" in await page.inner_text("#pf-inspector .pf-inspector-head")
    await shot(page, "langgraph-ab")


async def test_send_demo(page: Any, server: tuple[LiveDaphne, str, str]) -> None:
    """A 200-task ``Send`` fan-out: one superstep with 200 branches, each a ``Send``."""
    run_id = run_demo(server, "send", "--unit", "0.001", "--tasks", "200")
    await open_run(page, run_id, "finished")
    panel = await turn_panel(page)
    assert "finished" in panel and "running" not in panel, panel
    found = re.search(r"Branches\s+(\d+)", panel)
    assert found and int(found[1]) >= 200, panel
    supersteps = dict(await page.eval_on_selector_all(
        ".pf-barrier", "rows => rows.map(r => [r.dataset.barrier, r.title])"))
    fan = [barrier for barrier, title in supersteps.items() if ", 200 tasks," in title]
    assert len(fan) == 1, supersteps
    assert "superstep" in supersteps[fan[0]], supersteps
    await page.click(f'.pf-barrier[data-barrier="{fan[0]}"]')
    await page.wait_for_selector(f'#pf-inspector[data-barrier="{fan[0]}"]')
    inspector = await page.inner_text("#pf-inspector")
    assert "200 fulfilled" in inspector and "channel" in inspector, inspector
    await shot(page, "langgraph-send")
    keys = await branches(page)
    sends = [key for key in keys if ":" in key]
    assert sends, f"no Send task among the rows drawn: {keys}"
    await page.click(f'.pf-branch[data-path="{keys[sends[0]]}"]')
    await page.wait_for_selector(f'#pf-inspector[data-path="{keys[sends[0]]}"]')
    assert "Send" in await page.inner_text("#pf-inspector .pf-inspector-head")


async def test_conflict_demo(page: Any, server: tuple[LiveDaphne, str, str]) -> None:
    """Two nodes write one LastValue key in a superstep: the conflict card names both."""
    run_id = run_demo(server, "conflict", "--unit", "0.02")
    await open_run(page, run_id, "failed")
    panel = await turn_panel(page)
    assert "failed" in panel and "running" not in panel, panel
    card = page.locator(".pf-conflicts .pf-conflict").first
    await card.wait_for()
    # Above the tree the card is one line until opened.
    await card.locator("[data-conflict-toggle]").click()
    await card.locator(".pf-conflict-details").wait_for()
    text = await card.inner_text()
    assert "left" in text and "right" in text, text
    assert "superstep" in text, text
    # In LangGraph's words: a channel, not our step-owned field, and LangGraph's fix.
    assert "Conflict on channel winner" in text and "state.winner" not in text, text
    assert "Annotated[T, operator.add]" in text, text
    await shot(page, "langgraph-conflict")


WHATIF_BARS = """rows => Object.fromEntries(rows.filter(r => r.querySelector('.pf-wi-bar'))
  .map(r => [r.dataset.key, [...r.querySelectorAll('.pf-wi-bar')].map(b => {
    const box = b.getBoundingClientRect();
    return {start: Number(b.dataset.start), end: Number(b.dataset.end),
            left: box.left, right: box.right};
  })]))"""
"""Each drawn lane of a What if lane set with bars, by key: its bars (data and pixels)."""


async def whatif_bars(page: Any, schedule: str) -> dict[str, list[dict[str, float]]]:
    return await page.eval_on_selector_all(  # type: ignore[no-any-return]
        f'#pf-whatif .pf-wi-schedule[data-schedule="{schedule}"] .pf-wi-row[data-path]',
        WHATIF_BARS)


async def test_ab_demo_what_if(page: Any, server: tuple[LiveDaphne, str, str]) -> None:
    """The seed's flat graph traced with its graph (each task names its predecessors): as
    recorded and under graph-wide supersteps A2 starts once B1 ended; under local barriers
    it starts right after A1, long before B1 ends. Read from the bars' order on the page.
    At 0.05 s a unit, B1 (10 units) ends 9 units after A1: far apart on the axis."""
    run_id = run_demo(server, "ab", "--unit", "0.05")
    await open_run(page, run_id, "finished")
    await page.click('.pf-view-tab[data-view="whatif"]')
    await page.wait_for_selector('#pf-whatif[data-state="ready"]')
    schedules = {name: await whatif_bars(page, name)
                 for name in ("recorded", "supersteps", "local_barriers")}
    for name, lanes in schedules.items():
        assert {"A1", "A2", "B1", "B2"} <= set(lanes), (name, lanes)
        a1, a2, b1 = lanes["A1"][0], lanes["A2"][0], lanes["B1"][-1]
        assert a1["end"] <= a2["start"], (name, lanes)
        if name == "local_barriers":
            assert a2["start"] < b1["end"] and a2["left"] < b1["right"] - 1, (name, lanes)
        else:
            assert a2["start"] >= b1["end"] - 1e-6, (name, lanes)
            assert a2["left"] >= b1["right"] - 1, (name, lanes)
    # Under supersteps A2 waits for B1, and its lane says so.
    gaps = await page.eval_on_selector_all(
        '#pf-whatif .pf-wi-schedule[data-schedule="supersteps"] .pf-wi-row[data-key="A2"]'
        " .pf-wi-gap-label", "labels => labels.map(l => l.textContent)")
    assert any(re.fullmatch(r"waits [0-9.]+ m?s for B1 \(superstep 2\)", g) for g in gaps), gaps
    inferred = await page.locator("#pf-whatif .pf-wi-inferred li").all_inner_texts()
    assert any("LangGraph" in line for line in inferred), inferred
    await shot(page, "whatif-langgraph")
