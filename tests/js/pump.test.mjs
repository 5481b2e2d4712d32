// The live pump (pump.js): batches folded in order, a slice at a time, handing the thread
// back once a task used its budget; an idle pump folds at once. A controllable clock and
// task queue stand in for the browser's.
import assert from "node:assert/strict";
import { test } from "node:test";

import { createPump, eventWeight } from "../../static/picoflow_web/js/pump.js";

/** A clock that each fold advances by `cost` ms per event, and a queue of later tasks. */
function harness(cost = 1) {
  let time = 0;
  /** @type {(() => void)[]} */
  const tasks = [];
  /** @type {any[][]} */
  const folded = [];
  /** @type {number[]} */
  const perTask = [];
  let current = 0;
  const pump = createPump({
    apply: (events) => {
      folded.push(events);
      time += cost * events.length;
      current += events.length;
    },
    budget: 8,
    slice: 4,
    now: () => time,
    later: (fn) => tasks.push(fn),
  });
  const runTask = () => {
    current = 0;
    tasks.shift()?.();
    perTask.push(current);
  };
  return { pump, tasks, folded, perTask, runTask, events: () => folded.flat() };
}

const seqs = (from, to) => Array.from({ length: to - from }, (_, i) => ({ seq: from + i }));

test("an idle pump folds a small batch at once, in the same task", () => {
  const h = harness();
  h.pump.push(seqs(0, 3));
  assert.deepEqual(h.events().map((e) => e.seq), [0, 1, 2]);
  assert.equal(h.tasks.length, 0);
  assert.equal(h.pump.waiting, 0);
});

test("a large batch is folded over several tasks, each within its budget", () => {
  const h = harness();
  h.pump.push(seqs(0, 50));
  // The first task folded slices until 8 ms were used: 8 events (two slices of 4).
  assert.deepEqual(h.events().map((e) => e.seq), seqs(0, 8).map((e) => e.seq));
  assert.equal(h.pump.waiting, 42);
  assert.equal(h.tasks.length, 1);
  while (h.tasks.length) h.runTask();
  assert.deepEqual(h.events().map((e) => e.seq), seqs(0, 50).map((e) => e.seq));
  assert.ok(h.perTask.every((n) => n <= 8), `events per task: ${h.perTask}`);
  assert.ok(h.folded.every((part) => part.length <= 4));
  assert.equal(h.pump.waiting, 0);
});

test("batches arriving while others wait are folded after them, in order", () => {
  const h = harness();
  h.pump.push(seqs(0, 20));
  h.pump.push(seqs(20, 23)); // the pump is busy: queued, not folded ahead
  h.pump.push([]);
  h.pump.push(seqs(23, 30));
  assert.equal(h.events().length, 8);
  assert.equal(h.tasks.length, 1, "one continuation scheduled, not one per batch");
  while (h.tasks.length) h.runTask();
  assert.deepEqual(h.events().map((e) => e.seq), seqs(0, 30).map((e) => e.seq));
});

test("clear drops what waits; what comes after is folded", () => {
  const h = harness();
  h.pump.push(seqs(0, 20));
  h.pump.clear();
  assert.equal(h.pump.waiting, 0);
  while (h.tasks.length) h.runTask();
  assert.equal(h.events().length, 8);
  h.pump.push(seqs(0, 2));
  assert.deepEqual(h.events().slice(8).map((e) => e.seq), [0, 1]);
});

test("a fold that throws leaves the pump going", () => {
  let calls = 0;
  /** @type {(() => void)[]} */
  const tasks = [];
  const pump = createPump({
    apply: () => {
      calls += 1;
      if (calls === 1) throw new Error("bad event");
    },
    slice: 1, budget: 0, now: () => 0, later: (fn) => tasks.push(fn),
  });
  assert.throws(() => pump.push(seqs(0, 3)), /bad event/);
  while (tasks.length) tasks.shift()?.();
  assert.equal(calls, 3);
  assert.equal(pump.waiting, 0);
});

test("after runs once the batches queued before it are folded, not before", () => {
  const h = harness();
  /** @type {number[]} */
  const seenAt = [];
  h.pump.after(() => seenAt.push(h.events().length)); // nothing waits: now
  h.pump.push(seqs(0, 20));
  h.pump.after(() => seenAt.push(h.events().length));
  h.pump.push(seqs(20, 24));
  assert.deepEqual(seenAt, [0]);
  while (h.tasks.length) h.runTask();
  assert.deepEqual(seenAt, [0, 20]);
  assert.equal(h.events().length, 24);
});

test("an event carrying a list weighs its items: it is folded in a slice of its own, and the clock is read after it", () => {
  let time = 0;
  const parts = [];
  const tasks = [];
  const pump = createPump({
    apply: (events) => {
      parts.push(events.map((e) => e.id));
      time += events.reduce((ms, e) => ms + eventWeight(e) / 64, 0); // a 300-request page: ~5 ms
    },
    budget: 8,
    slice: 4,
    now: () => time,
    later: (fn) => tasks.push(fn),
  });
  const light = (id) => ({ id });
  const page = (id) => ({ id, requests: Array.from({ length: 300 }, (_, index) => ({ index })) });
  assert.equal(eventWeight(page("p")), 301);
  assert.equal(eventWeight({ id: "c", items: [1, 2] }), 3);
  assert.equal(eventWeight(light("l")), 1);
  for (const bad of [null, 3, "x", { requests: "many" }]) assert.equal(eventWeight(bad), 1, JSON.stringify(bad));
  pump.push([light("a"), light("b"), page("P1"), light("c"), light("d"), light("e"), light("f"), light("g"), page("P2"), page("P3")]);
  while (tasks.length) tasks.shift()();
  assert.deepEqual(parts, [["a", "b"], ["P1"], ["c", "d", "e", "f"], ["g"], ["P2"], ["P3"]]);
});
