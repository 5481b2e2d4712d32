// Grace-end, deadline and timeout markers on the time axis: each one where an event puts
// it, with words that say what it is, and none where the events say nothing.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { timeBounds } from "../../static/picoflow_web/js/layout.js";
import { cancelTitle, timeMarkers } from "../../static/picoflow_web/js/time_marks.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const runs = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, name), "utf8"))).values()];

test("the cancellation golden has one grace-end marker, at its cancel.grace_expired", () => {
  const [list] = runs("cancellation.jsonl");
  const run = fold(list);
  const grace = list.find((e) => e.type === "cancel.grace_expired");
  const asked = list.find((e) => e.type === "cancel.requested");
  const marks = timeMarkers(run, timeBounds(run));
  assert.deepStrictEqual(marks.map((m) => [m.kind, m.barrier, m.t, m.seq]), [["grace", "b0", grace.offset, grace.seq]]);
  const ms = Math.round((grace.offset - asked.offset) * 1000);
  assert.equal(marks[0].title, `grace ended for PriceWatch › barrier 0 (b0) ${ms}ms after the cancel request: 1 (legacy) lost publication rights`);
  assert.equal(marks[0].x, grace.offset / run.endOffset);
  // Before the grace period ran out there is nothing to mark.
  assert.deepStrictEqual(timeMarkers(fold(list, grace.seq - 1), timeBounds(run)), []);
});

test("goldens without a grace_expired or a branch_timeout get no such marker", () => {
  for (const name of readdirSync(GOLDEN).filter((f) => f.endsWith(".jsonl"))) {
    for (const list of runs(name)) {
      const run = fold(list);
      const expected = list.filter((e) => e.type === "cancel.grace_expired").length;
      const marks = timeMarkers(run, timeBounds(run));
      assert.equal(marks.filter((m) => m.kind === "grace").length, expected, name);
      assert.equal(marks.filter((m) => m.kind !== "grace").length, 0, `${name}: no branch_timeout there`);
    }
  }
});

test("the cancel mark says who asked only when turn.cancelled names them for that reason", () => {
  const [stopped] = runs("cancelled.jsonl");
  assert.equal(cancelTitle(fold(stopped), "1:0/b0", 0.5),
    "cancel requested by ada for east › barrier 0 (1:0/b0): Stop pressed in the dashboard · 1 running, 1 queued · 0.500000s");
  const [deadline] = runs("cancellation.jsonl");
  assert.equal(cancelTitle(fold(deadline), "b0", 0.5),
    "cancel requested for PriceWatch › barrier 0 (b0): deadline reached · 2 running, 2 queued · 0.500000s");
});

function timeoutRun(upto = null) {
  let seq = 0;
  const list = [];
  const add = (type, offset, fields, path = "") => list.push({ seq: seq++, offset, path, type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", 0, { flow: "F", message: "go" });
  add("session.loaded", 0, { steps: {}, current_step: "Top", tokens: {} });
  add("barrier.forked", 1, { barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    branch_timeout: 2, requests: [0, 1, 2].map((i) => ({ index: i, path: String(i), step: "S", key: `k${i}`, params: {} })) });
  add("branch.started", 1, { barrier: "b0", index: 0 }, "0");
  add("branch.started", 1.5, { barrier: "b0", index: 1 }, "1");
  add("branch.fulfilled", 2, { barrier: "b0", index: 1, output: 1 }, "1");
  add("branch.started", 2.5, { barrier: "b0", index: 2 }, "2");
  add("branch.rejected", 3.25, { barrier: "b0", index: 0, cancelled: false, started: true,
    error: { type: "BranchTimeoutError", code: "branch_timeout", message: "Branch 0 (k0) ran longer than 2 s.", extra: {} } }, "0");
  return fold(upto === null ? list : list.slice(0, upto + 1));
}

test("a timed-out branch gets its deadline and its rejection; one that ended in time gets neither", () => {
  const run = timeoutRun();
  const marks = timeMarkers(run, { start: 0, end: 10 });
  assert.deepStrictEqual(marks.map((m) => [m.kind, m.path, m.t]), [
    ["deadline", "0", 3], ["timeout", "0", 3.25], ["deadline", "2", 4.5],
  ]);
  assert.equal(marks[1].title, "branch 0 (k0) timed out after 2.00s (ran 2.25s)");
  assert.equal(marks[0].title, "deadline of branch 0 (k0): 2.00s after its start (branch_timeout of Top › barrier 0 (b0))");
  assert.ok(marks[2].title.startsWith("deadline of branch 2 (k2)"), "still running: its deadline is ahead");
  // Only what is inside the window, placed on it.
  const zoomed = timeMarkers(run, { start: 3, end: 4 });
  assert.deepStrictEqual(zoomed.map((m) => [m.kind, m.x]), [["deadline", 0], ["timeout", 0.25]]);
});

test("while the branch runs, no timeout is claimed", () => {
  const run = timeoutRun(6);
  assert.deepStrictEqual(timeMarkers(run, { start: 0, end: 10 }).map((m) => [m.kind, m.path]), [["deadline", "0"], ["deadline", "2"]]);
});
