// Layout: tree rows in request order, capped sibling groups, windowing, lanes and ticks.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvent, createRun, fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import {
  GROUP_LIMIT, ROW_HEIGHT, formatSeconds, joinWaits, lane, revealPath, scrollToRow, ticks,
  timeBounds, timeScale, treeRows, windowRange,
} from "../../static/picoflow_web/js/layout.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const golden = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()];

const describe = (row) => {
  switch (row.kind) {
    case "root": return `root ${row.flow}`;
    case "barrier": return `${"  ".repeat(row.depth)}barrier ${row.id} ${row.barrier.policy} ${row.barrier.outcome} ${row.barrier.counts.fulfilled}/${row.barrier.counts.rejected}`;
    case "branch": return `${"  ".repeat(row.depth)}branch ${row.path} ${row.inv.key} ${row.inv.step} ${row.inv.status}`;
    default: return `${"  ".repeat(row.depth)}more ${row.id} +${row.hidden}`;
  }
};

/** A run with one barrier of `n` branches; the first `done` fulfilled, every 7th rejected. */
function wideRun(n, done = n) {
  const run = createRun();
  let seq = 0;
  const add = (type, fields, path = "") => applyEvent(run, { seq: seq++, offset: seq / 1000, path, type, run_id: "w", session_id: "s", ...fields });
  add("turn.started", { flow: "Wide", message: "go" });
  add("session.loaded", { steps: {}, current_step: "Top", tokens: {} });
  add("barrier.forked", {
    barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    requests: Array.from({ length: n }, (_, i) => ({ index: i, path: String(i), step: "Item", key: `item-${i}`, params: {} })),
  });
  for (let i = 0; i < n; i += 1) add("branch.started", { barrier: "b0", index: i, key: `item-${i}`, step: "Item" }, String(i));
  for (let i = 0; i < done; i += 1) {
    if (i % 7 === 3) add("branch.rejected", { barrier: "b0", index: i, key: `item-${i}`, error: { code: "x" }, cancelled: false }, String(i));
    else add("branch.fulfilled", { barrier: "b0", index: i, key: `item-${i}`, output: i }, String(i));
  }
  return run;
}

test("nested fan-out rows are in request order with nested barriers under their caller", () => {
  const [events] = golden("nested_fanout");
  const rows = treeRows(fold(events));
  assert.deepStrictEqual(rows.map(describe), [
    "root ResearchFlow",
    "  barrier b0 retain-successes published 2/0",
    "    branch 0 Planner Planner fulfilled",
    "      barrier 0/b0 retain-successes published 2/0",
    "        branch 0.0 papers Finder fulfilled",
    "        branch 0.1 news Finder fulfilled",
    "    branch 1 archive Finder fulfilled",
  ]);
  // Keys are unique and stable (the DOM reuses nodes by them).
  assert.equal(new Set(rows.map((r) => r.rowKey)).size, rows.length);
});

test("the live tree has every branch from its fork on, queued before it starts", () => {
  const [events] = golden("nested_fanout");
  const fork = events.find((e) => e.type === "barrier.forked");
  const rows = treeRows(fold(events, fork.seq));
  assert.deepStrictEqual(rows.map(describe), [
    "root ResearchFlow",
    "  barrier b0 retain-successes open 0/0",
    "    branch 0 Planner Planner queued",
    "    branch 1 archive Finder queued",
  ]);
});

test("collapsing a barrier hides its branches and everything under them", () => {
  const [events] = golden("nested_fanout");
  const run = fold(events);
  assert.deepStrictEqual(treeRows(run, { collapsed: new Set(["b0"]) }).map((r) => r.rowKey), ["root", "b:b0"]);
  assert.deepStrictEqual(treeRows(run, { collapsed: new Set(["0/b0"]) }).map((r) => r.rowKey), ["root", "b:b0", "p:0", "b:0/b0", "p:1"]);
});

test("a wide group shows its first branches and one 'more' row with the rest's counts", () => {
  const run = wideRun(1000, 900);
  const rows = treeRows(run);
  assert.equal(rows.length, 2 + GROUP_LIMIT + 1);
  const more = rows.at(-1);
  assert.equal(more.kind, "more");
  assert.equal(more.hidden, 1000 - GROUP_LIMIT);
  const expected = { queued: 0, running: 0, fulfilled: 0, rejected: 0 };
  for (let i = GROUP_LIMIT; i < 1000; i += 1) {
    expected[i >= 900 ? "running" : i % 7 === 3 ? "rejected" : "fulfilled"] += 1;
  }
  assert.deepStrictEqual(more.counts, expected);
  // Showing more extends the group; the counts follow.
  const wider = treeRows(run, { shown: new Map([["b0", 960]]) });
  assert.equal(wider.at(-1).hidden, 40);
  assert.deepStrictEqual(wider.at(-1).counts, { queued: 0, running: 40, fulfilled: 0, rejected: 0 });
  assert.equal(treeRows(run, { shown: new Map([["b0", 5000]]) }).at(-1).kind, "branch");
});

test("the barrier row carries fulfilled and rejected counts", () => {
  const run = wideRun(70);
  const barrier = treeRows(run)[1];
  assert.equal(barrier.kind, "barrier");
  assert.deepStrictEqual(barrier.barrier.counts, { queued: 0, running: 0, fulfilled: 60, rejected: 10 });
});

test("revealing a hidden branch expands its group just far enough", () => {
  const run = wideRun(500);
  const options = revealPath(run, { collapsed: new Set(["b0"]) }, "321");
  assert.equal(options.collapsed.has("b0"), false);
  const rows = treeRows(run, options);
  const index = rows.findIndex((r) => r.kind === "branch" && r.path === "321");
  assert.equal(index, 2 + 321);
  assert.equal(rows.at(-1).kind, "more");
  // Already visible: nothing changes.
  assert.deepStrictEqual([...revealPath(run, {}, "3").shown], []);
});

test("filtering keeps matches and their ancestors", () => {
  const [events] = golden("nested_fanout");
  const run = fold(events);
  assert.deepStrictEqual(treeRows(run, { query: "news" }).map((r) => r.rowKey), ["root", "b:b0", "p:0", "b:0/b0", "p:0.1"]);
  assert.deepStrictEqual(treeRows(run, { query: "nothing-like-it" }).map((r) => r.rowKey), ["root"]);
  const wide = wideRun(100);
  const rejected = treeRows(wide, { status: "rejected" });
  assert.equal(rejected.filter((r) => r.kind === "branch").length, 14);
  assert.ok(rejected.filter((r) => r.kind === "branch").every((r) => r.inv.status === "rejected"));
});

test("10,000 branches: rows stay cheap and only a window is materialised", () => {
  const run = wideRun(10_000);
  let t = performance.now();
  const capped = treeRows(run);
  const cappedMs = performance.now() - t;
  assert.equal(capped.length, 2 + GROUP_LIMIT + 1);
  t = performance.now();
  const all = treeRows(run, { shown: new Map([["b0", Infinity]]) });
  const allMs = performance.now() - t;
  assert.equal(all.length, 2 + 10_000);
  const view = windowRange(all.length, 5000 * ROW_HEIGHT, 600);
  assert.ok(view.end - view.start < 60, `window of ${view.end - view.start} rows`);
  assert.equal(view.height, all.length * ROW_HEIGHT);
  // No timing assertion (machines differ); reported for the curious.
  console.log(`# 10k branches: capped rows ${cappedMs.toFixed(2)} ms, all rows ${allMs.toFixed(2)} ms`);
});

test("windowRange clamps and overscans", () => {
  assert.deepStrictEqual(windowRange(0, 0, 500), { start: 0, end: 0, height: 0 });
  assert.deepStrictEqual(windowRange(100, 0, 10 * ROW_HEIGHT, ROW_HEIGHT, 2), { start: 0, end: 13, height: 100 * ROW_HEIGHT });
  assert.deepStrictEqual(windowRange(100, 50 * ROW_HEIGHT, 10 * ROW_HEIGHT, ROW_HEIGHT, 2), { start: 48, end: 63, height: 100 * ROW_HEIGHT });
  assert.deepStrictEqual(windowRange(100, 1e9, 500, ROW_HEIGHT, 2).end, 100);
  assert.equal(scrollToRow(10, 0, 5 * ROW_HEIGHT), 6 * ROW_HEIGHT);
  assert.equal(scrollToRow(2, 0, 5 * ROW_HEIGHT), 0);
  assert.equal(scrollToRow(1, 4 * ROW_HEIGHT, 5 * ROW_HEIGHT), ROW_HEIGHT);
});

test("lanes: batched stages wait at the join for the slowest sibling", () => {
  const [, batched] = golden("ab_timing");
  const run = fold(batched);
  const bounds = timeBounds(run);
  const rows = treeRows(run);
  const byKey = new Map(rows.filter((r) => r.kind === "branch").map((r) => [r.inv.key, r]));
  const a1 = lane(byKey.get("A1"), run, bounds, null);
  const b1 = lane(byKey.get("B1"), run, bounds, null);
  const kinds = (l) => l.segments.map((s) => s.kind);
  assert.ok(kinds(a1).includes("waiting"), `A1 idles until B1 is done: ${kinds(a1)}`);
  const running = (l) => l.segments.find((s) => s.kind === "running");
  const waiting = a1.segments.find((s) => s.kind === "waiting");
  assert.ok(Math.abs(waiting.t1 - running(b1).t1) < 0.05, "A1 waits until about when B1 finishes");
  assert.ok(running(a1).x1 < running(b1).x1);
  // Every x is inside the axis.
  for (const row of rows) {
    for (const s of lane(row, run, bounds, null).segments) assert.ok(s.x0 >= 0 && s.x1 <= 1 && s.x0 <= s.x1);
  }
  const waits = joinWaits(run, byKey.get("A1").inv.barrier);
  assert.equal(waits.straggler.key, "B1");
  assert.ok(waits.branches.find((b) => b.key === "A1").idle > 0);
});

test("lanes: running branches grow to now; queued ones start at the fork", () => {
  const run = wideRun(3, 1);
  const rows = treeRows(run);
  const now = run.endOffset + 2;
  const bounds = timeBounds(run, now);
  assert.equal(bounds.end, now);
  const runningLane = lane(rows[3], run, bounds, now);
  const bar = runningLane.segments.find((s) => s.kind === "running");
  assert.equal(bar.x1, 1, "a running branch reaches now");
  const finished = lane(rows[2], run, bounds, now);
  assert.ok(finished.segments.find((s) => s.kind === "running").x1 < 1);
  assert.equal(finished.segments.find((s) => s.kind === "waiting").x1, 1, "it waits at the open join");
  // Not live (replay of a stopped fold): nothing grows past the last event.
  const still = lane(rows[3], run, timeBounds(run), null);
  assert.equal(still.segments.find((s) => s.kind === "running").t1, run.endOffset);
});

test("ticks are round and labelled", () => {
  assert.deepStrictEqual(ticks({ start: 0, end: 1 }, 5).map((t) => t.label), ["0s", "200ms", "400ms", "600ms", "800ms", "1s"]);
  assert.deepStrictEqual(ticks({ start: 0, end: 10 }, 4).map((t) => t.label), ["0s", "5s", "10s"]);
  const x = timeScale({ start: 0, end: 4 });
  assert.equal(x(1), 0.25);
  assert.equal(x(9), 1);
  assert.equal(x(-1), 0);
  assert.equal(formatSeconds(0.0421), "42ms");
  assert.equal(formatSeconds(1.234), "1.23s");
  assert.equal(formatSeconds(125), "2m 05s");
});
