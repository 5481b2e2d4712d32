"""The run view tells the same story live and in replay, on the five demos of a join that
does not publish everything — a replacement conflict (ConflictFlow), an invalid shared
mutation (ExpenseFlow), a reducer failure (BusFlow), an atomic batch with a failure
(AtomicFlow) and a cancelled barrier (CancelFlow) — in a real browser (Debian's chromium).

Each run is started from the runs list and followed live; once it finished, the marks the
page draws from its events (branch and barrier publication, discard reasons, the conflict
writers, the conflict card, the cancellation cascade) are read from the DOM, checked
against the run's stored events, and read again from a fresh load of the run page (a
replay of the stored events) and from the session page at the end of the turn: all three
must agree. In replay, on the run page and on the session page's scrubber, one event
before the join no branch of it is marked by the join yet; at the join the marks are back.
Screenshots: ``test-artifacts/replay_<demo>.png`` (the run page in replay, at the join).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browsing import (
    FRAME,
    dashboard,
    run_ended,
    shot,
    start_run_watched,
    stored_events,
)
from tests.livedaphne import LiveDaphne

pytest.importorskip("playwright.async_api", reason="pip install playwright")

pytestmark = [pytest.mark.browser, pytest.mark.anyio]

DEMOS = [
    pytest.param("ConflictFlow", "Plan the team offsite", "conflict", id="conflict"),
    pytest.param("ExpenseFlow", "Audit the report", "mutation", id="mutation"),
    pytest.param("BusFlow", "Book the bus", "reducer", id="reducer"),
    pytest.param("AtomicFlow", "book the trip", None, id="atomic"),
    pytest.param("CancelFlow", "Watch prices until the deadline", None, id="cancel"),
]
"""Flow, message, and the kind of conflict card its join gets (None: it gets none)."""

BARRIER = "b0"
"""Each demo forks one barrier."""

JOINS = ("join.published", "join.invalidated")
"""The events that end a barrier: its join published (some of) it, or refused."""

INSPECTOR = """() => {
  const inspector = document.querySelector("#pf-inspector");
  const all = sel => [...inspector.querySelectorAll(sel)];
  return {
    path: inspector.dataset.path ?? null, barrier: inspector.dataset.barrier ?? null,
    badges: all(".pf-publication-badge").map(b => [b.dataset.publication, b.textContent.trim()]),
    discards: all(".pf-discard-reason").map(r => [r.dataset.discard ?? null, r.textContent.trim()]),
    published: all(".pf-published-yes, .pf-badge-published").map(e => e.textContent.trim()),
    critical: all(".pf-critical-sentence").map(e => e.textContent.trim()),
  };
}"""
"""What the inspector says of the selection's publication: its publication badges, the
discard reasons it gives, its green marks, and (a barrier's) the critical path."""

FACTS = """() => {
  const INSPECTOR = """ + INSPECTOR + """;
  const all = (sel, el = document) => [...el.querySelectorAll(sel)];
  const text = (el, sel) => {
    const found = el.querySelector(sel);
    return found ? found.textContent.trim() : null;
  };
  const branches = {};
  for (const row of all(".pf-branch[data-path]")) {
    const path = row.dataset.path;
    const lane = document.querySelector(`.pf-lane[data-path="${CSS.escape(path)}"]`);
    branches[path] = {
      status: row.dataset.status ?? null,
      publication: row.dataset.publication ?? null,
      discard: row.dataset.discard ?? null,
      stop: row.dataset.stop ?? null,
      dot: [...(row.querySelector(".pf-dot")?.classList ?? [])].sort().join(" "),
      chips: all(".pf-chip", row).map(c => c.textContent.trim()),
      published_marks: all(".pf-badge-published, .pf-count-published", row).length,
      writer: row.classList.contains("pf-conflict-writer"),
      lane: lane === null ? null : {
        publication: lane.dataset.publication ?? null,
        writer: lane.classList.contains("pf-conflict-writer"),
        discard_marks: all(".pf-mark-discard", lane).length,
        join_marks: all(".pf-mark-join", lane).length,
        segments: [...new Set(all(".pf-seg", lane).map(g => g.className))].sort(),
      },
    };
  }
  const barriers = {};
  for (const row of all(".pf-barrier[data-barrier]")) {
    barriers[row.dataset.barrier] = {
      publication: row.dataset.publication ?? null,
      discard: row.dataset.discard ?? null,
      badge: text(row, ".pf-join-badge"),
      badge_kind: [...(row.querySelector(".pf-join-badge")?.classList ?? [])].sort().join(" "),
      counts: all(".pf-count", row).map(c => c.className + " " + c.textContent.trim()),
      published_marks: all(".pf-badge-published, .pf-count-published", row).length,
    };
  }
  const cards = all("#pf-conflicts .pf-conflict[data-barrier]").map(card => ({
    barrier: card.dataset.barrier,
    kind: card.dataset.kind ?? null,
    field: text(card, ".pf-conflict-field"),
    step: text(card, ".pf-conflict-step"),
    reason: text(card, ".pf-conflict-reason dd"),
    fix: text(card, ".pf-conflict-fix dd"),
    writes: all(".pf-provenance .pf-conflict-row", card).length,
    // Each write at stake as the card tells it: value, fork-time base, kind, event link.
    rows: all(".pf-provenance .pf-conflict-row", card).map(r => r.textContent.trim()),
  }));
  const cascade = document.querySelector("#pf-inspector .pf-cascade");
  return {
    branches, barriers, cards, inspector: INSPECTOR(),
    header: document.querySelector("#pf-run-branches").textContent.trim(),
    cascade: cascade === null ? null : {
      sentence: text(cascade, ".pf-cascade-sentence"),
      rows: all(".pf-cascade-row", cascade).map(r => ({
        path: r.dataset.path ?? null, at: r.dataset.at ?? null, late: r.dataset.late ?? null,
        text: r.textContent.trim(),
      })),
    },
  };
}"""

AT_RUN_SEQ = "s => document.querySelector('#pf-last-seq').textContent === String(s)"
"""The run page is at event ``s`` (pinned there, or its last)."""

ROWS = """() => {
  const attributes = n => [...n.attributes].map(a => [a.name, a.value]).sort();
  const node = n => n.nodeType === Node.TEXT_NODE ? n.textContent : [
    n.tagName, attributes(n), [...n.childNodes].map(node)];
  return [...document.querySelectorAll(".pf-row:not([hidden])")].map(row => [
    attributes(row), node(row.querySelector(".pf-cell-tree")),
    attributes(row.querySelector(".pf-cell-lane"))]);
}"""
"""Every row shown: its attributes (in any order), its tree cell in full (elements,
attributes, texts) and its lane's attributes (the lane's segments are placed on the time
axis of what the page has read, which a fresh load need not share)."""



@pytest.fixture(scope="module")
def server() -> Iterator[tuple[LiveDaphne, str]]:
    with dashboard({"PICOFLOW_DEMO_LATENCY": "0.4"}) as found:
        yield found


async def select_barrier(page: Any) -> None:
    """Select the demo's barrier in the tree: its inspector opens and a conflict's writers
    are marked."""
    await page.click(f'.pf-barrier[data-barrier="{BARRIER}"] .pf-row-key')
    await page.wait_for_selector(f'#pf-inspector[data-barrier="{BARRIER}"]')


async def facts(page: Any) -> dict[str, Any]:
    """What the page draws from the events, as one comparable dict: per branch row its
    status, publication, discard reason, stop, dot, chips, green marks and conflict-writer
    mark, and its lane's (publication, writer mark, discard and join marks, segments); per
    barrier row its publication, badge and counts; the conflict cards; the header's branch
    line; what the inspector says of each branch's publication; and, with the barrier
    selected (which marks a conflict's writers), its inspector and cancellation cascade."""
    paths = await page.eval_on_selector_all(".pf-branch[data-path]",
                                            "rows => rows.map(r => r.dataset.path)")
    assert paths, "no branch row"
    branch_inspectors = {}
    for path in paths:
        await page.click(f'.pf-branch[data-path="{path}"] .pf-row-key')
        await page.wait_for_selector(f'#pf-inspector[data-path="{path}"]:not([data-barrier])')
        await page.evaluate(FRAME)
        branch_inspectors[path] = await page.evaluate(INSPECTOR)
    await select_barrier(page)
    await page.evaluate(FRAME)
    found: dict[str, Any] = await page.evaluate(FACTS)
    assert BARRIER in found["barriers"], found
    found["branch_inspectors"] = branch_inspectors
    return found


def marks(found: dict[str, Any]) -> dict[str, Any]:
    """The publication marks alone (what a join's event decides)."""
    return {
        "branches": {p: (b["publication"], b["discard"], b["published_marks"],
                         b["lane"]["publication"] if b["lane"] else None)
                     for p, b in found["branches"].items()},
        "barrier": {k: found["barriers"][BARRIER][k]
                    for k in ("publication", "discard", "badge", "published_marks")},
    }


def joined(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The barrier's join event (published or invalidated)."""
    found = [e for e in events if e["type"] in JOINS and e["barrier"] == BARRIER]
    assert len(found) == 1, found
    return found[0]


def expected_discards(events: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Path -> the discard reasons the page may draw for it, from the join's record: an
    invalidated join discards every branch; ``join.published`` lists the rest, an atomic
    reason by the policy, a plain "rejected" told apart by the branch's own events (late
    past the grace period, cancelled by the token, or its own failure)."""
    fork = next(e for e in events if e["type"] == "barrier.forked" and e["barrier"] == BARRIER)
    paths = {r["index"]: r["path"] for r in fork["requests"]}
    join = joined(events)
    if join["type"] == "join.invalidated":
        return {p: {"invalidated"} for p in paths.values()}
    late = {p for e in events if e["type"] == "cancel.grace_expired" and e["barrier"] == BARRIER
            for p in e["closed"]}
    cancelled = {e["path"] for e in events if e["type"] == "branch.rejected"
                 and e["barrier"] == BARRIER and e["path"] not in late
                 and e.get("cancelled")}
    out: dict[str, set[str]] = {}
    for d in join["discarded"]:
        path = paths[d["index"]]
        reason = str(d["reason"])
        if reason.startswith("atomic"):
            out[path] = {"atomic"}
        elif path in late:
            out[path] = {"late"}
        elif path in cancelled:
            out[path] = {"cancelled"}
        else:
            out[path] = {"rejected"}
    return out


def reached(events: list[dict[str, Any]]) -> set[str]:
    """The branches whose writes reached the canonical state: writers of the fields the
    join applied, or inputs of the reductions whose results it applied."""
    join = joined(events)
    if join["type"] != "join.published":
        return set()
    fields = {(f["step"], f["field"]) for f in join["fields"]}
    out = {f["writer"] for f in join["fields"] if f.get("writer")}
    out |= {i["path"] for e in events if e["type"] == "join.reduced" and e["barrier"] == BARRIER
            and (e["step"], e["field"]) in fields for i in e["inputs"]}
    discarded = set(expected_discards(events))
    return out - discarded


def check_against_events(found: dict[str, Any], events: list[dict[str, Any]],
                         card: str | None) -> None:
    """The publication marks say what the join's record says, no more."""
    discards = expected_discards(events)
    assert discards, "each demo's join discards some branch"
    for path, reasons in discards.items():
        row = found["branches"][path]
        assert row["publication"] == "discarded", (path, row)
        assert row["discard"] in reasons, (path, row["discard"], reasons)
        assert row["lane"]["publication"] == "discarded", (path, row)
        assert row["published_marks"] == 0, (path, row)
        said = found["branch_inspectors"][path]
        assert [d[0] for d in said["discards"]] == [row["discard"]], (path, said)
        assert said["badges"][0][0] == "discarded" and not said["published"], (path, said)
    for path, said in found["branch_inspectors"].items():
        if path not in reached(events):
            assert not said["published"], (path, said)
    published = {p for p, b in found["branches"].items() if b["publication"] == "published"}
    assert published == reached(events), (published, reached(events))
    join = joined(events)
    barrier = found["barriers"][BARRIER]
    applied = join["type"] == "join.published" and bool(join["fields"])
    if applied:
        assert barrier["publication"] == "published" and barrier["badge"] == "published"
    else:
        # Nothing reached its target: no green mark anywhere on the barrier or its branches.
        assert barrier["publication"] != "published", barrier
        assert barrier["published_marks"] == 0, barrier
        assert not published
        assert all(b["published_marks"] == 0 for b in found["branches"].values())
    if join["type"] == "join.invalidated":
        assert barrier["badge"] == "invalidated", barrier
    if card is None:
        assert found["cards"] == [], found["cards"]
    else:
        assert [c["kind"] for c in found["cards"]] == [card], found["cards"]
        provenance = {p["path"] for p in join["error"]["extra"]["provenance"]}
        writers = {p for p, b in found["branches"].items() if b["writer"]}
        lanes = {p for p, b in found["branches"].items() if b["lane"] and b["lane"]["writer"]}
        assert writers == lanes == provenance, (writers, lanes, provenance)
        assert found["cards"][0]["field"] and found["cards"][0]["reason"]


LIVE: dict[str, tuple[str, dict[str, Any]]] = {}
LIVE_ROWS: dict[str, list[Any]] = {}
"""The rows (``ROWS``) of the page that followed each flow's run live, at its end."""
"""Flow -> a run of it followed live and the facts drawn then, shared by this module's
tests so each demo runs once (a test run alone starts its own)."""


async def finished_live(page: Any, live: LiveDaphne, flow: str, message: str,
                        ) -> tuple[str, dict[str, Any]]:
    """A run of ``flow`` started from the runs list and followed live until it finished;
    its id and the facts the live page drew."""
    if flow not in LIVE:
        LIVE[flow] = await follow_live(page, live, flow, message)
    return LIVE[flow]


async def follow_live(page: Any, live_server: LiveDaphne, flow: str, message: str,
                      ) -> tuple[str, dict[str, Any]]:
    frames: list[tuple[str, str]] = []
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda frame: frames.append((ws.url, str(frame)))))
    # The page listens before the run's first event (a page a busy machine opened after the
    # join would have had the whole run from storage).
    run_id = await start_run_watched(page, live_server, flow, message)
    await run_ended(page, timeout=30_000)
    await page.wait_for_selector(
        f'.pf-barrier[data-barrier="{BARRIER}"]:not([data-publication="pending"])')
    await page.evaluate(FRAME)
    LIVE_ROWS[flow] = await page.evaluate(ROWS)
    # The page followed the run as it went: the join reached it over the run's socket,
    # as it happened (what came before it, from storage first, then live).
    live = [json.loads(text) for url, text in frames if f"/ws/runs/{run_id}/" in url]
    streamed = [e for m in live if m.get("type") == "events" for e in m["events"]]
    assert any(e["type"] in JOINS and e["barrier"] == BARRIER for e in streamed), \
        [e["type"] for e in streamed]
    await page.evaluate("() => { window.__followedLive = true; }")
    found = await facts(page)
    # The page that followed it, scrubbed back to just before the join and forward to its
    # end again (no reload): the join's marks go, then come back as they were.
    events = await stored_events(page, run_id)
    join = joined(events)
    fork = next(e for e in events if e["type"] == "barrier.forked" and e["barrier"] == BARRIER)
    # Its hashchange comes after the page wrote its own selection into the address bar again
    # (as it does a frame after any change): the link still moves it (the event's URL).
    await page.evaluate("""h => {
      const own = location.pathname + location.search + location.hash;
      location.hash = h;
      history.replaceState(null, "", own);
    }""", f"#barrier={BARRIER}&seq={join['seq'] - 1}")
    await page.wait_for_function(AT_RUN_SEQ, arg=join["seq"] - 1)
    unjoined(await facts(page), [r["path"] for r in fork["requests"]])
    await page.locator("body").press("End")
    await page.wait_for_function(
        "() => !document.querySelector('#pf-run').classList.contains('pf-replaying')")
    assert await facts(page) == found
    assert await page.evaluate("() => window.__followedLive === true")
    return run_id, found


async def replayed(page: Any, run_id: str, events: list[dict[str, Any]], hash_: str = "") -> None:
    """A fresh load of the run page, with every stored event (or up to the hash's seq)
    applied."""
    if hash_:  # from elsewhere: a new hash on the same page would not load it again
        await page.goto("about:blank")
    await page.goto(f"/runs/{run_id}/{hash_}")
    assert await page.evaluate("() => window.__followedLive === undefined"), "not reloaded"
    await page.wait_for_selector("#pf-run[data-status=finished]")
    await page.wait_for_function(
        "n => document.querySelector('#pf-seq').max === String(n)", arg=events[-1]["seq"])


@pytest.mark.parametrize(("flow", "message", "card"), DEMOS)
async def test_the_demo_s_marks_are_the_same_live_on_reload_and_in_the_session_replay(
    server: tuple[LiveDaphne, str], page: Any, flow: str, message: str, card: str | None,
) -> None:
    run_id, live = await finished_live(page, server[0], flow, message)
    events = await stored_events(page, run_id)
    assert events[-1]["type"] == "turn.finished"
    check_against_events(live, events, card)
    if flow == "CancelFlow":
        assert live["cascade"] is not None and len(live["cascade"]["rows"]) == 4, live["cascade"]
        late = {r["path"] for r in live["cascade"]["rows"] if r["late"] == "1"}
        assert late == {p for p, r in expected_discards(events).items() if r == {"late"}}
    else:
        assert live["cascade"] is None

    # The run page loaded again: a replay of its stored events.
    await replayed(page, run_id, events)
    assert await page.locator("#pf-run").evaluate(
        "r => !r.classList.contains('pf-replaying')"), "a finished run opens at its end"
    # Its rows drawn at once are those the live page updated in place as its branches
    # started, ended and were joined.
    await page.evaluate(FRAME)
    assert await page.evaluate(ROWS) == LIVE_ROWS[flow]
    again = await facts(page)
    assert again == live

    # The session page, at the end of the turn: the run view's own DOM, the same facts.
    session = events[0]["session_id"]
    assert await page.get_attribute("#pf-run-session", "href") == f"/sessions/{session}/"
    await page.goto(f"/sessions/{session}/#turn=1")
    await page.wait_for_selector(
        f'#pf-session[data-loaded="1"][data-turn="1"][data-seq="{events[-1]["seq"]}"]')
    assert await facts(page) == live


@pytest.mark.parametrize(("flow", "message", "card"), DEMOS)
async def test_in_replay_the_join_s_marks_appear_only_from_the_join_event_on(
    server: tuple[LiveDaphne, str], page: Any, flow: str, message: str, card: str | None,
) -> None:
    run_id, live = await finished_live(page, server[0], flow, message)
    events = await stored_events(page, run_id)
    join = joined(events)
    fork = next(e for e in events if e["type"] == "barrier.forked" and e["barrier"] == BARRIER)
    paths = [r["path"] for r in fork["requests"]]

    # One event before the join: every branch has ended, none is marked by the join yet.
    before_join = join["seq"] - 1
    await replayed(page, run_id, events, f"#barrier={BARRIER}&seq={before_join}")
    await page.wait_for_function(AT_RUN_SEQ, arg=before_join)
    await page.wait_for_selector("#pf-run.pf-replaying")
    # The link's barrier is revealed in the frame whose events first hold it, and the tree
    # and inspector are drawn only in the next: once the inspector shows the barrier.
    await page.wait_for_selector(f'#pf-inspector[data-barrier="{BARRIER}"]')
    unjoined(await facts(page), paths)
    assert await page.locator("#pf-last-seq").inner_text() == str(before_join)

    # One step on, the join: its marks are back, as at the end of the run.
    await page.locator("body").press(".")
    await page.wait_for_function(AT_RUN_SEQ, arg=join["seq"])
    stepped = await page.evaluate(ROWS)
    at_join = await facts(page)
    assert marks(at_join) == marks(live)
    assert at_join["branch_inspectors"] == live["branch_inspectors"]
    check_against_events(at_join, events, card)
    await shot(page, f"replay_{flow.removesuffix('Flow').lower()}")
    # The rows the join changed were updated in place; drawn afresh at the join, they are
    # the same, element for element.
    await replayed(page, run_id, events, f"#barrier={BARRIER}&seq={join['seq']}")
    await page.wait_for_function(AT_RUN_SEQ, arg=join["seq"])
    await page.wait_for_selector(f'#pf-inspector[data-barrier="{BARRIER}"]')
    fresh = await page.evaluate(ROWS)
    assert fresh == stepped, json.dumps(
        [(a, b) for a, b in zip(fresh, stepped, strict=False) if a != b][:2])

    # The same on the session page's scrubber.
    session = events[0]["session_id"]
    await page.goto(f"/sessions/{session}/#turn=1&seq={before_join}")
    await page.wait_for_selector(
        f'#pf-session[data-loaded="1"][data-turn="1"][data-seq="{before_join}"]')
    unjoined(await facts(page), paths)
    assert await page.get_attribute("#pf-session", "data-seq") == str(before_join)
    await page.locator("body").press(".")
    await page.wait_for_selector(f'#pf-session[data-turn="1"][data-seq="{join["seq"]}"]')
    at_join = await facts(page)
    assert marks(at_join) == marks(live)
    assert at_join["branch_inspectors"] == live["branch_inspectors"]


def unjoined(before: dict[str, Any], paths: list[str]) -> None:
    """Facts of a position before the join: every branch of the barrier has ended, and
    none is marked published or discarded, in the tree, its lane or the inspector."""
    assert sorted(before["branches"]) == sorted(paths)
    for path in paths:
        row = before["branches"][path]
        assert row["status"] in ("fulfilled", "rejected"), (path, row)
        assert row["publication"] == "pending", (path, row)
        assert row["discard"] is None and row["published_marks"] == 0, (path, row)
        assert row["lane"]["publication"] == "pending", (path, row)
        assert row["lane"]["discard_marks"] == 0 and row["lane"]["join_marks"] == 0, (path, row)
        assert not any(c.startswith("discarded") for c in row["chips"]), (path, row)
        said = before["branch_inspectors"][path]
        assert said["badges"] and {b[0] for b in said["badges"]} == {"pending"}, (path, said)
        assert said["discards"] == [] and said["published"] == [], (path, said)
    barrier = before["barriers"][BARRIER]
    assert barrier["publication"] == "pending" and barrier["badge"] == "open", barrier
    assert barrier["published_marks"] == 0, barrier
    assert not any("discarded" in c for c in barrier["counts"]), barrier
    assert "discarded" not in before["header"], before["header"]
    said = before["inspector"]
    assert said["barrier"] == BARRIER and said["discards"] == [] and said["published"] == [], said
