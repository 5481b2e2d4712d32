// Sequential work as rows and lanes: steps, model calls, tool calls and cursor moves.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { activityOf } from "../../static/picoflow_web/js/activity.js";
import { applyEvent, createRun, fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { lane, timeBounds, treeRows } from "../../static/picoflow_web/js/layout.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const golden = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()];

test("a HotelFlow turn reads as its steps, calls and cursor moves, in event order", () => {
  const events = golden("hotel")[8];
  const run = fold(events);
  const items = activityOf(run, "");
  const expected = events.filter((e) => ["step.entered", "model.started", "tool.started", "cursor.moved"].includes(e.type));
  assert.deepEqual(items.map((a) => a.seq), expected.map((e) => e.seq));
  assert.deepEqual(items.map((a) => a.kind), expected.map((e) => ({ "step.entered": "step", "model.started": "model", "tool.started": "tool", "cursor.moved": "cursor" })[e.type]));
  const tool = items.find((a) => a.kind === "tool");
  assert.match(tool.label, /^search_again\(/);
  assert.match(tool.detail, /input validated → go ExploreStep/);
  const model = items.find((a) => a.kind === "model");
  const finished = events.find((e) => e.type === "model.finished");
  assert.match(model.detail, new RegExp(`^${finished.total_tokens} tok · `));
  assert.equal(model.t1, finished.offset);
  const cursor = items.filter((a) => a.kind === "cursor").map((a) => a.label);
  assert.deepEqual(cursor, ["cursor → ExploreStep", "cursor → PresentStep"]);
  // A step lasts until the next step is entered; the last one until the turn ended.
  const steps = items.filter((a) => a.kind === "step");
  assert.equal(steps[0].t1, steps[1].t0);
  assert.equal(steps.at(-1).t1, run.endOffset);
});

test("the tree interleaves a caller's activity with its barriers by seq", () => {
  const run = fold(golden("nested_fanout")[0]);
  const rows = treeRows(run, { activity: true });
  const kinds = rows.map((r) => (r.kind === "activity" ? `${r.item.kind}@${r.path}` : r.kind === "barrier" ? `barrier ${r.id}` : r.kind === "branch" ? `branch ${r.path}` : r.kind));
  const fork = kinds.indexOf("barrier b0");
  // The coordinator's model and tool call come before its barrier; its later calls after.
  assert.ok(kinds.slice(1, fork).includes("model@"), kinds.join("\n"));
  assert.ok(kinds.slice(1, fork).includes("tool@"), kinds.join("\n"));
  // A branch's own model call sits under it.
  const planner = kinds.indexOf("branch 0");
  assert.equal(kinds[planner + 1], "model@0");
  for (const r of rows) if (r.kind === "activity") assert.ok(r.depth > 0);
  // Without the option (and with a filter) there are no activity rows.
  assert.equal(treeRows(run).filter((r) => r.kind === "activity").length, 0);
  assert.equal(treeRows(run, { activity: true, query: "news" }).filter((r) => r.kind === "activity").length, 0);
});

test("activity lanes: calls are segments, cursor moves marks, failures a red mark", () => {
  const run = createRun();
  let seq = 0;
  const add = (type, fields) => applyEvent(run, { seq: seq++, offset: seq / 10, path: "", type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", { flow: "F", message: "m" });
  add("step.entered", { step: "A", level: 1, how: "start" });
  add("model.started", { step: "A", call: 1, attempt: 1, model: { name: "m" }, messages: [], tools: [] });
  add("model.failed", { step: "A", call: 1, attempt: 1, latency: 0.1, error: { type: "Timeout", message: "slow" }, retrying: true });
  add("model.started", { step: "A", call: 1, attempt: 2, model: { name: "m" }, messages: [], tools: [] });
  add("cursor.moved", { from_step: "A", to_step: "B" });
  const items = activityOf(run, "");
  const models = items.filter((a) => a.kind === "model");
  assert.deepEqual(models.map((m) => m.state), ["retried", "running"]);
  assert.match(models[0].detail, /failed: slow \(retrying\)/);
  assert.match(models[1].label, /attempt 2/);
  const rows = treeRows(run, { activity: true });
  const bounds = timeBounds(run);
  const failed = rows.find((r) => r.kind === "activity" && r.item.seq === 2);
  const geometry = lane(failed, run, bounds, null);
  assert.deepEqual(geometry.segments.map((s) => s.kind), ["model"]);
  assert.deepEqual(geometry.marks.map((m) => m.kind), ["error"]);
  const moved = rows.find((r) => r.kind === "activity" && r.item.kind === "cursor");
  assert.deepEqual(lane(moved, run, bounds, null).marks.map((m) => m.kind), ["cursor"]);
  // The root's lane shows its model calls too.
  assert.equal(lane(rows[0], run, bounds, null).segments.filter((s) => s.kind === "model").length, 2);
});

test("after events that never came (a gap in the seqs), steps and tools still start at their events' times", () => {
  const events = golden("hotel")[8];
  // Drop a stretch before the first tool call: the fold notes the gap and goes on.
  const tool = events.findIndex((e) => e.type === "tool.started");
  const step = events.findIndex((e, i) => i > 3 && e.type === "step.entered");
  const cut = Math.min(tool, step) - 1;
  const gapped = [...events.slice(0, 2), ...events.slice(cut)];
  const run = fold(gapped);
  assert.ok(run.anomalies.some((a) => /missing/.test(a.message)), "the fold noted the gap");
  const items = activityOf(run, "");
  const started = new Map(gapped.map((e) => [e.seq, e.offset]));
  const placed = items.filter((a) => a.kind === "step" || a.kind === "tool");
  assert.ok(placed.some((a) => a.seq > gapped[2].seq), "activity after the gap");
  for (const item of placed) assert.equal(item.t0, started.get(item.seq), `${item.kind} #${item.seq}`);
});
