// The runs list's filters and order, applied to live summaries as the server applies them.
import assert from "node:assert/strict";
import { test } from "node:test";

import { DEFAULT_SORT, filtersFrom, matches, queryOf, sortRuns } from "../../static/picoflow_web/js/runs_filter.js";

const run = (id, fields = {}) => ({
  id, flow: "HotelFlow", status: "finished", message: "book a room", session_id: "sess-abc-1",
  has_conflicts: false, event_count: 10, branch_count: 0, reply: null,
  started_at: "2026-11-30T09:00:00+00:00", finished_at: "2026-11-30T09:00:30+00:00", ...fields,
});

test("filters round-trip through the query string, defaults left out", () => {
  const f = filtersFrom(new URLSearchParams("q=tide&sort=-events&session=sess&since=2026-11-30T09%3A05%3A00.000Z"));
  assert.equal(f.q, "tide");
  assert.equal(f.sort, "-events");
  assert.equal(queryOf(f), "session=sess&q=tide&since=2026-11-30T09%3A05%3A00.000Z&sort=-events");
  assert.equal(queryOf(filtersFrom(new URLSearchParams(""))), "");
  assert.equal(filtersFrom(new URLSearchParams("sort=colour")).sort, DEFAULT_SORT);
});

test("a live summary passes the filters the server would apply", () => {
  const f = filtersFrom(new URLSearchParams("q=SEAVIEW&session=sess-abc"));
  assert.ok(matches(run("a", { reply: { message: "Booked the Seaview" } }), f));
  assert.ok(!matches(run("b"), f));  // no match in message, flow or reply
  assert.ok(!matches(run("c", { session_id: "other", reply: { message: "seaview" } }), f));
  const range = filtersFrom(new URLSearchParams("since=2026-11-30T09:05:00Z&until=2026-11-30T09:15:00Z"));
  assert.ok(matches(run("d", { started_at: "2026-11-30T09:10:00+00:00" }), range));
  assert.ok(!matches(run("e"), range));
  assert.ok(!matches(run("f", { started_at: null }), range));
});

test("runs sort by any column both ways; unknown durations last either way", () => {
  const runs = [
    run("r1", { event_count: 50, flow: "HotelFlow" }),
    run("r2", { event_count: 400, flow: "ResearchFlow", started_at: "2026-11-30T09:10:00+00:00", finished_at: "2026-11-30T09:10:05+00:00" }),
    run("r3", { event_count: 7, flow: "FanOutFlow", started_at: "2026-11-30T09:20:00+00:00", finished_at: null }),
  ];
  const ids = (sort) => sortRuns(runs, sort).map((r) => r.id);
  assert.deepEqual(ids("-started_at"), ["r3", "r2", "r1"]);
  assert.deepEqual(ids("started_at"), ["r1", "r2", "r3"]);
  assert.deepEqual(ids("-events"), ["r2", "r1", "r3"]);
  assert.deepEqual(ids("flow"), ["r3", "r1", "r2"]);
  assert.deepEqual(ids("duration"), ["r2", "r1", "r3"]);
  assert.deepEqual(ids("-duration"), ["r1", "r2", "r3"]);
  // Ties break by id, greater first, as the server's order does.
  assert.deepEqual(sortRuns([run("a"), run("b")], "status").map((r) => r.id), ["b", "a"]);
});

test("a run's duration is the one its events tell, as its page shows it", async () => {
  const { durationOf } = await import("../../static/picoflow_web/js/runs_filter.js");
  // Queued for 8 s, then a 2.25 s turn: the list says 2.25 s, like the run page.
  assert.equal(durationOf(run("q", { started_at: "2026-11-30T09:00:00+00:00", finished_at: "2026-11-30T09:00:10.25+00:00", duration: 2.25 })), 2.25);
  assert.equal(durationOf(run("n", { duration: null })), null);
  assert.equal(durationOf(run("old")), 30);  // summaries from before: start to finish
});
