"""Replay in a real browser (Debian's chromium): a 14-turn HotelFlow session walked turn by
turn on the session page, its state diffed between turns, a saved nested ResearchFlow
run scrubbed across a join, and a run exported from its page and imported into another
dashboard's empty database, where the page folds it the same at every position.
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from picoflow_web.demos.hotel.script import CURRENT_DATE, REFERENCE_TURNS
from tests.e2e.browsing import (
    FRAME,
    dashboard,
    logged_in_page,
    run_ended,
    shot,
    start_run,
    stored_events,
)
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]


POST_TURN = """async ([message, session, today]) => {
  const csrf = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
  const response = await fetch("/ai/run", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
    body: JSON.stringify({flowName: "HotelFlow", message, session, config: {current_date: today}}),
  });
  return {status: response.status, session: response.headers.get("Chat-Session-Id")};
}"""

ROOM = "ExploreStep.json \u203a roomType[0]"
"""Where the room type sits in ExploreStep's JSON text, as the diff names it."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.05"}) as found:
        yield found


async def go_to(page: Any, hash_: str, turn: int, seq: int) -> None:
    # Both attributes: a move within the turn already shown leaves data-turn as it was.
    await page.evaluate("h => { location.hash = h; }", hash_)
    await page.wait_for_selector(f'#pf-session[data-turn="{turn}"][data-seq="{seq}"]')


async def diff_rows(page: Any, container: str) -> dict[str, tuple[str, str, str]]:
    """Place -> (kind, before, after) of each row of a diff panel."""
    rows = await page.eval_on_selector_all(
        f"{container} .pf-diff-row",
        """rows => rows.map(r => [r.dataset.place, [r.dataset.kind,
             r.querySelector('.pf-diff-before')?.textContent ?? '',
             r.querySelector('.pf-diff-after')?.textContent ?? '']])""")
    return {place: tuple(cells) for place, cells in rows}


async def test_a_hotel_session_replays_turn_by_turn_and_diffs_turn_3_against_turn_7(
    page: Any,
) -> None:
    session = None
    for message in REFERENCE_TURNS:
        reply = await page.evaluate(POST_TURN, [message, session, CURRENT_DATE])
        assert reply["status"] == 200, reply
        session = session or reply["session"]
        assert reply["session"] == session
    await page.goto(f"/sessions/{session}/")
    # data-loaded comes a frame before the first position is drawn (data-turn, data-seq).
    await page.wait_for_selector('#pf-session[data-loaded="1"][data-turn]')
    run_ids = await page.eval_on_selector_all(".pf-run-row",
                                              "rows => rows.map(r => r.dataset.runId)")
    assert len(run_ids) == 14
    events = [await stored_events(page, run_id) for run_id in run_ids]
    assert [e[0]["message"] for e in events] == list(REFERENCE_TURNS)
    # The replay opens at the end of the session; the scrubber spans every event of every turn.
    assert await page.get_attribute("#pf-session", "data-turn") == "14"
    assert await page.get_attribute("#pf-seq", "max") == str(sum(len(e) for e in events) - 1)

    # Home, then next/previous turn, from the keyboard; the URL follows.
    await page.locator("body").press("Home")
    await page.wait_for_selector('#pf-session[data-turn="1"][data-seq="0"]')
    await page.locator("body").press("]")
    await page.wait_for_selector('#pf-session[data-turn="2"][data-seq="0"]')
    assert "turn=2" in page.url
    assert await page.locator("#pf-session-message").inner_text() == REFERENCE_TURNS[1]
    await page.locator("body").press("[")
    await page.locator("body").press("[")
    await page.wait_for_selector('#pf-session[data-turn="1"]')

    # Turn 9 moves the cursor twice (Present -> Explore -> Present): drawn as rows and lanes.
    ninth = events[8]
    await go_to(page, "#turn=9", 9, ninth[-1]["seq"])
    assert await page.locator("#pf-session-cursor").inner_text() == "PresentStep"
    tools = await page.locator('.pf-activity[data-activity="tool"]').all_inner_texts()
    called = [e["name"] for e in ninth if e["type"] == "tool.started"]
    assert called == ["search_again", "capture_choices"]
    assert [any(name in text for text in tools) for name in called] == [True, True]
    models = await page.locator('.pf-activity[data-activity="model"]').count()
    assert models == sum(1 for e in ninth if e["type"] == "model.started")
    moves = await page.locator(
        '.pf-activity[data-activity="cursor"] .pf-activity-label').all_inner_texts()
    assert [m.split("→")[-1].strip() for m in moves] == [
        e["to_step"] for e in ninth if e["type"] == "cursor.moved"]
    assert await page.locator(".pf-lane-activity .pf-seg-model").count() == models
    await shot(page, "session_replay_turn9")

    # The header follows the position: at turn 9's first event the tokens are those the
    # session had loaded (turns 1-8), at its end those plus turn 9's model calls.
    loaded = next(e for e in ninth if e["type"] == "session.loaded")
    await go_to(page, "#turn=9&seq=0", 9, 0)
    had = loaded["tokens"]["total_tokens"]
    assert int(await page.locator("#pf-session-tokens").inner_text()) == had
    assert await page.locator("#pf-session-status").inner_text() == "turn 9 running"
    spent = sum(e["total_tokens"] for e in ninth if e["type"] == "model.finished")
    await go_to(page, "#turn=9", 9, ninth[-1]["seq"])
    assert int(await page.locator("#pf-session-tokens").inner_text()) == had + spent
    assert await page.locator("#pf-session-status").inner_text() == "turn 9 finished"

    # What one event changed: the new room type, inside the JSON text ExploreStep keeps.
    write = next(e for e in ninth if e["type"] == "state.replaced" and e["field"] == "json")
    await go_to(page, f"#turn=9&seq={write['seq']}", 9, write["seq"])
    step = await diff_rows(page, "#pf-diff-step")
    assert step[ROOM] == (
        "changed", "suite", json.loads(write["value"])["roomType"][0])

    # Turn 3 against turn 7: marks at the end of each.
    await go_to(page, "#turn=3", 3, events[2][-1]["seq"])
    await page.locator("body").press("a")
    await page.wait_for_function("() => location.hash.includes('a=')")
    # A move whose hashchange comes after the page wrote its own position into the address
    # bar again (as it does a frame after a key) still moves: the event's URL is the one.
    await page.evaluate("""() => {
      const own = location.hash;
      location.hash = "#turn=7";
      history.replaceState(null, "", own);
    }""")
    await page.wait_for_selector(f'#pf-session[data-turn="7"][data-seq="{events[6][-1]["seq"]}"]')
    await page.locator("body").press("b")
    await page.wait_for_function(
        "() => document.querySelector('#pf-mark-b-label').textContent.startsWith('turn 7')")
    marks = await diff_rows(page, "#pf-diff-marks")

    def revision(turn: list[dict[str, Any]]) -> int:
        return int([e["revision"] for e in turn if e["type"] == "session.saved"][-1])

    def conversation(turn: list[dict[str, Any]]) -> int:
        return [len(e["messages"]) for e in turn if e["type"] == "model.started"][-1]

    def tokens(upto: int) -> int:
        return sum(e["total_tokens"] for turn in events[:upto] for e in turn
                   if e["type"] == "model.finished")

    assert marks["session.revision"] == (
        "changed", str(revision(events[2])), str(revision(events[6])))
    assert marks["session.message"] == ("changed", REFERENCE_TURNS[2], REFERENCE_TURNS[6])
    assert marks["session.conversation"] == (
        "changed", str(conversation(events[2])), str(conversation(events[6])))
    assert marks["session.tokens.total_tokens"] == ("changed", str(tokens(3)), str(tokens(7)))
    # No step field changed between them (the dates, budget and room are still only in the
    # conversation): the diff says so rather than inventing a change.
    assert not [place for place in marks if not place.startswith("session.")]
    await shot(page, "session_replay_diff_3_7")

    # Play from the start runs into the next turns by itself; space pauses it.
    await page.locator("body").press("Home")
    await page.wait_for_selector('#pf-session[data-turn="1"][data-seq="0"]')
    await page.select_option("#pf-speed", "30")
    await page.click("#pf-play")
    await page.wait_for_function(
        "() => Number(document.querySelector('#pf-session').dataset.turn) >= 2")
    await page.locator("body").press(" ")
    assert await page.locator("#pf-play").inner_text() == "▶ Play"
    # The last step's frame is drawn before the position is read.
    await page.evaluate(FRAME)
    turn = int(str(await page.get_attribute("#pf-session", "data-turn")))
    seq = int(str(await page.get_attribute("#pf-session", "data-seq")))
    # The next event may be the first of the next turn (a short turn can be paused on its end).
    after = (turn, seq + 1) if seq + 1 < len(events[turn - 1]) else (turn + 1, 0)
    await page.locator("body").press(".")
    await page.wait_for_selector(
        f'#pf-session[data-turn="{after[0]}"][data-seq="{after[1]}"]')

    # "?" lists the shortcuts; "/" focuses find.
    await page.locator("body").press("?")
    await page.wait_for_selector("#pf-keys[open]")
    keys = await page.locator("#pf-keys .pf-key-row").evaluate_all(
        "rows => rows.map(r => r.dataset.keys)")
    assert {"?", "[", "]", "Home", "End", "/", ",", "."} <= set(" ".join(keys).split(" "))
    await shot(page, "session_replay_keys")
    await page.keyboard.press("Escape")
    await page.locator("body").press("/")
    assert await page.evaluate("document.activeElement.id") == "pf-find"


async def test_a_saved_nested_run_scrubbed_across_a_join_shows_the_write_only_after_it(
    page: Any,
) -> None:
    run_id = await start_run(page, "ResearchFlow", "research tide pools")
    await run_ended(page, timeout=60_000)
    events = await stored_events(page, run_id)
    # The planner's (path 0) own barrier: its finders' writes reach its view at that join.
    fork = next(e for e in events if e["type"] == "barrier.forked" and e["path"] == "0")
    join = next(e for e in events
                if e["type"] == "join.published" and e["barrier"] == fork["barrier"])
    news = next(e for e in events if e["type"] == "state.contributed" and e["path"] == "0.1"
                and e["field"] == "findings")
    written = news["value"]  # the contribution itself (the fold reduces it into the view)
    assert news["seq"] < join["seq"]

    # A saved run opened again (a fresh page load replays it from the stored events; from
    # the same page a new hash alone would not load it again).
    await page.goto("about:blank")
    await page.goto(f"/runs/{run_id}/#inv=0&seq={join['seq'] - 1}")
    await page.wait_for_selector('#pf-inspector[data-path="0"]')
    await page.wait_for_function("s => document.querySelector('#pf-last-seq').textContent === s",
                                 arg=str(join["seq"] - 1))
    before = await page.locator("#pf-inspector .pf-visible-state").inner_text()
    assert written not in before
    # The header says where the scrubber is, not how the run ended.
    assert int(await page.locator("#pf-event-count").inner_text()) == join["seq"]
    await shot(page, "research_before_join")
    await page.locator("body").press(".")
    await page.wait_for_function("s => document.querySelector('#pf-last-seq').textContent === s",
                                 arg=str(join["seq"]))
    after = await page.locator("#pf-inspector .pf-visible-state").inner_text()
    assert written in after
    # The archive finder (its sibling, path 1) wrote to the same channel: in the
    # turn's canonical state only after the root join.
    root_join = next(e for e in events if e["type"] == "join.published" and e["path"] == "")
    await page.goto(f"/runs/{run_id}/#seq={root_join['seq'] - 1}")
    await page.wait_for_selector('#pf-inspector[data-path=""]')
    await page.wait_for_function("s => document.querySelector('#pf-last-seq').textContent === s",
                                 arg=str(root_join["seq"] - 1))
    assert "archive" not in await page.locator("#pf-inspector .pf-visible-state").inner_text()
    await page.locator("body").press("End")
    await page.wait_for_function(
        "() => !document.querySelector('#pf-run').classList.contains('pf-replaying')")
    assert "archive" in await page.locator("#pf-inspector .pf-visible-state").inner_text()
    await shot(page, "research_after_join")

    # The same run on its session's replay: "n" jumps fork by fork, "p" back.
    session = events[0]["session_id"]
    forks = [e["seq"] for e in events if e["type"] == "barrier.forked"]
    await page.goto(f"/sessions/{session}/#turn=1&seq=0")
    await page.wait_for_selector('#pf-session[data-loaded="1"][data-seq="0"]')
    await page.select_option("#pf-mark-kind", "fork")
    await page.locator("body").press("n")
    await page.wait_for_selector(f'#pf-session[data-seq="{forks[0]}"]')
    assert await page.locator(".pf-barrier").count() == 1
    await page.locator("body").press("n")
    await page.wait_for_selector(f'#pf-session[data-seq="{forks[1]}"]')
    assert await page.locator(".pf-barrier").count() == 2
    await page.select_option("#pf-mark-kind", "join")
    await page.locator("body").press("n")
    joins = [e["seq"] for e in events if e["type"] == "join.published"]
    await page.wait_for_selector(f'#pf-session[data-seq="{joins[0]}"]')
    assert "turn=1&seq=" in page.url
    await shot(page, "research_session_at_join")


async def test_a_session_page_at_its_end_follows_the_session_s_next_turns(page: Any) -> None:
    first = await page.evaluate(POST_TURN, [REFERENCE_TURNS[0], None, CURRENT_DATE])
    session = first["session"]
    await page.goto(f"/sessions/{session}/")
    await page.wait_for_selector('#pf-session[data-loaded="1"]')
    assert await page.locator(".pf-run-row").count() == 1
    # Another client of the same login takes the next turn (the browser context's own
    # HTTP client: no second page); the page, at its end, brings it in by itself.
    csrf = next(c["value"] for c in await page.context.cookies() if c["name"] == "csrftoken")
    second = await page.context.request.post("/ai/run", headers={"X-CSRFToken": csrf},
                                             data={"flowName": "HotelFlow",
                                                   "message": REFERENCE_TURNS[1],
                                                   "session": session,
                                                   "config": {"current_date": CURRENT_DATE}})
    assert second.status == 200 and second.headers["chat-session-id"] == session
    await page.wait_for_function(
        "() => document.querySelectorAll('.pf-run-row').length === 2"
        " && document.querySelector('#pf-session').dataset.loaded === '1'", timeout=30_000)
    run_ids = await page.eval_on_selector_all(".pf-run-row",
                                              "rows => rows.map(r => r.dataset.runId)")
    events = await stored_events(page, run_ids[1])
    # However far the turn had come when the page reloaded, it ends with all of it.
    await page.wait_for_function(
        "n => document.querySelector('#pf-session-events').textContent === `${n} of ${n}`",
        arg=len(events), timeout=30_000)
    assert await page.get_attribute("#pf-session", "data-turn") == "2"


# The page's own loader and fold (the modules it preloads), run over a stored run event by
# event: the run model after each event, as canonical JSON (maps and sets as sorted
# entries), and the run page's visible state of every invocation at that position.
FOLDS = """async id => {
  const href = name => document.querySelector(`link[rel=modulepreload][href*="/js/${name}."]`).href;
  const { streamStoredEvents } = await import(href("api"));
  const { applyEvent, createRun, viewAt } = await import(href("fold"));
  const events = [];
  await streamStoredEvents(id, -1, batch => { events.push(...batch); });
  const canonical = (_, v) => v instanceof Map ? [...v.entries()].sort()
    : v instanceof Set ? [...v].sort() : v;
  const run = createRun();
  const positions = [];
  for (const event of events) {
    applyEvent(run, event);
    const views = [...run.invocations.keys()].sort().map(p => [p, viewAt(run, p).state]);
    positions.push(JSON.stringify([run, views], canonical));
  }
  return positions;
}"""


async def test_a_run_exported_and_imported_into_an_empty_database_folds_the_same_everywhere(
    page: Any, browser: Any, tmp_path: Any,
) -> None:
    run_id = await start_run(page, "ResearchFlow", "research the tides")
    await run_ended(page, timeout=60_000)
    async with page.expect_download() as waiting:
        await page.click("#pf-export-run")
    exported = tmp_path / "run.jsonl"
    await (await waiting.value).save_as(str(exported))
    original = await page.evaluate(FOLDS, run_id)

    with dashboard() as (other, password):  # its own data folder: an empty database
        async with logged_in_page(other.base_url, password, browser) as fresh:
            await fresh.goto("/")
            await fresh.set_input_files("#pf-import-file", str(exported))
            await fresh.click("#pf-import-submit")
            done = fresh.locator("#pf-import-result[data-state=ok]")
            await done.wait_for()
            await done.locator("a").click()  # the imported run's page: the same id
            await run_ended(fresh)
            assert fresh.url.rstrip("/").endswith(run_id)
            imported = await fresh.evaluate(FOLDS, run_id)
            assert await fresh.locator(".pf-branch").count() == \
                await _branch_rows(page, run_id)
            await shot(fresh, "imported_run")
    assert len(imported) == len(original) > 20
    for position, (left, right) in enumerate(zip(original, imported, strict=True)):
        assert left == right, f"the folds differ after event {position}"


async def _branch_rows(page: Any, run_id: str) -> int:
    await page.goto(f"/runs/{run_id}/")
    await run_ended(page)
    return int(await page.locator(".pf-branch").count())
