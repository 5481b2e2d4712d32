// The coordinator panel's words and links come from the folded concurrent.* events, at
// any position: the coordinator golden read live, at the end, and stopped mid-batch.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { coordinatorPanel } from "../../static/picoflow_web/js/concurrent.js";
import { describeEvent } from "../../static/picoflow_web/js/format.js";
import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const events = parseJsonl(readFileSync(join(GOLDEN, "coordinator.jsonl"), "utf8"));

test("at the end: every batch done, failures marked, links only to children that ran", () => {
  const [call] = coordinatorPanel(fold(events));
  assert.equal(call.headline, "Survey × 5 in batches of 2 (batch 3 of 3): 3 of 5 fulfilled, 2 failed");
  assert.deepStrictEqual(call.batches.map((b) => [b.state, b.label]), [
    ["done", "batch 1: 2 fulfilled, 0 not"],
    ["done", "batch 2: 0 fulfilled, 2 not"],
    ["done", "batch 3: 1 fulfilled, 0 not"],
  ]);
  const chips = call.batches.flatMap((b) => b.children);
  assert.deepStrictEqual(chips.map((c) => [c.item, c.status, c.failed]), [
    [0, "fulfilled", false], [1, "fulfilled", false], [2, "failed", true], [3, "refused", true],
    [4, "fulfilled", false],
  ]);
  // A refused request made no run: nothing to open.
  assert.deepStrictEqual(chips.map((c) => c.href), [
    "/runs/coordinator-1-c0-0/", "/runs/coordinator-1-c0-1/", "/runs/coordinator-1-c0-2/", null,
    "/runs/coordinator-1-c0-4/",
  ]);
  assert.match(chips[3].title, /^item 3: refused · [\d.]+ s · HTTP 401 · the app refused the request \(401\)/);
  assert.match(chips[4].title, /2 attempts/);
  // The chip says the item and, once it ended, how long it took.
  const [finished] = events.filter((e) => e.type === "concurrent.child_finished" && e.item === 0);
  assert.equal(chips[0].label, `#0 ${finished.duration.toFixed(1)} s`);
});

test("stopped mid-batch: the batch runs, its children are running, later ones not listed yet", () => {
  const mid = events.find((e) => e.type === "concurrent.child_started" && e.item === 3).seq;
  const [call] = coordinatorPanel(fold(events, mid));
  // The call's size is the events' (five items), not the children listed so far (four).
  assert.equal(call.headline, "Survey × 5 in batches of 2 (batch 2 of 3): 2 of 5 fulfilled, 2 running");
  assert.deepStrictEqual(call.batches.map((b) => b.state), ["done", "running"]);
  assert.deepStrictEqual(call.batches[1].children.map((c) => [c.status, c.failed, c.label]), [
    ["running", false, "#2"], ["running", false, "#3"]]);
});

test("a run that coordinates nothing has no panel", () => {
  const hotel = parseJsonl(readFileSync(join(GOLDEN, "hotel.jsonl"), "utf8"));
  assert.deepStrictEqual(coordinatorPanel(fold(hotel.filter((e) => e.run_id === hotel[0].run_id))), []);
});

test("the scrubber's event lines say what each concurrent event did", () => {
  const said = (type, item) => describeEvent(events.find((e) => e.type === type && (item === undefined || e.item === item)));
  assert.equal(said("concurrent.batch_started"), "c0 batch 1 of 3: items 0, 1 of 5 → Survey");
  assert.equal(said("concurrent.child_started", 0), "c0 item 0 → run coordinator-1-c0-0");
  assert.equal(said("concurrent.child_finished", 0), "c0 item 0: fulfilled: done 0");
  assert.match(said("concurrent.child_finished", 3), /^c0 item 3: refused \(the app refused the request \(401\)/);
  assert.equal(said("concurrent.batch_finished"), "c0 batch 1: 2 fulfilled, 0 not");
  const retry = events.filter((e) => e.type === "concurrent.child_started" && e.item === 4)[1];
  assert.equal(describeEvent(retry), "c0 item 4 → run coordinator-1-c0-4 (attempt 2)");
});

test("a child whose request was never sent (on_config raised) has no run to link to", () => {
  const base = { run_id: "c", session_id: "s", time: 0, path: "", group: "c0", batch: 0 };
  const made = [
    { ...base, seq: 0, offset: 0, type: "turn.started", flow: "F", message: "go" },
    { ...base, seq: 1, offset: 0.1, type: "concurrent.batch_started", batches: 1, total: 1, items: [0],
      flow: "Child", batch_size: 1, timeout: 5, retries: 0 },
    { ...base, seq: 2, offset: 0.2, type: "concurrent.child_finished", item: 0, child_run_id: "c-c0-0",
      child_session_id: "c-c0-0-s", status: "error", duration: 0, attempts: 0, http_status: null,
      completed: null, reply: null, error: { type: "ChildReply", code: "internal", message: "on_config raised ValueError: no", extra: {} } },
  ];
  const [chip] = coordinatorPanel(fold(made))[0].batches[0].children;
  assert.equal(chip.status, "error");
  assert.equal(chip.failed, true);
  assert.equal(chip.href, null);
});
