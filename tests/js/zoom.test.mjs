// Zooming the time axis: windows stay inside the run, keep the focus in place, clip lanes
// to what is inside, and mark forks, joins and cancel requests.
import assert from "node:assert/strict";
import { test } from "node:test";

import { fold } from "../../static/picoflow_web/js/fold.js";
import { MIN_SPAN, axisMarkers, lane, panWindow, timeBounds, treeRows, zoomWindow } from "../../static/picoflow_web/js/layout.js";

const full = { start: 0, end: 10 };
const close = (a, b) => Math.abs(a - b) < 1e-9;

test("zooming in keeps the focus where it was on the axis", () => {
  const w = zoomWindow(full, full, 2.5, 0.5);
  assert.ok(close(w.end - w.start, 5));
  assert.ok(close((2.5 - w.start) / (w.end - w.start), 0.25));
  const again = zoomWindow(full, w, 3, 0.1);
  assert.ok(close(again.end - again.start, 0.5));
  assert.ok(close((3 - again.start) / 0.5, (3 - w.start) / 5));
});

test("windows stay inside the run, no narrower than MIN_SPAN; zooming out past it all is no zoom", () => {
  let w = full;
  for (let i = 0; i < 40; i += 1) w = zoomWindow(full, w, 9.99999, 0.5);
  assert.ok(close(w.end - w.start, MIN_SPAN));
  assert.ok(w.end <= 10 && w.start >= 0);
  assert.equal(zoomWindow(full, { start: 2, end: 8 }, 5, 2), null);
  const edge = zoomWindow(full, full, 0, 0.2);
  assert.deepStrictEqual([edge.start, edge.end], [0, 2]);
});

test("panning moves the window and stops at either end", () => {
  assert.deepStrictEqual(panWindow(full, { start: 2, end: 3 }, 1.5), { start: 3.5, end: 4.5 });
  assert.deepStrictEqual(panWindow(full, { start: 2, end: 3 }, -5), { start: 0, end: 1 });
  assert.deepStrictEqual(panWindow(full, { start: 2, end: 3 }, 50), { start: 9, end: 10 });
});

function cancelledRun() {
  let seq = 0;
  const events = [];
  const add = (type, offset, fields, path = "") => events.push({ seq: seq++, offset, path, type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", 0, { flow: "F", message: "go" });
  add("session.loaded", 0, { steps: {}, current_step: "Top", tokens: {} });
  add("barrier.forked", 1, {
    barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    requests: [0, 1, 2].map((i) => ({ index: i, path: String(i), step: "S", key: `k${i}`, params: {} })),
  });
  add("branch.started", 1.001, { barrier: "b0", index: 0 }, "0");
  add("branch.started", 1.002, { barrier: "b0", index: 1 }, "1");
  add("branch.fulfilled", 1.003, { barrier: "b0", index: 0, output: 0 }, "0");
  add("cancel.requested", 4, { barrier: "b0", reason: "stop" });
  add("branch.rejected", 5, { barrier: "b0", index: 1, error: { type: "Cancelled" }, cancelled: true }, "1");
  add("branch.rejected", 5, { barrier: "b0", index: 2, error: { type: "Cancelled" }, cancelled: true }, "2");
  add("join.published", 6, { barrier: "b0", target: "canonical", fields: [], discarded: [], reductions: [] });
  add("turn.finished", 7, { reply: { message: "ok" } });
  return fold(events);
}

test("the axis marks forks, joins and cancel requests inside the window only", () => {
  const run = cancelledRun();
  const all = axisMarkers(run, timeBounds(run));
  assert.deepStrictEqual(all.map((m) => [m.kind, m.barrier, m.t]), [["fork", "b0", 1], ["join", "b0", 6], ["cancel", "b0", 4]]);
  assert.deepStrictEqual(axisMarkers(run, { start: 3, end: 5 }).map((m) => [m.kind, m.x]), [["cancel", 0.5]]);
});

test("a zoomed lane drops what is outside the window and spreads what is inside", () => {
  const run = cancelledRun();
  const rows = treeRows(run);
  const row = rows.find((r) => r.kind === "branch" && r.path === "0");
  const whole = lane(row, run, timeBounds(run), null);
  const running = whole.segments.find((s) => s.kind === "running");
  assert.ok(running.x1 - running.x0 < 0.001);
  const zoomed = lane(row, run, { start: 1, end: 1.01 }, null);
  const close = zoomed.segments.find((s) => s.kind === "running");
  assert.ok(Math.abs(close.x0 - 0.1) < 1e-6 && Math.abs(close.x1 - 0.3) < 1e-6);
  // The join at 6 s is outside: no mark, and nothing pinned to the right edge but the wait.
  assert.deepStrictEqual(zoomed.marks, []);
  const late = lane(row, run, { start: 6.5, end: 7 }, null);
  assert.deepStrictEqual(late.segments, []);
});

test("ticks of a narrow window late in a run have distinct labels", async () => {
  const { ticks } = await import("../../static/picoflow_web/js/layout.js");
  const labels = ticks({ start: 4.2, end: 4.2001 }, 5).map((t) => t.label);
  assert.ok(labels.length >= 3);
  assert.equal(new Set(labels).size, labels.length, labels.join(" "));
  assert.ok(labels.every((l) => l.startsWith("4.2")), labels.join(" "));
});
