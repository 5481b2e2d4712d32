// The compare page's data: two runs of one flow (an answer written from the contract's
// shape) as a sentence, table rows with the changed cells marked, and counts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { cellText, compareChoices, compareOrder, startedMs, compareRows, countsLine, differenceSentence, FIELDS } from "../../static/picoflow_web/js/compare.js";

const side = (status, duration, tokens, output, published = []) => ({ status, duration, tokens, output, published });
const answer = () => ({
  unit: "s",
  a: { run: "aaaa", flow: "TimingFlow", status: "finished", duration: 11.0, tokens: 120, started_at: 1, message: "pipelined" },
  b: { run: "bbbb", flow: "TimingFlow", status: "finished", duration: 10.6, tokens: 132, started_at: 2, message: "batched" },
  same_flow: true,
  difference: { duration: -0.4, tokens: 12 },
  branches: [
    { path: "0", key: "A1", step: "Stage", match: "both", a: side("fulfilled", 1, 30, "A1 done"), b: side("fulfilled", 1, 30, "A1 done"), changed: [] },
    { path: "1", key: "B1", step: "Stage", match: "both", a: side("fulfilled", 10, 30, "B1 done", [{ step: "Stage", field: "outputs", value: { B1: "x" } }]),
      b: side("rejected", 9.5, 42, { error: "<img src=x onerror=alert(1)>" }), changed: ["status", "duration", "tokens", "output", "published"] },
    { path: "2", key: "C", step: "Stage", match: "only_a", a: side("fulfilled", 1, 30, "c"), b: null, changed: [] },
    { path: "3", key: null, step: "Stage", match: "only_b", a: null, b: side("fulfilled", 1, 30, "d"), changed: [] },
  ],
  added: ["3"], missing: ["2"],
  timing: { a: { total: 11, operations: [] }, b: { total: 10.6, operations: [] } },
});

test("the overall difference in one sentence", () => {
  assert.equal(differenceSentence(answer()),
    "Run b (batched) took 400 ms less than run a (pipelined): 10.6 s against 11.0 s; it used 12 more tokens: 132 against 120.");
  const same = answer();
  same.b.duration = 11.0;
  same.b.tokens = 119;
  same.same_flow = false;
  same.b.flow = "Other";
  assert.equal(differenceSentence(same),
    "Run b (batched) took as long as run a (pipelined): 11.0 s; it used 1 fewer token: 119 against 120. "
    + "The runs are of different flows (TimingFlow and Other): branches are matched by path and key all the same.");
  const running = answer();
  running.b.duration = null;
  assert.match(differenceSentence(running), /b has not ended/);
});

test("rows: one per branch, a's and b's text per field, only changed cells of matched branches marked", () => {
  const rows = compareRows(answer());
  assert.deepEqual(rows.map((r) => [r.label, r.match]), [["A1", "both"], ["B1", "both"], ["C", "only_a"], ["3", "only_b"]]);
  assert.deepEqual(rows[0].cells.map((c) => c.changed), [false, false, false, false, false]);
  assert.deepEqual(rows[1].cells.map((c) => c.field), FIELDS);
  assert.deepEqual(rows[1].cells.map((c) => c.changed), [true, true, true, true, true]);
  assert.deepEqual(rows[1].cells.map((c) => [c.a.text, c.b.text]), [
    ["fulfilled", "rejected"], ["10.0 s", "9.5 s"], ["30", "42"], ["B1 done", '{"error":"<img src=x onerror=alert(1)>"}'],
    ['Stage.outputs = {"B1":"x"}', "nothing"],
  ]);
  // Missing on one side: a dash, and no per-cell marks (the whole row is added or missing).
  assert.deepEqual(rows[2].cells.map((c) => [c.b.text, c.changed]), FIELDS.map(() => ["—", false]));
  assert.equal(rows[3].cells[0].a.text, "—");
});

test("long values are cut in the cell and kept longer in its title", () => {
  const long = "x".repeat(500);
  const cell = cellText("output", { output: long });
  assert.equal(cell.text.length, 80);
  assert.ok(cell.text.endsWith("…"));
  assert.equal(cell.title, long);
  assert.deepEqual(cellText("tokens", { tokens: 0 }), { text: "0", title: "" });
  assert.deepEqual(cellText("output", null), { text: "—", title: "" });
});

test("the counts line, and the runs a run page offers to compare with", () => {
  assert.equal(countsLine(answer()), "2 branches in both (1 changed) · 1 only in b (added) · 1 only in a (missing from b)");
  const choices = compareChoices([
    { id: "self", status: "finished", message: "me", started_at: 3 },
    { id: "old0000000", status: "finished", message: "pipelined", started_at: "2026-12-05T00:00:01+00:00" },
    { id: "new0000000", status: "failed", message: null, started_at: "2026-12-05T00:00:02+00:00" },
  ], "self");
  assert.deepEqual(choices, [
    { id: "new0000000", label: "failed · — · new00000" },
    { id: "old0000000", label: "finished · pipelined · old00000" },
  ]);
});

test("two picked runs: the one started first is a, whichever way its start is said", () => {
  assert.deepEqual(compareOrder([{ id: "late", started_at: "2026-12-05T10:00:00Z" }, { id: "early", started_at: "2026-12-05T09:59:59.5Z" }]), ["early", "late"]);
  assert.deepEqual(compareOrder([{ id: "x", started_at: 20 }, { id: "y", started_at: 10 }]), ["y", "x"]);
  assert.equal(startedMs(1.5), 1500);
  assert.equal(startedMs("not a time"), 0);
  assert.equal(startedMs(undefined), 0);
});
