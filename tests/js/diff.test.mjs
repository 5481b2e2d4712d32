// State diffs: per step and field, nested JSON (and JSON text) diffed structurally.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { FIELD_LIMIT, diffCounts, diffState, diffValue, differencePlace, structured } from "../../static/picoflow_web/js/diff.js";
import { fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const golden = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()];
const places = (diffs) => diffs.map((d) => `${d.kind} ${differencePlace(d)}`);

test("steps and fields present on one side only are added or removed whole", () => {
  const diffs = diffState({ A: { x: 1, gone: [1, 2] }, Old: { y: 2 } }, { A: { x: 1, fresh: { a: 1 } }, New: {} });
  assert.deepEqual(places(diffs), ["added A.fresh", "removed A.gone", "removed Old.y"]);
  assert.deepEqual(diffs[0].after, { a: 1 });
  assert.equal(diffs[0].before, undefined);
  assert.deepEqual(diffCounts(diffs), { added: 1, removed: 2, changed: 0 });
});

test("nested objects and arrays are diffed leaf by leaf, not replaced wholesale", () => {
  const before = { S: { doc: { budget: 700, rooms: ["suite"], meta: { a: 1, b: 2 } } } };
  const after = { S: { doc: { budget: 650, rooms: ["suite", "twin"], meta: { a: 1 } } } };
  assert.deepEqual(places(diffState(before, after)), [
    "changed S.doc › budget", "added S.doc › rooms[1]", "removed S.doc › meta.b",
  ]);
});

test("JSON text is diffed as the value it encodes when both sides parse", () => {
  const a = JSON.stringify({ checkIn: "2027-08-01", roomType: ["suite"] });
  const b = JSON.stringify({ checkIn: "2027-08-01", roomType: ["two beds"] });
  const [d, ...rest] = diffState({ E: { json: a } }, { E: { json: b } });
  assert.equal(rest.length, 0);
  assert.equal(differencePlace(d), "E.json › roomType[0]");
  assert.equal(d.before, "suite");
  assert.equal(d.after, "two beds");
  // Text that only looks like JSON is compared as text.
  assert.deepEqual(places(diffState({ E: { t: "{not json" } }, { E: { t: "{not json!" } })), ["changed E.t"]);
  assert.equal(structured("42"), undefined);
  assert.deepEqual(structured(" [1] "), [1]);
});

test("type changes, null and equal values", () => {
  assert.deepEqual(diffValue({ a: 1 }, [1]).map((d) => d.kind), ["changed"]);
  assert.deepEqual(diffValue(null, {}).map((d) => d.kind), ["changed"]);
  assert.deepEqual(diffValue({ a: [1, { b: null }] }, { a: [1, { b: null }] }), []);
  assert.deepEqual(diffState(null, undefined), []);
});

test("a huge field's differences stop at the limit", () => {
  const a = Array.from({ length: FIELD_LIMIT * 2 }, (_, i) => i);
  const b = a.map((i) => i + 1);
  assert.equal(diffState({ S: { f: a } }, { S: { f: b } }).length, FIELD_LIMIT);
});

test("HotelFlow: turn 8 to turn 9 changes the room type inside ExploreStep's JSON", () => {
  const runs = golden("hotel");
  const eighth = fold(runs[7]).state;
  const ninth = fold(runs[8]).state;
  const diffs = diffState(eighth, ninth);
  const room = diffs.find((d) => differencePlace(d) === "ExploreStep.json › roomType[0]");
  assert.ok(room, places(diffs).join("\n"));
  assert.equal(room.before, "suite");
  assert.equal(room.after, "two beds");
  // The same turn against itself has no difference.
  assert.deepEqual(diffState(ninth, fold(runs[8]).state), []);
});
