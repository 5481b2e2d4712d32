// The "What if" view's data: the seed's A/B run (tests/js/whatif_ab.json, written from the
// contract's numbers: A1 0–1, B1 0–10, A2 1–2 recorded and 10–11 under supersteps, B2
// 10–11) as lanes on one axis, its waits named, and the sentences that state the difference.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  amount, axisX, biggestShift, hashWithView, laneModel, SCHEDULES, scheduleSentence, shiftLabel, viewOfHash, waitLabel,
} from "../../static/picoflow_web/js/whatif.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const ab = () => JSON.parse(readFileSync(join(HERE, "whatif_ab.json"), "utf8"));

test("the A/B run: one lane per branch in tree order, the same lanes in every schedule", () => {
  const model = laneModel(ab().schedules);
  assert.deepEqual(model.names, SCHEDULES);
  assert.deepEqual(model.lanes.map((l) => l.label), ["A", "A1", "A2", "B", "B1", "B2"]);
  assert.deepEqual(model.lanes.map((l) => l.depth), [1, 2, 2, 1, 2, 2]);
  assert.equal(model.hidden, 0);
  assert.deepEqual(model.bounds, { start: 0, end: 11 });
  for (const lane of model.lanes) for (const name of SCHEDULES) assert.ok(lane.slots[name], `${lane.label} in ${name}`);
});

test("A2 starts at 1 recorded and at B1's end under supersteps, and the gap names B1", () => {
  const model = laneModel(ab().schedules);
  const lane = (label) => model.lanes.find((l) => l.label === label);
  const a2 = lane("A2");
  const b1 = lane("B1");
  assert.equal(a2.slots.recorded.start, 1);
  assert.equal(a2.slots.supersteps.start, b1.slots.supersteps.end);
  assert.equal(a2.slots.supersteps.shift, 9);
  assert.equal(a2.slots.local_barriers.shift, 0);
  assert.equal(a2.slots.recorded.shift, null);
  assert.deepEqual(a2.slots.supersteps.gaps, [{ from: 1, to: 10, at: "superstep", label: "waits 9.0 s for B1 (superstep 2)" }]);
  assert.equal(a2.slots.supersteps.superstep, 2);
  // The worker's join wait sits after its end: A waits at its join for B.
  assert.deepEqual(lane("A").slots.recorded.gaps, [{ from: 2, to: 11, at: "join", label: "waits 9.0 s at its join for B" }]);
  assert.deepEqual(lane("A").slots.supersteps.parts, [[0, 1], [10, 11]]);
});

test("the critical path is marked on its lanes, per schedule", () => {
  const model = laneModel(ab().schedules);
  const critical = (name) => model.lanes.filter((l) => l.slots[name].critical).map((l) => l.label);
  assert.deepEqual(critical("recorded"), ["B", "B1", "B2"]);
  assert.deepEqual(critical("supersteps"), ["B1", "B2"]);
});

test("the sentences state the totals and the branch that moves", () => {
  const { schedules } = ab();
  assert.equal(scheduleSentence(schedules, "supersteps"),
    "Under graph-wide supersteps this run would take 11.0 s in 2 supersteps (same as recorded); "
    + "A2 would start at 10.0 s instead of 1.0 s: it waits 9.0 s for B1 at superstep 2.");
  assert.equal(scheduleSentence(schedules, "local_barriers"),
    "Under local barriers this run would take 11.0 s (same as recorded); every branch would start when it did.");
  assert.equal(scheduleSentence(schedules, "recorded"),
    "As recorded this run took 11.0 s. The longest wait: A waits 9.0 s at its join for B.");
  const longer = structuredClone(schedules);
  longer.supersteps.total = 12.5;
  assert.match(scheduleSentence(longer, "supersteps"), /would take 12\.5 s in 2 supersteps \(1\.5 s longer than the recorded 11\.0 s\)/);
  assert.equal(biggestShift(schedules.recorded, schedules.supersteps).count, 1);
  const glueless = structuredClone(schedules);
  glueless.local_barriers.total = 10.9;
  assert.match(scheduleSentence(glueless, "local_barriers"), /would take 10\.9 s \(about the same as recorded: 100 ms shorter\)/);
  // Every branch a little earlier (the glue left out), A2 much later: only A2 has moved.
  const glue = structuredClone(schedules);
  for (const op of glue.supersteps.operations) if (op.start > 0 && op.key !== "A2") op.start -= 0.004;
  assert.deepEqual(biggestShift(glue.recorded, glue.supersteps).count, 1);
});

test("waits in words: superstep, join, slot, unexplained; several names are cut", () => {
  assert.equal(waitLabel({ path: "x", wait: 0.05, for: ["1.0", "1.1"], for_keys: ["B1", null], at: "superstep", superstep: 3 }),
    "waits 50 ms for B1 and 1.1 (superstep 3)");
  assert.equal(waitLabel({ path: "x", wait: 2, for: ["a", "b", "c", "d", "e"], for_keys: ["a", "b", "c", "d", "e"], at: "join" }),
    "waits 2.0 s at its join for a, b, c and 2 more");
  assert.equal(waitLabel({ path: "x", wait: 1, for: [], at: "slot" }), "waits 1.0 s for a free slot");
  assert.equal(waitLabel({ path: "x", wait: 0.25, at: "unexplained" }), "idle 250 ms: the events do not say why");
  assert.equal(amount(0), "0 s");
  assert.equal(amount(1e-9), "0 s");
  assert.equal(amount(11), "11.0 s");
  assert.equal(shiftLabel(9), "+9.0 s");
  assert.equal(shiftLabel(-0.5), "−500 ms");
  assert.equal(shiftLabel(0), "");
  assert.equal(shiftLabel(null), "");
  // On an 11 s axis, a few ms of left-out glue is no move.
  assert.equal(shiftLabel(-0.003, "s", 11), "");
  assert.equal(shiftLabel(0.2, "s", 11), "");
  assert.equal(shiftLabel(0.3, "s", 11), "+300 ms");
});

test("a leaf branch scheduled per call shares one lane; a wait sits before the call it delayed", () => {
  const op = (start, end, superstep) => ({ id: `0#${superstep}`, path: "0", key: "agent", kind: "branch", parent: "", depth: 1, start, end, superstep });
  const model = laneModel({
    recorded: { total: 3, operations: [op(0, 1, null), op(1, 3, null)], waits: [], critical_path: ["0"] },
    supersteps: {
      total: 6, supersteps: 2, operations: [op(0, 1, 1), op(4, 6, 2)],
      waits: [{ path: "0", key: "agent", wait: 3, for: ["1"], for_keys: ["slow"], at: "superstep", superstep: 2 }],
    },
  });
  assert.equal(model.lanes.length, 1);
  const slot = model.lanes[0].slots.supersteps;
  assert.deepEqual([slot.start, slot.end, slot.parts], [0, 6, [[0, 1], [4, 6]]]);
  assert.deepEqual(slot.gaps.map((g) => [g.from, g.to]), [[1, 4]]);
  assert.equal(model.names.join(), "recorded,supersteps");
});

test("the top level's own work is one lane, first; a lane missing from a schedule is empty there", () => {
  const model = laneModel({
    recorded: {
      total: 2,
      operations: [
        { id: "0", path: "0", key: "k", kind: "branch", parent: "", depth: 1, start: 0.5, end: 2 },
        { id: "#0", path: "", kind: "work", parent: "", depth: 0, start: 0, end: 0.5 },
      ],
    },
    supersteps: { total: 2, operations: [{ id: "#0", path: "", kind: "work", depth: 0, start: 0, end: 0.5 }] },
  });
  assert.deepEqual(model.lanes.map((l) => [l.label, l.depth]), [["turn (own work)", 0], ["k", 1]]);
  assert.equal(model.lanes[1].slots.supersteps, null);
  assert.equal(model.lanes[1].score, Infinity);
});

test("10,000 branches: the lanes that differ most are shown, the rest counted as hidden", () => {
  const n = 10_000;
  const recorded = [];
  const supersteps = [];
  for (let i = 0; i < n; i += 1) {
    recorded.push({ id: String(i), path: String(i), key: `k${i}`, kind: "branch", parent: "", depth: 1, start: 0, end: 1 });
    // Every 500th branch would start 1 + i/1000 later.
    const shift = i % 500 === 0 ? 1 + i / 1000 : 0;
    supersteps.push({ id: String(i), path: String(i), key: `k${i}`, kind: "branch", parent: "", depth: 1, start: shift, end: 1 + shift, superstep: 1 });
  }
  const model = laneModel({ recorded: { total: 1, operations: recorded }, supersteps: { total: 11, operations: supersteps } }, { limit: 10 });
  assert.equal(model.total, n);
  assert.equal(model.hidden, n - 10);
  // The 10 largest shifts (i = 9500, 9000, ... 5000), drawn in tree order.
  assert.deepEqual(model.lanes.map((l) => l.path), ["5000", "5500", "6000", "6500", "7000", "7500", "8000", "8500", "9000", "9500"]);
});

test("a 200-deep nesting is ordered without recursion", () => {
  const ops = [];
  for (let i = 0; i < 200; i += 1) {
    const path = Array.from({ length: i + 1 }, () => "0").join(".");
    ops.push({ path, key: `d${i}`, kind: "branch", parent: i ? path.slice(0, -2) : "", depth: i + 1, start: i, end: 400 - i });
  }
  const model = laneModel({ recorded: { total: 400, operations: ops.reverse() } }, { limit: 500 });
  assert.deepEqual(model.lanes.slice(0, 3).map((l) => l.label), ["d0", "d1", "d2"]);
});

test("axis positions and the page's deep link", () => {
  assert.equal(axisX({ start: 0, end: 11 }, 5.5), 0.5);
  assert.equal(axisX({ start: 0, end: 11 }, 20), 1);
  assert.equal(viewOfHash("#view=whatif"), "whatif");
  assert.equal(viewOfHash("#whatif"), "whatif");
  assert.equal(viewOfHash("#inv=0.1&view=whatif&seq=3"), "whatif");
  assert.equal(viewOfHash("#inv=0.1"), null);
  assert.equal(viewOfHash(""), null);
  assert.equal(hashWithView("#inv=0.1&seq=3", "whatif"), "#inv=0.1&seq=3&view=whatif");
  assert.equal(hashWithView("#view=whatif", null), "");
  assert.equal(hashWithView("", "whatif"), "#view=whatif");
});

test("keyed lanes (two runs): a path with another key in b is another lane, under its own caller", () => {
  const op = (path, key, parent, start, end) => ({ id: path, path, key, kind: "branch", parent, depth: parent ? 2 : 1, start, end });
  const a = { total: 11, operations: [op("0", "A", "", 0, 2), op("0.0", "A1", "0", 0, 1), op("1", "B", "", 0, 11)], critical_path: ["1"] };
  const b = { total: 11, operations: [op("0", "A1", "", 0, 1), op("1", "B", "", 0, 11)], critical_path: ["1"] };
  const model = laneModel({ a, b }, { names: ["a", "b"], base: "a", keyed: true });
  assert.deepEqual(model.lanes.map((l) => [l.path, l.label, l.slots.a !== null, l.slots.b !== null]), [
    ["0", "A", true, false], ["0.0", "A1", true, false], ["1", "B", true, true], ["0", "A1", false, true],
  ]);
  assert.equal(model.lanes[2].slots.b.critical, true);
  assert.equal(model.lanes[2].slots.b.shift, 0);
  // Not keyed, "0" is one lane (the what-if's schedules are of one run).
  assert.equal(laneModel({ a, b }, { names: ["a", "b"] }).lanes.length, 3);
});

test("the top level's own work is no caller: two runs' top-level branches stay with their run", () => {
  const op = (path, key, start, end) => ({ id: path, path, key, kind: "branch", parent: "", depth: 1, start, end });
  const work = { id: "#0", path: "", kind: "work", parent: "", depth: 0, start: 0, end: 0.1 };
  const a = { total: 2, operations: [op("0", "A", 0, 2)] };
  const b = { total: 2, operations: [work, op("0", "A1", 0.1, 1)] };
  const model = laneModel({ a, b }, { names: ["a", "b"], base: "a", keyed: true });
  assert.deepEqual(model.lanes.map((l) => [l.label, l.depth]), [["turn (own work)", 0], ["A", 1], ["A1", 1]]);
});
