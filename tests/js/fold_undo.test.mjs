// The replay cursor: moved to any seq, forward or back, by any route, its fold equals a
// fresh fold up to that seq — on every golden trace and on hand-made edge cases — and a
// step costs no fresh fold.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvents, createRun, fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { createCursor } from "../../static/picoflow_web/js/fold/undo.js";
import { random } from "./seeded.mjs";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const names = readdirSync(GOLDEN).filter((f) => f.endsWith(".jsonl")).map((f) => f.slice(0, -6)).sort();

/** @param {any} cursor @param {any[]} events @param {number} seq @param {string} what */
function check(cursor, events, seq, what) {
  const moved = cursor.moveTo(seq);
  assert.deepStrictEqual(moved, fold(events, seq), `${what}: at seq ${seq}`);
}

/** @param {any[]} events */
function liveOf(events) {
  const live = createRun();
  applyEvents(live, events);
  return live;
}

for (const name of names) {
  test(`${name}: the cursor's fold equals a fresh fold at every seq, stepping back and forth`, () => {
    const events = parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"));
    for (const runEvents of runsOf(events).values()) {
      const live = liveOf(runEvents);
      const last = runEvents.at(-1).seq;
      const cursor = createCursor(live, { window: 4 });
      // Every seq backwards from the end, then forwards, one step at a time.
      for (let seq = last; seq >= -1; seq -= 1) check(cursor, runEvents, seq, `${name} back`);
      for (let seq = -1; seq <= last; seq += 1) check(cursor, runEvents, seq, `${name} forward`);
      // Random jumps of any length, with a window small enough to be left behind.
      const next = random(last + 7);
      for (let i = 0; i < 60; i += 1) check(cursor, runEvents, Math.floor(next() * (last + 3)) - 1, `${name} jump`);
    }
  });
}

test("a step back within the window undoes, without folding afresh", () => {
  const events = parseJsonl(readFileSync(join(GOLDEN, "nested_fanout.jsonl"), "utf8"));
  const live = liveOf(events);
  const last = events.at(-1).seq;
  const cursor = createCursor(live, { window: 1000 });
  cursor.moveTo(last);
  const { folds } = cursor.size;
  for (let seq = last - 1; seq >= Math.floor(last / 2) + 1; seq -= 1) cursor.moveTo(seq);
  assert.equal(cursor.size.folds, folds, "no fresh fold for steps within the window");
  assert.deepStrictEqual(cursor.run, fold(events, Math.floor(last / 2) + 1));
});

test("only the window's events stay undoable: the log is bounded however far it folds", () => {
  const events = parseJsonl(readFileSync(join(GOLDEN, "nested_fanout.jsonl"), "utf8"));
  const live = liveOf(events);
  const cursor = createCursor(live, { window: 5 });
  for (let seq = 0; seq <= events.at(-1).seq; seq += 1) cursor.moveTo(seq);
  assert.ok(cursor.size.undoable <= 10, `undoable ${cursor.size.undoable}`);
  assert.equal(cursor.size.applied, events.length);
  // Going back past the window folds afresh, and still lands on the right fold.
  const folds = cursor.size.folds;
  check(cursor, events, 2, "past the window");
  assert.equal(cursor.size.folds, folds + 1);
});

test("the cursor follows a live fold that grows, and starts again when handed another", () => {
  const events = parseJsonl(readFileSync(join(GOLDEN, "conflict.jsonl"), "utf8"));
  const half = Math.floor(events.length / 2);
  const live = liveOf(events.slice(0, half));
  const cursor = createCursor(live);
  check(cursor, events, events[half - 1].seq, "before growth");
  applyEvents(live, events.slice(half));
  check(cursor, events, events.at(-1).seq, "after growth");
  check(cursor, events, events[3].seq, "back after growth");
  // The live fold replaced by another run's (a page that reloaded its source).
  const other = parseJsonl(readFileSync(join(GOLDEN, "hotel.jsonl"), "utf8"));
  const otherRun = [...runsOf(other).values()][0];
  live.events = liveOf(otherRun).events;
  check(cursor, otherRun, otherRun.at(-1).seq, "another source");
});

test("anomalies, gaps and events after an interruption undo like any other event", () => {
  const base = { run_id: "r", session_id: "s", time: 0, path: "" };
  const events = [
    { ...base, seq: 0, offset: 0, type: "turn.started", flow: "F", message: "hi" },
    { ...base, seq: 1, offset: 0.1, type: "session.loaded", steps: { a: { x: 1 } }, current_step: "a", tokens: {} },
    { ...base, seq: 3, offset: 0.2, type: "state.replaced", step: "a", field: "y", value: 2, draft: false },
    { ...base, seq: 4, offset: 0.3, type: "branch.started", path: "9", barrier: "nope" },
    { ...base, seq: 5, offset: 0.35, type: "state.removed", step: "a", field: "x", draft: false },
    { ...base, seq: 6, offset: 9, type: "run.interrupted", reason: "silent", silent_for: 30 },
    { ...base, seq: 7, offset: 0.4, type: "turn.finished", success: true, completed: true, message: "late" },
  ];
  const live = liveOf(events);
  assert.ok(live.anomalies.length >= 3, "the trace has anomalies to undo");
  const cursor = createCursor(live, { window: 100 });
  for (let seq = 7; seq >= -1; seq -= 1) check(cursor, events, seq, "hand-made back");
  for (let seq = -1; seq <= 7; seq += 1) check(cursor, events, seq, "hand-made forward");
});

test("a jump forward past the window keeps only undo records it can use", () => {
  const events = parseJsonl(readFileSync(join(GOLDEN, "nested_fanout.jsonl"), "utf8"));
  const live = liveOf(events);
  const last = events.at(-1).seq;
  const cursor = createCursor(live, { window: 3 });
  cursor.moveTo(2);
  cursor.moveTo(last); // far past the window: the early records are useless now
  assert.equal(cursor.size.undoable, 3);
  const folds = cursor.size.folds;
  for (let seq = last - 1; seq >= last - 3; seq -= 1) check(cursor, events, seq, "back within the window");
  assert.equal(cursor.size.folds, folds, "steps within the window undo");
  check(cursor, events, last - 4, "one past the window");
  assert.equal(cursor.size.folds, folds + 1, "past the window it folds afresh");
});

test("a branch's lists of barriers, drafts, model and tool calls are one shared empty list until their first item, which the cursor takes back", () => {
  const events = [];
  const add = (type, path, fields) => events.push({ v: 1, run_id: "r", session_id: "s", seq: events.length, offset: events.length, time: 0, path, type, ...fields });
  const req = (index) => ({ index, path: String(index), step: "W", key: `k${index}`, params: {}, user_message: null });
  add("turn.started", "", { flow: "F", message: "m" });
  add("barrier.forked", "", { barrier: "b0", caller_step: "Root", requests: [req(0), req(1)], policy: "retain-successes", checkpoint: "none", base: "canonical" });
  add("branch.started", "0", { barrier: "b0", index: 0, key: "k0", step: "W" });
  add("model.started", "0", { call: 1, attempt: 1, step: "W", model: { provider: "p", name: "m" }, messages: [], tools: [] });
  add("tool.started", "0", { call_id: "c1", name: "search", step: "W", args: {} });
  add("barrier.forked", "0", { barrier: "0/b0", caller_step: "W", requests: [{ index: 0, path: "0.0", step: "V", key: "v", params: {}, user_message: null }], policy: "retain-successes", checkpoint: "none", base: "0" });
  const live = liveOf(events);
  const [a, b] = [live.invocations.get("0"), live.invocations.get("1")];
  assert.deepStrictEqual([a.models.length, a.tools.length, a.barriers.length], [1, 1, 1]);
  for (const name of ["models", "tools", "barriers", "drafts"]) {
    assert.equal(b[name], live.invocations.get("0.0")[name], `${name}: one empty list for both`);
    assert.ok(Object.isFrozen(b[name]) && b[name].length === 0, name);
    if (name !== "drafts") assert.notEqual(a[name], b[name], `${name}: branch 0's own`);
  }
  const cursor = createCursor(live, { window: 10 });
  for (let seq = events.length - 1; seq >= 0; seq -= 1) check(cursor, events, seq, "back");
  const before = cursor.moveTo(2).invocations.get("0");
  assert.ok(["models", "tools", "barriers"].every((name) => before[name] === b[name]), "back to the shared list");
});

test("a branch's drafts are its changes, one list, until a join publishes into its scope; the cursor takes both back", () => {
  const events = [];
  const add = (type, path, fields) => events.push({ v: 1, run_id: "r", session_id: "s", seq: events.length, offset: events.length, time: 0, path, type, ...fields });
  const req = (index, path = String(index)) => ({ index, path, step: "W", key: `k${index}`, params: {}, user_message: null });
  const write = (path, value) => add("state.replaced", path, { step: "W", field: "x", value, draft: true });
  add("turn.started", "", { flow: "F", message: "m" });
  add("barrier.forked", "", { barrier: "b0", caller_step: "Root", requests: [req(0)], policy: "retain-successes", checkpoint: "none", base: "canonical" });
  add("branch.started", "0", { barrier: "b0", index: 0, key: "k0", step: "W" });
  write("0", 1);
  const drafted = events.length - 1;
  add("barrier.forked", "0", { barrier: "0/b0", caller_step: "W", requests: [req(0, "0.0")], policy: "retain-successes", checkpoint: "none", base: "0" });
  add("branch.started", "0.0", { barrier: "0/b0", index: 0, key: "k0", step: "W" });
  write("0.0", 2);
  add("branch.finished", "0.0", { barrier: "0/b0", index: 0, output: null });
  add("join.published", "0", { barrier: "0/b0", target: "caller-scope", fields: [{ step: "W", field: "y", value: 2, deleted: false, writer: "0.0" }], discarded: [] });
  const joined = events.length - 1;
  write("0", 3);
  const live = liveOf(events);
  const a = live.invocations.get("0");
  assert.deepStrictEqual(a.changes.map((c) => [c.kind, c.value]), [["draft", 1], ["join", 2], ["draft", 3]]);
  assert.deepStrictEqual(a.drafts.map((c) => c.value), [1, 3], "its drafts alone");
  assert.notEqual(a.drafts, a.changes);
  const inner = live.invocations.get("0.0");
  assert.equal(inner.drafts, inner.changes, "no join into its scope: one list");
  const cursor = createCursor(live, { window: events.length });
  for (let seq = events.length - 1; seq >= 0; seq -= 1) check(cursor, events, seq, "back");
  const atDraft = cursor.moveTo(drafted).invocations.get("0");
  assert.equal(atDraft.drafts, atDraft.changes, "one list before the join");
  assert.equal(atDraft.drafts.length, 1);
  const atJoin = cursor.moveTo(joined).invocations.get("0");
  assert.notEqual(atJoin.drafts, atJoin.changes, "parted at the join");
  assert.deepStrictEqual([atJoin.drafts.length, atJoin.changes.length], [1, 2]);
  assert.equal(cursor.moveTo(1).invocations.get("0").drafts.length, 0);
});
