// The conflict view's data against the committed goldens of the three ways a join is
// invalidated by its branches' writes: a replacement conflict, an invalid shared mutation
// and a reducer failure. Every value asserted here is one the events recorded.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { PROBLEM_WORDS, changeKind, conflictLine, conflictOf, problemWord, writerPaths } from "../../static/picoflow_web/js/conflict.js";
import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const events = (name) => parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"));
const run = (name, upto = null) => fold(events(name), upto);
const seqOf = (name, test) => events(name).find(test).seq;

test("a replacement conflict names the field, both replacements and the compatible contribution apart", () => {
  const r = run("conflict");
  const c = conflictOf(r, "b0");
  assert.equal(c.kind, "conflict");
  assert.equal(c.field, "VenueScout.venue");
  assert.equal(c.step, "VenueScout");
  assert.equal(c.joinSeq, seqOf("conflict", (e) => e.type === "join.invalidated"));
  const part = c.writers.filter((w) => w.part);
  assert.deepEqual(part.map((w) => [w.path, w.key, w.kind, w.value]),
    [["0", "north", "replacement", "Lakeside Lodge"], ["1", "south", "replacement", "Riverside Hall"]]);
  // Each links to its own state.replaced event, and that event says the same value.
  for (const w of part) {
    const e = r.events.find((x) => x.seq === w.seq);
    assert.equal(e.type, "state.replaced");
    assert.equal(e.path, w.path);
    assert.equal(e.value, w.value);
  }
  // VenueScout had no venue when they forked.
  assert.deepEqual(part.map((w) => [w.base, w.hasBase]), [[null, false], [null, false]]);
  const others = c.writers.filter((w) => !w.part);
  assert.deepEqual(others.map((w) => [w.path, w.field, w.kind]),
    [["0", "shortlist", "contribution"], ["1", "shortlist", "contribution"]]);
  assert.ok(others.every((w) => r.events.find((x) => x.seq === w.seq).type === "state.contributed"));
  assert.match(c.reason, /north \(0\) and south \(1\), replaced VenueScout\.venue/);
  assert.match(c.fix, /reducer channel/);
  assert.match(c.fix, /contribute_state\(\)/);
  assert.match(c.fix, /one branch own the field/);
  // The two proposals differ as values, side by side.
  assert.deepEqual(c.between, [{ a: 0, b: 1, changes: [{ path: [], kind: "changed", before: "Lakeside Lodge", after: "Riverside Hall" }] }]);
  assert.deepEqual([...writerPaths(c)], [["0", "replacement"], ["1", "replacement"]]);
});

test("an invalid shared mutation names the step written, its value and what the branch saw there", () => {
  const r = run("shared_mutation");
  const c = conflictOf(r, "b0");
  assert.equal(c.kind, "mutation");
  assert.equal(c.field, "ExpenseDesk.approved");
  const [m, ...rest] = c.writers;
  assert.deepEqual([m.path, m.key, m.kind, m.part, m.value, m.base, m.hasBase], ["1", "meals", "mutation", true, true, false, true]);
  // No draft is recorded for a refused write: the link goes to where it surfaced.
  const e = r.events.find((x) => x.seq === m.seq);
  assert.equal(e.type, "branch.rejected");
  assert.equal(e.path, "1");
  assert.equal(e.error.type, "ParallelMutationError");
  // The base is the desk's approved=false, saved before the fork.
  assert.equal(r.barriers.get("b0").baseState.ExpenseDesk.approved, false);
  assert.deepEqual(m.changes, [{ path: [], kind: "changed", before: false, after: true }]);
  assert.deepEqual(rest.map((w) => [w.key, w.field, w.kind, w.part]),
    [["travel", "totals", "contribution", false], ["meals", "totals", "contribution", false]]);
  assert.match(c.reason, /meals \(1\) tried to write the state of step 'ExpenseDesk'/);
  assert.match(c.reason, /own step's state \(Auditor\)/);
  assert.match(c.fix, /let ExpenseDesk save ExpenseDesk\.approved after the join/);
  assert.deepEqual([...writerPaths(c).keys()], ["1"]);
});

test("a reducer failure lists the contributions in request-path order from the base they reduce from", () => {
  const r = run("reducer_failure");
  const c = conflictOf(r, "b0");
  assert.equal(c.kind, "reducer");
  assert.equal(c.field, "SeatBooker.seats");
  assert.equal(c.initial, 2);
  const part = c.writers.filter((w) => w.part);
  assert.deepEqual(part.map((w) => [w.key, w.kind, w.value, w.base, w.result]),
    [["design", "contribution", 6, 2, 8], ["sales", "contribution", 5, 2, 7]]);
  for (const w of part) {
    const e = r.events.find((x) => x.seq === w.seq);
    assert.deepEqual([e.type, e.path, e.field, e.value], ["state.contributed", w.path, "seats", w.value]);
  }
  assert.deepEqual(c.writers.filter((w) => !w.part).map((w) => [w.key, w.field]), [["design", "teams"], ["sales", "teams"]]);
  assert.match(c.reason, /'reduced' reducer of SeatBooker\.seats/);
  assert.match(c.reason, /starting from 2: 13 seats booked, the bus has 10/);
  assert.match(c.fix, /reducer accept every combination/);
});

test("before its join a barrier has no conflict, and other outcomes have none", () => {
  const join = seqOf("conflict", (e) => e.type === "join.invalidated");
  assert.equal(conflictOf(run("conflict", join - 1), "b0"), null);
  assert.notEqual(conflictOf(run("conflict", join), "b0"), null);
  assert.equal(conflictOf(run("atomic_failure"), "b0"), null);
  assert.equal(conflictOf(run("conflict"), "nope"), null);
  assert.equal(writerPaths(null).size, 0);
});

test("a rolled-back checkpoint is told as such, with no writers to blame", () => {
  const r = run("checkpoints");
  const id = r.conflicts[0];
  assert.ok(id, "the checkpoints golden has a rolled-back join");
  const c = conflictOf(r, id);
  assert.equal(c.kind, "checkpoint");
  assert.deepEqual(c.writers, []);
  assert.match(c.reason, /rolled back/);
});

test("a branch's own changes say how they were written", () => {
  const r = run("conflict");
  const kinds = r.invocations.get("0").changes.map((ch) => [ch.field, changeKind(r, ch)]);
  assert.deepEqual(kinds, [["shortlist", "contribution"], ["venue", "replacement"]]);
});

test("a replacement beside a contribution to one field, nested writers and structural diffs", () => {
  // A hand-made trace: branch 0's inner branch 0.0 replaced a structured field that
  // branch 1 contributed to; both writers' events are found under their own paths.
  const base = { v: 1, run_id: "r", session_id: "s", time: 0, offset: 0 };
  let seq = 0;
  const ev = (path, type, fields) => ({ ...base, seq: seq++, path, type, ...fields });
  const req = (index, path, key) => ({ index, path, step: "Plan", key, params: {}, user_message: null });
  const events = [
    ev("", "turn.started", { flow: "F", message: "m" }),
    ev("", "session.loaded", { new_session: false, revision: 1, current_step: "Desk", steps: { Plan: { budget: { total: 100, rooms: ["a"] } } }, context: {}, tokens: {} }),
    ev("", "barrier.forked", { barrier: "b0", caller_step: "Desk", requests: [req(0, "0", "outer"), req(1, "1", "other")], policy: "retain-successes", checkpoint: "none", base: "canonical" }),
    ev("0", "branch.started", { barrier: "b0", index: 0, key: "outer", step: "Plan" }),
    ev("0", "barrier.forked", { barrier: "b1", caller_step: "Plan", requests: [req(0, "0.0", "inner")], policy: "retain-successes", checkpoint: "none", base: "0" }),
    ev("0.0", "branch.started", { barrier: "b1", index: 0, key: "inner", step: "Plan" }),
    ev("0.0", "state.replaced", { step: "Plan", field: "budget", value: { total: 120, rooms: ["a", "b"] }, base: { total: 100, rooms: ["a"] }, draft: true }),
    ev("0.0", "branch.fulfilled", { barrier: "b1", index: 0, key: "inner", output: "x" }),
    ev("0", "join.published", { barrier: "b1", target: "caller-scope", fields: [{ step: "Plan", field: "budget", value: { total: 120, rooms: ["a", "b"] }, deleted: false, writer: "0.0" }], discarded: [] }),
    ev("0", "branch.fulfilled", { barrier: "b0", index: 0, key: "outer", output: "y" }),
    ev("1", "branch.started", { barrier: "b0", index: 1, key: "other", step: "Plan" }),
    ev("1", "state.contributed", { step: "Plan", field: "budget", value: { total: 5 }, order: 1, draft: true, result: { total: 5, rooms: ["a"] } }),
    ev("1", "branch.fulfilled", { barrier: "b0", index: 1, key: "other", output: "z" }),
    ev("", "join.invalidated", { barrier: "b0", error: { type: "ParallelStateConflictError", code: "parallel_state_conflict", message: "Conflicting writes", extra: { step: "Plan", field: "budget" } },
      provenance: [{ path: "0.0", key: "inner", step: "Plan", field: "budget", kind: "replace", value: { total: 120, rooms: ["a", "b"] }, base: { total: 100, rooms: ["a"] } },
        { path: "1", key: "other", step: "Plan", field: "budget", kind: "contribute", value: { total: 5 }, base: { total: 100, rooms: ["a"] } }] }),
  ];
  const r = fold(events);
  assert.deepEqual(r.anomalies, []);
  const c = conflictOf(r, "b0");
  assert.equal(c.field, "Plan.budget");
  assert.match(c.reason, /inner \(0\.0\) replaced Plan\.budget while other \(1\) contributed to it/);
  assert.match(c.fix, /contribute_state\(\) from every branch, or save_state\(\) from one branch only/);
  const [inner, other] = c.writers;
  assert.deepEqual([inner.path, inner.kind, inner.seq, other.path, other.kind, other.seq], ["0.0", "replacement", 6, "1", "contribution", 11]);
  // The inner writer forked from its caller's view, which held the canonical budget.
  assert.deepEqual([inner.base, inner.hasBase], [{ total: 100, rooms: ["a"] }, true]);
  assert.deepEqual(inner.changes, [
    { path: ["total"], kind: "changed", before: 100, after: 120 },
    { path: ["rooms", 1], kind: "added", before: undefined, after: "b" },
  ]);
  assert.deepEqual([...writerPaths(c).keys()], ["0.0", "1"]);
});

test("a conflict whose event carries its own fix (a LangGraph trace) shows that fix", () => {
  // What LangGraphTracer records for two nodes writing one LastValue key in a superstep.
  const base = { v: 1, run_id: "r", session_id: "s", time: 0, offset: 0 };
  let seq = 0;
  const ev = (path, type, fields) => ({ ...base, seq: seq++, path, type, ...fields });
  const req = (index, key) => ({ index, path: String(index), step: key, key, params: {}, user_message: null });
  const fix = "Give 'pick' a reducer in the state schema (pick: Annotated[T, operator.add], or add_messages for messages), or have one node write it per superstep.";
  const provenance = [["north", "Lakeside Lodge"], ["south", "Riverside Hall"]].map(([key, value], i) => (
    { path: String(i), key, step: "state", field: "pick", kind: "replace", value, base: null }));
  const events = [
    ev("", "turn.started", { flow: "LangGraph", message: null }),
    ev("", "session.loaded", { new_session: true, revision: 0, current_step: null, steps: { state: {} }, context: {}, tokens: {} }),
    ev("", "barrier.forked", { barrier: "b0", caller_step: "state", requests: [req(0, "north"), req(1, "south")], policy: "atomic", checkpoint: "none", base: "canonical" }),
    ...provenance.flatMap((p) => [
      ev(p.path, "branch.started", { barrier: "b0", index: Number(p.path), key: p.key, step: p.key }),
      ev(p.path, "state.replaced", { step: "state", field: "pick", value: p.value, base: null, draft: true }),
      ev(p.path, "branch.fulfilled", { barrier: "b0", index: Number(p.path), key: p.key, output: { pick: p.value } }),
    ]),
    ev("", "join.invalidated", { barrier: "b0", provenance,
      error: { type: "InvalidUpdateError", code: "parallel_state_conflict", message: "Tasks 0 (north), 1 (south) all wrote 'pick'", extra: { step: "state", field: "pick", provenance, fix } } }),
  ];
  const r = fold(events);
  assert.deepEqual(r.anomalies, []);
  const c = conflictOf(r, "b0");
  assert.equal(c.kind, "conflict");
  assert.match(c.reason, /north \(0\) and south \(1\), replaced channel pick/);
  assert.equal(c.title, "Conflict on channel pick");
  assert.equal(c.fix, fix);
});

// The run page's first screen: a card is one line (field, writers, link) until opened, and
// the header's flag names the kind of problem.
test("a card's one line names the field and each writer of the problem once", () => {
  const line = conflictLine(conflictOf(run("conflict"), "b0"));
  assert.equal(line.field, "VenueScout.venue");
  assert.deepEqual(line.writers, [{ path: "0", key: "north" }, { path: "1", key: "south" }]);
  assert.equal(line.more, 0);
  const short = conflictLine(conflictOf(run("conflict"), "b0"), 1);
  assert.deepEqual([short.writers.map((w) => w.key), short.more], [["north"], 1]);
  // A reducer failure's contributors, and the bystander writes left out.
  const reducer = conflictLine(conflictOf(run("reducer_failure"), "b0"));
  assert.equal(reducer.field, conflictOf(run("reducer_failure"), "b0").field);
  assert.deepEqual(reducer.writers.map((w) => w.path), ["0", "1"]);
});

test("the header's flag says 'reducer failed' for a reducer failure, 'conflict' only for a conflict", () => {
  assert.equal(problemWord([conflictOf(run("reducer_failure"), "b0")]), "reducer failed");
  assert.equal(problemWord([conflictOf(run("conflict"), "b0")]), "conflict");
  assert.equal(problemWord([conflictOf(run("shared_mutation"), "b0")]), PROBLEM_WORDS.mutation);
  assert.equal(problemWord([conflictOf(run("conflict"), "b0"), conflictOf(run("reducer_failure"), "b0")]), "join invalidated");
  assert.equal(problemWord([]), null);
});
