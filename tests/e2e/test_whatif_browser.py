"""The run page's What if view and the compare page in a real browser (Debian's chromium), on
the seed's A/B demo (TimingFlow): pipelined, A2 runs right after A1 as recorded and waits for
B1 under graph-wide supersteps; pipelined against batched, and a run against an edited copy
of itself, side by side. What the page draws is checked against what the API answers and
against the order of the drawn bars, never against wall-clock bounds.
Screenshots: ``test-artifacts/whatif-*.png``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, run_ended, shot, start_run
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

HOSTILE = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def api(page: Any, url: str) -> Any:
    return await page.evaluate("async url => (await fetch(url)).json()", url)


async def bars(page: Any, scope: str, schedule: str) -> dict[str, dict[str, Any]]:
    """Each drawn lane of ``schedule`` under ``scope`` (a lane with bars there; two runs' sets
    also hold each other's lanes, empty), by key: its bars (data and pixels) and gaps."""
    return await page.eval_on_selector_all(  # type: ignore[no-any-return]
        f'{scope} .pf-wi-schedule[data-schedule="{schedule}"] .pf-wi-row[data-path]',
        """rows => Object.fromEntries(rows.filter(r => r.querySelector('.pf-wi-bar'))
                                          .map(r => [r.dataset.key, {
          path: r.dataset.path,
          critical: r.classList.contains('pf-wi-critical'),
          bars: [...r.querySelectorAll('.pf-wi-bar')].map(b => {
            const box = b.getBoundingClientRect();
            return {start: Number(b.dataset.start), end: Number(b.dataset.end),
                    left: box.left, right: box.right};
          }),
          gaps: [...r.querySelectorAll('.pf-wi-gap')].map(g => ({
            at: g.dataset.at, from: Number(g.dataset.from), to: Number(g.dataset.to),
            label: g.querySelector('.pf-wi-gap-label')?.textContent ?? null})),
        }]))""")


def start_shifts(base: dict[str, Any], other: dict[str, Any]) -> dict[str, float]:
    """Branch key -> how much later (negative: earlier) it starts in ``other`` than in
    ``base``: its first operation in each."""
    def starts(schedule: dict[str, Any]) -> dict[str, float]:
        first: dict[str, float] = {}
        for op in schedule["operations"]:
            if op["kind"] != "work" and op.get("key"):
                first[op["key"]] = min(first.get(op["key"], op["start"]), op["start"])
        return first

    before, after = starts(base), starts(other)
    return {key: after[key] - start for key, start in before.items() if key in after}


async def test_the_what_if_view_of_the_pipelined_demo(page: Any) -> None:
    run_id = await start_run(page, "TimingFlow", "pipelined")
    await run_ended(page)
    await page.click('.pf-view-tab[data-view="whatif"]')
    await page.wait_for_selector('#pf-whatif[data-state="ready"]')
    assert await page.is_hidden("#pf-workspace")
    await page.wait_for_function("() => location.hash.includes('view=whatif')")
    data = await api(page, f"/api/runs/{run_id}/whatif")
    assert [await s.get_attribute("data-schedule") for s in
            await page.query_selector_all("#pf-whatif .pf-wi-schedule")] == [
        "recorded", "supersteps", "local_barriers"]

    recorded = await bars(page, "#pf-whatif", "recorded")
    supersteps = await bars(page, "#pf-whatif", "supersteps")
    local = await bars(page, "#pf-whatif", "local_barriers")
    # One lane per branch, coordinators first, in each schedule alike (the turn's own work,
    # path "", is a lane of its own, first).
    assert list(recorded) == list(supersteps) == list(local)
    assert [k for k, v in recorded.items() if v["path"]] == ["A", "A1", "A2", "B", "B1", "B2"]
    # Recorded: A2 starts after A1, before B1 ends: it waited for nothing but A1. (How soon
    # after A1 is the machine's: a busy one starts it later, and the order still holds.)
    a1, a2, b1 = recorded["A1"]["bars"][0], recorded["A2"]["bars"][0], recorded["B1"]["bars"][0]
    assert a1["end"] <= a2["start"] < b1["end"]
    assert a2["left"] < b1["right"]
    # Supersteps: A2 starts when B1 ends (superstep 2), drawn there, and its wait names B1.
    s_a2, s_b1 = supersteps["A2"]["bars"][0], supersteps["B1"]["bars"][0]
    assert s_a2["start"] == pytest.approx(s_b1["end"], abs=1e-6)
    assert abs(s_a2["left"] - s_b1["right"]) <= 2
    # Later than recorded, on the shared axis, by where each starts: the recorded A2 one unit
    # in, the superstep's after B1's ten. Where the recorded one ends is the machine's (a
    # busy one runs it late, up to B1's end).
    assert s_a2["left"] > a2["left"]
    [gap] = supersteps["A2"]["gaps"]
    assert gap["at"] == "superstep"
    ops = {o["key"]: o for o in data["schedules"]["supersteps"]["operations"]}
    step = ops["A2"]["superstep"]
    assert step == ops["B1"]["superstep"] + 1  # the superstep after B1's
    assert re.fullmatch(rf"waits [0-9.]+ m?s for B1 \(superstep {step}\)", gap["label"]), \
        gap["label"]
    assert gap["to"] == pytest.approx(s_a2["start"], abs=1e-6)
    # Local barriers: A2 again right after A1.
    assert local["A2"]["bars"][0]["start"] < local["B1"]["bars"][0]["end"]
    # The critical path (through B1: A2 and B2 end together under supersteps) is marked in each.
    for lanes, name in ((recorded, "recorded"), (supersteps, "supersteps")):
        marked = sorted(k for k, v in lanes.items() if v["critical"])
        paths = data["schedules"][name]["critical_path"]
        assert marked == sorted(k for k, v in lanes.items() if v["path"] in paths)
        assert "B1" in marked

    # The sentence names the branch supersteps would move most, by the run's own timings:
    # A2 by the demo's design, but a busy machine can record another branch late enough
    # that moving it back (to its superstep's start) is the larger shift.
    sentence = await page.inner_text('.pf-wi-schedule[data-schedule="supersteps"] .pf-wi-sentence')
    said = re.search(r"^Under graph-wide supersteps this run would take [0-9.]+ m?s in [0-9]+ "
                     r"supersteps \(.+\); (\w+) would start at [0-9.]+ m?s instead of "
                     rf"[0-9.]+ m?s(: it waits [0-9.]+ m?s for B1 at superstep {step})?\.",
                     sentence)
    assert said, sentence
    shifts = start_shifts(data["schedules"]["recorded"], data["schedules"]["supersteps"])
    assert abs(shifts[said[1]]) == max(abs(shift) for shift in shifts.values()), (sentence, shifts)
    assert said[1] != "A2" or said[2], sentence
    summary = await page.locator("#pf-whatif .pf-wi-summary li").all_inner_texts()
    assert summary == data["summary"]
    assert any(re.search(r"A2 would start at [0-9.]+ m?s instead of [0-9.]+ m?s: it waits "
                         rf"[0-9.]+ m?s for B1 at superstep {step}\.", line) for line in summary)
    inferred = await page.locator("#pf-whatif .pf-wi-inferred li").all_inner_texts()
    assert inferred == data["inferred"] and inferred
    assert await page.is_visible("#pf-whatif .pf-wi-inferred")
    await shot(page, "whatif-pipelined")

    # The view is deep-linked: a reload opens it; the lanes tab goes back and drops the link.
    await page.reload()
    await page.wait_for_selector('#pf-whatif[data-state="ready"]')
    assert await page.get_attribute("#pf-run", "data-view") == "whatif"
    await page.click('.pf-view-tab[data-view="lanes"]')
    await page.wait_for_selector("#pf-workspace .pf-branch")
    assert await page.is_hidden("#pf-whatif")
    await page.wait_for_function("() => !location.hash.includes('view=')")
    await page.goto(f"/runs/{run_id}/#whatif")
    await page.wait_for_selector('#pf-whatif[data-state="ready"]')


async def test_comparing_pipelined_with_batched_from_the_runs_list(page: Any) -> None:
    pipelined = await start_run(page, "TimingFlow", "pipelined")
    await run_ended(page)
    batched = await start_run(page, "TimingFlow", "batched")
    await run_ended(page)
    await page.goto("/?flow=TimingFlow")
    for run in (batched, pipelined):
        await page.check(f'.pf-run-row[data-run-id="{run}"] .pf-run-pick')
    assert await page.inner_text("#pf-compare-hint") == ""
    await shot(page, "whatif-runs-list-picked")
    await page.click("#pf-compare-runs")
    # The run started first is a.
    await page.wait_for_url(re.compile(f"/runs/{pipelined}/compare/{batched}/$"))
    await page.wait_for_selector('#pf-compare[data-state="ready"]')
    data = await api(page, f"/api/runs/{pipelined}/compare/{batched}")

    rows = await page.eval_on_selector_all(
        ".pf-cmp-row", "rows => rows.map(r => [r.dataset.path, r.dataset.key, r.dataset.match])")
    assert rows == [[b["path"], b["key"], b["match"]] for b in data["branches"]]
    # Pipelined's coordinators and nested stages against batched's flat stages: no path and
    # key in both, each marked as missing from b or added in b.
    assert {m for _, _, m in rows} == {"only_a", "only_b"}
    assert await page.locator('.pf-cmp-row[data-match="only_b"] .pf-cmp-match').first.inner_text() \
        == "added in b"
    assert await page.locator('.pf-cmp-row[data-match="only_a"] .pf-cmp-match').first.inner_text() \
        == "missing from b"
    sentence = await page.inner_text("#pf-cmp-sentence")
    assert sentence.startswith("Run b (batched) took ") and "than run a (pipelined)" in sentence
    # Both timings on one axis: a's lanes and b's, each run's own keys drawn in its own set.
    a_lanes = await bars(page, "#pf-cmp-timing", "a")
    b_lanes = await bars(page, "#pf-cmp-timing", "b")
    assert [k for k, v in a_lanes.items() if v["path"]] == ["A", "A1", "A2", "B", "B1", "B2"]
    assert sorted(k for k, v in b_lanes.items() if v["path"]) == ["A1", "A2", "B1", "B2"]
    # Batched: A2 starts after B1 ends (the barrier); pipelined: before.
    assert b_lanes["A2"]["bars"][0]["left"] >= b_lanes["B1"]["bars"][0]["right"] - 2
    assert a_lanes["A2"]["bars"][0]["left"] < a_lanes["B1"]["bars"][0]["right"]
    await shot(page, "whatif-compare-pipelined-batched")


async def test_comparing_a_run_with_an_edited_copy_from_the_run_page(page: Any) -> None:
    original = await start_run(page, "TimingFlow", "pipelined")
    await run_ended(page)
    # A copy whose B1 answered otherwise (a hostile string, drawn as text).
    export = await page.evaluate(
        "async id => (await fetch(`/api/runs/${id}/export`)).text()", original)
    lines = [json.loads(line) for line in export.splitlines() if line.strip()]
    edited = 0
    for event in lines:
        if event["type"] == "branch.fulfilled" and event.get("key") == "B1":
            event["output"] = f"B1 redone {HOSTILE}"
            edited += 1
    assert edited == 1
    body = "\n".join(json.dumps(e) for e in lines) + "\n"
    stored = await page.evaluate(
        """async body => {
          const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
          const r = await fetch('/api/import?copy=1', {method: 'POST', body,
            headers: {'Content-Type': 'application/x-ndjson', 'X-CSRFToken': token}});
          return [r.status, await r.json()];
        }""", body)
    assert stored[0] == 201, stored
    copy = stored[1]["runs"][0]["id"]

    await page.goto(f"/runs/{original}/")
    await page.wait_for_selector(f'#pf-compare-with option[value="{copy}"]', state="attached")
    await page.select_option("#pf-compare-with", copy)
    await page.wait_for_url(re.compile(f"/runs/{original}/compare/{copy}/$"))
    await page.wait_for_selector('#pf-compare[data-state="ready"]')
    data = await api(page, f"/api/runs/{original}/compare/{copy}")

    rows = await page.eval_on_selector_all(
        ".pf-cmp-row", """rows => rows.map(r => [r.dataset.key, r.dataset.match,
          [...r.querySelectorAll('td[data-changed]')].map(td => td.dataset.field)])""")
    assert rows == [[b["key"], b["match"], b["changed"]] for b in data["branches"]]
    changed = {key: fields for key, _, fields in rows if fields}
    assert "output" in changed["B1"]
    cell = page.locator('.pf-cmp-row[data-key="B1"] td[data-field="output"]')
    assert await cell.locator(".pf-cmp-b").text_content() == f"B1 redone {HOSTILE}"
    assert await cell.locator(".pf-cmp-a").text_content() == "B1 done"
    assert await page.locator("#pf-compare img").count() == 0
    assert await page.evaluate("() => window.__pwned") is None
    # Only what differs is marked; the filter keeps exactly those rows.
    await page.check("#pf-cmp-changed-only")
    shown = await page.eval_on_selector_all(".pf-cmp-row", "rows => rows.map(r => r.dataset.key)")
    assert shown == [key for key, _, fields in rows if fields]
    await page.uncheck("#pf-cmp-changed-only")
    # Both timings drawn, one lane set each.
    a_lanes = await bars(page, "#pf-cmp-timing", "a")
    b_lanes = await bars(page, "#pf-cmp-timing", "b")
    assert list(a_lanes) == list(b_lanes)
    assert [k for k, v in b_lanes.items() if v["path"]] == ["A", "A1", "A2", "B", "B1", "B2"]
    await shot(page, "whatif-compare-edited-copy")


FANOUT = 2_000  # far more lanes than the view draws; the 10,000-branch speed is bench/whatif*.py


async def test_a_big_run_shows_only_the_lanes_that_differ_most(page: Any) -> None:
    form = "#pf-start-form"
    await page.wait_for_selector(f'{form}[data-ready="1"]')
    await page.select_option(f"{form} select[name=flow]", "FanOutFlow")
    await page.fill('[name="config.branches"]', str(FANOUT))
    await page.fill('[name="config.concurrency"]', "1000")
    await page.click(f"{form} button[type=submit]")
    await page.wait_for_url(re.compile(r"/runs/[0-9a-f]+/"))
    run_id = str(re.search(r"/runs/([0-9a-f]+)/", page.url).group(1))  # type: ignore[union-attr]
    await run_ended(page, timeout=240_000)
    await page.goto(f"/runs/{run_id}/#view=whatif")
    await page.wait_for_selector('#pf-whatif[data-state="ready"]', timeout=60_000)
    data = await api(page, f"/api/runs/{run_id}/whatif")
    lanes = {o["path"] for o in data["schedules"]["recorded"]["operations"]}
    hidden = await page.inner_text("#pf-whatif .pf-wi-hidden")
    shown = await page.locator(
        '#pf-whatif .pf-wi-schedule[data-schedule="supersteps"] .pf-wi-row[data-path]').count()
    assert shown < len(lanes)
    assert hidden.startswith(f"{len(lanes):,} lanes: showing the {shown} ")
    assert hidden.endswith(f"{len(lanes) - shown:,} more are hidden.")
    # Every set shows the same lanes.
    for name in ("recorded", "local_barriers"):
        assert await page.locator(
            f'#pf-whatif .pf-wi-schedule[data-schedule="{name}"] .pf-wi-row[data-path]').count() \
            == shown
    await shot(page, "whatif-fanout")
