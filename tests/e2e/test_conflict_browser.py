"""The conflict view in a real browser (Debian's chromium): the three ways a join is
invalidated by its branches' writes — a replacement conflict (ConflictFlow), an invalid
shared mutation (ExpenseFlow) and a reducer failure (BusFlow) — each told from its recorded
events: the writers marked in the tree and on the lanes, their values and fork-time bases,
the reason, and links that move the scrubber to each write's event. Screenshots go to
``test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import dashboard, run_ended, shot, start_run, stored_events
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]



@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def finished_run(page: Any, flow: str, message: str) -> tuple[str, list[dict[str, Any]]]:
    run_id = await start_run(page, flow, message)
    await run_ended(page, timeout=30_000)
    await page.wait_for_selector('.pf-conflicts .pf-conflict[data-barrier="b0"]')
    return run_id, await stored_events(page, run_id)


async def writer_paths(page: Any) -> list[str]:
    return sorted(await page.eval_on_selector_all(
        ".pf-branch.pf-conflict-writer", "rows => rows.map(r => r.dataset.path)"))


async def writer_lanes(page: Any) -> list[str]:
    return sorted(await page.eval_on_selector_all(
        ".pf-lane.pf-conflict-writer", "lanes => lanes.map(l => l.dataset.path)"))


async def select_card(page: Any) -> Any:
    """Select the conflict card (a click on its heading); the card's locator."""
    card = page.locator('.pf-conflicts .pf-conflict[data-barrier="b0"]').first
    assert await page.locator(".pf-branch.pf-conflict-writer").count() == 0, \
        "writers are marked before the card is selected"
    await card.locator(".pf-conflict-heading").click()
    await page.wait_for_selector('#pf-inspector[data-barrier="b0"]')
    return card


async def follow_link(page: Any, card: Any, seq: int) -> None:
    """Click the card's link to event ``seq``: the scrubber moves there."""
    await card.locator(f'.pf-provenance .pf-write-link[data-pin-seq="{seq}"]').click()
    await page.wait_for_function(
        "seq => document.querySelector('#pf-seq').value === String(seq)", arg=seq)
    assert await page.locator("#pf-seq").input_value() == str(seq)
    assert (await page.locator("#pf-seq-label").inner_text()).startswith(f"#{seq} of ")


def draft(events: list[dict[str, Any]], type_: str, path: str, field: str) -> dict[str, Any]:
    return next(e for e in events if e["type"] == type_ and e["path"] == path
                and e.get("field") == field and e.get("draft"))


async def test_a_replacement_conflict_marks_both_writers_and_links_to_their_writes(
    page: Any,
) -> None:
    _, events = await finished_run(page, "ConflictFlow", "Plan the team offsite")
    north = draft(events, "state.replaced", "0", "venue")
    south = draft(events, "state.replaced", "1", "venue")
    join = next(e for e in events if e["type"] == "join.invalidated")
    card = await select_card(page)
    assert await card.get_attribute("data-kind") == "conflict"
    assert await writer_paths(page) == ["0", "1"]
    assert await writer_lanes(page) == ["0", "1"]
    assert await card.locator(".pf-conflict-field").inner_text() == "VenueScout.venue"
    assert await card.locator(".pf-conflict-step").inner_text() == "VenueScout"
    reason = await card.locator(".pf-conflict-reason dd").inner_text()
    assert "north (0) and south (1), replaced VenueScout.venue" in reason
    fix = await card.locator(".pf-conflict-fix dd").inner_text()
    assert "reducer channel" in fix and "one branch own the field" in fix
    rows = card.locator(".pf-provenance .pf-conflict-row")
    assert await rows.count() == 2
    first, second = (await rows.nth(0).inner_text()), (await rows.nth(1).inner_text())
    assert north["value"] in first and "replacement" in first
    assert south["value"] in second
    # Neither had a venue at the fork: the base says so.
    assert "absent at its fork" in first and "absent at its fork" in second
    # The two proposals, side by side, and how they differ.
    sides = card.locator(".pf-conflict-side")
    assert await sides.count() == 2
    between = await card.locator(".pf-conflict-between").inner_text()
    assert f'"{north["value"]}" → "{south["value"]}"' in between
    # The compatible shortlist contribution is listed apart, as not part of the conflict.
    others = card.locator(".pf-bystanders .pf-bystander-row")
    assert await others.count() == 2
    assert "VenueScout.shortlist" in await others.nth(0).inner_text()
    assert "not part of the conflict" in await others.nth(0).inner_text()
    assert "shortlist" not in await card.locator(".pf-provenance").inner_text()
    await shot(page, "conflict_card_selected")

    await follow_link(page, card, south["seq"])
    # Before the join: the card stays (drawn from the whole run) and says where it is.
    held = page.locator('.pf-conflicts .pf-conflict.pf-conflict-ahead[data-barrier="b0"]')
    assert f"#{south['seq']}, before this join ran (#{join['seq']})" in \
        await held.locator(".pf-conflict-when").inner_text()
    assert await held.locator(".pf-conflict-row.pf-at-scrubber").inner_text() == \
        await held.locator(".pf-conflict-row").nth(1).inner_text()
    assert await writer_paths(page) == ["0", "1"]
    await shot(page, "conflict_scrubbed_to_write")

    # A branch's own writes tell the conflicting replacement from the contribution.
    await page.click('.pf-branch[data-path="0"]')
    await page.wait_for_selector('#pf-inspector[data-path="0"]:not([data-barrier])')
    await page.click("#pf-seq-live")
    # Back at the end: at the write the scrubber was on, the branch may have written already.
    await page.wait_for_selector('#pf-run:not(.pf-replaying) #pf-inspector .pf-own-row')
    own = page.locator("#pf-inspector .pf-own-table")
    problem = await own.locator(".pf-own-problem").inner_text()
    assert "VenueScout.venue" in problem and "replacement" in problem
    assert "in the conflict" in problem
    rest = await own.locator(".pf-own-row:not(.pf-own-problem)").inner_text()
    assert "VenueScout.shortlist" in rest and "contribution" in rest
    assert "not in the conflict" in rest
    await shot(page, "conflict_branch_writes")


async def test_an_invalid_shared_mutation_marks_the_branch_that_wrote_its_callers_state(
    page: Any,
) -> None:
    _, events = await finished_run(page, "ExpenseFlow", "Audit the report")
    rejected = next(e for e in events if e["type"] == "branch.rejected")
    assert rejected["error"]["code"] == "parallel_mutation"
    saved = next(e for e in events if e["type"] == "state.replaced" and not e["draft"])
    card = await select_card(page)
    assert await card.get_attribute("data-kind") == "mutation"
    assert await writer_paths(page) == [rejected["path"]] == ["1"]
    assert await writer_lanes(page) == ["1"]
    assert await card.locator(".pf-conflict-field").inner_text() == "ExpenseDesk.approved"
    reason = await card.locator(".pf-conflict-reason dd").inner_text()
    assert "meals (1) tried to write the state of step 'ExpenseDesk'" in reason
    assert "own step's state (Auditor)" in reason
    row = await card.locator(".pf-provenance .pf-conflict-row").inner_text()
    # What it tried to write, against what the desk had saved before the fork.
    assert (saved["step"], saved["field"], saved["value"]) == ("ExpenseDesk", "approved", False)
    assert "true" in row and "false" in row and "write to shared state" in row
    assert "false → true" in await card.locator(".pf-conflict-side .pf-diff-list").inner_text()
    assert "not part of the mutation" in await card.locator(".pf-bystanders").inner_text()
    await shot(page, "mutation_card_selected")
    await follow_link(page, card, rejected["seq"])
    assert "branch.rejected" in await page.locator("#pf-seq-label").inner_text()
    await shot(page, "mutation_scrubbed_to_write")


async def test_a_reducer_failure_lists_the_contributions_and_the_base_they_reduce_from(
    page: Any,
) -> None:
    run_id, events = await finished_run(page, "BusFlow", "Book the bus")
    design = draft(events, "state.contributed", "0", "seats")
    sales = draft(events, "state.contributed", "1", "seats")
    card = await select_card(page)
    assert await card.get_attribute("data-kind") == "reducer"
    assert await writer_paths(page) == ["0", "1"]
    assert await card.locator(".pf-conflict-field").inner_text() == "SeatBooker.seats"
    reason = await card.locator(".pf-conflict-reason dd").inner_text()
    assert "'reduced' reducer of SeatBooker.seats" in reason
    assert "13 seats booked, the bus has 10" in reason
    assert await card.locator(".pf-conflict-initial dd").inner_text() == "2"
    rows = card.locator(".pf-provenance .pf-conflict-row")
    cells = [await rows.nth(i).locator("td").all_inner_texts() for i in range(2)]
    # Branch, write, as, proposed, base, its view after, event.
    assert [c[3:6] for c in cells] == [[str(design["value"]), "2", str(design["result"])],
                                       [str(sales["value"]), "2", str(sales["result"])]]
    assert "SeatBooker.teams" in await card.locator(".pf-bystanders").inner_text()
    await shot(page, "reducer_card_selected")
    await follow_link(page, card, design["seq"])
    await shot(page, "reducer_scrubbed_to_write")

    # The session replay draws the same card; its link moves that turn's position.
    session_id = next(e for e in events if e["type"] == "turn.started")["session_id"]
    await page.goto(f"/sessions/{session_id}/")
    await page.wait_for_selector('#pf-session[data-loaded="1"]')
    card = page.locator('.pf-conflicts .pf-conflict[data-barrier="b0"]').first
    await card.locator(".pf-conflict-heading").click()
    await page.wait_for_selector(".pf-branch.pf-conflict-writer")
    assert await writer_paths(page) == ["0", "1"]
    await card.locator(f'.pf-provenance .pf-write-link[data-pin-seq="{sales["seq"]}"]').click()
    await page.wait_for_selector(f'#pf-session[data-turn="1"][data-seq="{sales["seq"]}"]')
    assert run_id
    await shot(page, "reducer_session_scrubbed")
