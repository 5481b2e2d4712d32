// The beginning of a value's JSON: exactly JSON.stringify's text up to the limit, for
// anything JSON parsing gives and for what only JSON.stringify knows how to write.
import assert from "node:assert/strict";
import { test } from "node:test";

import { PRETTY_LIMIT, cellOf, pretty, preview } from "../../static/picoflow_web/js/format.js";
import { jsonPrefix } from "../../static/picoflow_web/js/json_prefix.js";
import { random } from "./seeded.mjs";

const TEXTS = ["", "a", "tide pools", "quote \" and \\ slash", "line\nbreak\ttab", "é ü ß", "😀 emoji",
  "\u2028\u2029", "<img src=x onerror=alert(1)>", "\ud83d", "x".repeat(300), "😀".repeat(80)];

/** A random JSON value, `depth` levels deep at most. @param {() => number} next @param {number} depth */
function value(next, depth) {
  const r = next();
  if (depth <= 0 || r < 0.45) {
    const kind = Math.floor(next() * 6);
    if (kind === 0) return null;
    if (kind === 1) return next() < 0.5;
    if (kind === 2) return Math.floor(next() * 2000) - 1000;
    if (kind === 3) return next() * 1e6 - 5e5;
    return TEXTS[Math.floor(next() * TEXTS.length)];
  }
  const n = Math.floor(next() * 12);
  if (r < 0.7) return Array.from({ length: n }, () => value(next, depth - 1));
  const out = {};
  for (let i = 0; i < n; i += 1) out[next() < 0.3 ? String(Math.floor(next() * 50)) : `${TEXTS[i % TEXTS.length].slice(0, 8)}${i}`] = value(next, depth - 1);
  return out;
}

/** What the prefix must be: JSON.stringify's text, cut. @param {any} v @param {number} limit
 * @param {number} [indent] */
function expected(v, limit, indent = 0) {
  const text = JSON.stringify(v, null, indent);
  if (text === undefined) return { text: undefined, cut: false };
  return text.length > limit ? { text: text.slice(0, limit), cut: true } : { text, cut: false };
}

test("the prefix of a value's JSON is JSON.stringify's text up to the limit, for every limit", () => {
  for (let seed = 1; seed <= 400; seed += 1) {
    const next = random(seed);
    const v = value(next, 4);
    const full = JSON.stringify(v).length;
    for (const limit of [0, 1, 2, 5, 17, 64, 120, full - 1, full, full + 1]) {
      if (limit < 0) continue;
      assert.deepStrictEqual(jsonPrefix(v, limit), expected(v, limit), `seed ${seed}, limit ${limit}`);
    }
  }
});

test("indented, the prefix is JSON.stringify's pretty text up to the limit, nesting and all", () => {
  for (let seed = 1; seed <= 200; seed += 1) {
    const next = random(seed);
    const v = value(next, 4);
    for (const indent of [2, 4]) {
      const full = JSON.stringify(v, null, indent).length;
      for (const limit of [0, 1, 3, 40, 120, full - 1, full, full + 1]) {
        if (limit < 0) continue;
        assert.deepStrictEqual(jsonPrefix(v, limit, indent), expected(v, limit, indent), `seed ${seed}, indent ${indent}, limit ${limit}`);
      }
    }
  }
  const empty = { a: [], b: {}, c: [[], {}], d: [{ e: [] }] };
  assert.deepStrictEqual(jsonPrefix(empty, 1000, 2), expected(empty, 1000, 2));
});

test("what JSON leaves out or writes its own way comes out as JSON.stringify writes it", () => {
  const nullProto = Object.assign(Object.create(null), { b: 1, a: [2] });
  const cases = [
    undefined, () => 1, Symbol("s"), NaN, Infinity, -0, 1e21,
    { a: undefined, b: () => 1, c: Symbol("s"), d: 1 },
    [undefined, () => 1, Symbol("s"), NaN],
    { when: new Date(0), custom: { toJSON: () => "mine" }, gone: { toJSON: () => undefined } },
    { 2: "b", 1: "a", z: 0, 10: "c" }, // integer keys first, ascending
    nullProto, new Map([[1, 2]]), [new Date(0)],
  ];
  // Nested, what JSON.stringify writes itself takes the indentation of where it stands.
  cases.push({ deep: [{ when: new Date(0), custom: { toJSON: () => ({ x: [1, { y: 2 }] }) }, map: new Map() }] });
  for (const v of cases) {
    for (const limit of [0, 3, 10, 200]) {
      for (const indent of [0, 2]) {
        assert.deepStrictEqual(jsonPrefix(v, limit, indent), expected(v, limit, indent), `${String(JSON.stringify(v))} at ${limit}, indent ${indent}`);
      }
    }
  }
});

test("a cycle and a BigInt throw, as JSON.stringify does", () => {
  const cyclic = { a: [1] };
  cyclic.a.push(cyclic);
  assert.throws(() => jsonPrefix(cyclic, 1000), TypeError);
  assert.throws(() => jsonPrefix({ n: 1n }, 1000), TypeError);
  // A value met twice, not inside itself, is no cycle.
  const shared = { x: 1 };
  assert.deepStrictEqual(jsonPrefix([shared, shared], 100), expected([shared, shared], 100));
});

test("a wide value's prefix does not depend on the part past it, and the preview shows it", () => {
  const wide = Array.from({ length: 200_000 }, (_, i) => ({ path: String(i), value: i }));
  const prefix = jsonPrefix(wide, 120);
  assert.deepStrictEqual(prefix, expected(wide, 120));
  // The writer stopped at the limit: what follows the cut may be anything, even unwritable.
  wide[150_000] = { n: 1n };
  assert.deepStrictEqual(jsonPrefix(wide, 120), prefix);
  assert.equal(preview(wide.slice(0, 3)), '[{"path":"0","value":0},{"path":"1","value":1},{"path":"2","value":2}]');
  assert.equal(preview(wide), `${JSON.stringify(wide.slice(0, 10)).slice(0, 119)}…`);
  assert.equal(preview({ n: 1n }), "[object Object]"); // what JSON cannot write, as before
});

test("a table cell shows a value on one line exactly when its one-line JSON is short, and the block as pretty JSON", () => {
  const old = (v) => { // the rule as written before: one-line JSON shorter than 60, else the block
    const text = preview(v, 400);
    return text.length < 60 && !text.includes("\n") ? { line: text } : { block: pretty(v) };
  };
  const values = [null, 1, "x", "y".repeat(70), [], {}, { a: 1 }, [1, [2, [3]]], { truncated: true, size: 10, preview: "{" },
    Array.from({ length: 59 }, () => 0), Array.from({ length: 60 }, () => 0), { when: new Date(0) }];
  for (let seed = 1; seed <= 300; seed += 1) values.push(value(random(seed), 3));
  for (const v of values) assert.deepStrictEqual(cellOf(v), old(v), JSON.stringify(v));
  const wide = {};
  for (let i = 0; i < 100_000; i += 1) wide[`t${i}`] = i;
  const cell = cellOf(wide);
  assert.ok("block" in cell && cell.block.cut);
  assert.equal(cell.block.text, JSON.stringify(wide, null, 2).slice(0, PRETTY_LIMIT));
});
