// Publication truth: the page marks a branch or barrier "published" (badge, dot, count,
// lane mark) only for fields a join's publication record lists as applied and that reached
// their target, checked after every event of every golden trace and of generated traces of
// random barrier trees (random policies, failures, cancellations, invalid joins, checkpoint
// rollbacks, callers that fail after their inner join, runs cut short).
//
// The oracle below reads the raw events, not the fold, so a fold that derives publication
// wrongly cannot agree with it by construction.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvent, barrierPublicationOf, createRun, fold, parseJsonl, publicationOf, runsOf } from "../../static/picoflow_web/js/fold.js";
import { lane, timeBounds, treeRows } from "../../static/picoflow_web/js/layout.js";
import { PUBLISHED_KIND, barrierMarks, branchMarks } from "../../static/picoflow_web/js/publication.js";
import { appliedOf } from "../../static/picoflow_web/js/fold/publication.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const goldens = readdirSync(GOLDEN).filter((f) => f.endsWith(".jsonl")).sort();

// -- the oracle: what the raw events say reached its target ------------------------------

const inSubtree = (origin, path) => origin === path || origin.startsWith(`${path}.`);

function oracle(events) {
  const forks = new Map();
  const where = new Map();
  const joins = new Map();
  const reduced = new Map();
  const dead = new Set();
  for (const e of events) {
    if (e.type === "barrier.forked") {
      forks.set(e.barrier, { caller: e.path || "" });
      for (const r of e.requests) where.set(r.path, { barrier: e.barrier, index: r.index });
    } else if (e.type === "join.published") joins.set(e.barrier, e);
    else if (e.type === "join.reduced") reduced.set(e.barrier, [...(reduced.get(e.barrier) || []), e]);
    else if (e.type === "join.invalidated" || e.type === "checkpoint.failed") dead.add(e.barrier);
  }
  const applied = (id, path) => {
    const j = joins.get(id);
    if (!j || dead.has(id)) return [];
    const listed = new Set(j.fields.map((f) => `${f.step}.${f.field}`));
    const out = j.fields.filter((f) => f.writer && inSubtree(String(f.writer), path)).map((f) => `${f.step}.${f.field}`);
    for (const r of reduced.get(id) || []) {
      if (!listed.has(`${r.step}.${r.field}`)) continue;
      if ((r.inputs || []).some((i) => inSubtree(String(i.path), path))) out.push(`${r.step}.${r.field}`);
    }
    return out;
  };
  /** Whether the join of `path`'s barrier, and every join above it, kept it. */
  const kept = (path) => {
    const at = where.get(path);
    if (!at) return null;
    const j = joins.get(at.barrier);
    if (!j || dead.has(at.barrier)) return null;
    if (j.discarded.some((d) => d.index === at.index)) return null;
    const caller = forks.get(at.barrier).caller;
    if (caller === "") return at.barrier;
    return kept(caller);
  };
  /** The fields of `path` the canonical join's record applied ([] when none reached). */
  const reached = (path) => {
    const at = where.get(path);
    const top = kept(path);
    if (!at || top === null || !applied(at.barrier, path).length) return [];
    return applied(top, path);
  };
  return { forks, where, joins, dead, reached };
}

// -- the property ---------------------------------------------------------------------------

function check(run, events, label) {
  const truth = oracle(events);
  const bounds = timeBounds(run);
  const rows = treeRows(run, { groupLimit: 100000 });
  const rowOf = new Map(rows.filter((r) => r.kind === "branch").map((r) => [r.path, r]));
  for (const [path, inv] of run.invocations) {
    if (!path) continue;
    const marks = branchMarks(run, path);
    const fields = truth.reached(path);
    const where = `${label}: branch ${path} (${inv.status})`;
    assert.ok(marks, `${where} has marks`);
    assert.equal(marks.state === "published", fields.length > 0, `${where}: marked ${marks.state}; the records applied ${JSON.stringify(fields)}`);
    assert.equal(marks.badge.kind === PUBLISHED_KIND, fields.length > 0, `${where}: badge ${marks.badge.kind}`);
    if (marks.chip) assert.notEqual(marks.chip.kind, PUBLISHED_KIND, `${where}: chip`);
    for (const f of marks.state === "published" ? marks.fields : []) {
      assert.ok(fields.includes(`${f.step}.${f.field}`), `${where}: ${f.step}.${f.field} is not in the canonical record`);
    }
    if (marks.state === "discarded") {
      assert.notEqual(marks.dot, "fulfilled", `${where}: a discarded branch has a green dot`);
      assert.ok(marks.reason && marks.text.length > 10, `${where}: says why it was discarded`);
    }
    const joined = truth.joins.has(inv.barrier) || truth.dead.has(inv.barrier);
    const row = rowOf.get(path);
    if (row && joined) {
      const kinds = lane(row, run, bounds, null).marks.map((m) => m.kind);
      if (marks.state === "discarded") assert.ok(!kinds.includes("join") && kinds.includes("discard"), `${where}: lane marks ${kinds}`);
      if (fields.length) assert.ok(kinds.includes("join"), `${where}: lane marks ${kinds}`);
    }
  }
  for (const [id, barrier] of run.barriers) {
    const marks = barrierMarks(run, id);
    const where = `${label}: barrier ${id}`;
    // A barrier's counts (made without each branch's publication for a canonical join)
    // are the tally of its branches' publications.
    const tally = { pending: 0, scoped: 0, published: 0, nothing: 0, discarded: 0 };
    for (const path of barrier.branches) {
      const p = publicationOf(run, path);
      if (p) tally[p.state] += 1;
    }
    assert.deepEqual(barrierPublicationOf(run, id)?.counts, tally, `${where}: counts`);
    const published = barrier.branches.filter((p) => truth.reached(p).length > 0);
    const record = truth.joins.get(id);
    const unattributed = barrier.caller === "" && !truth.dead.has(id) && record && record.fields.some((f) => !f.writer);
    const green = marks.badge.kind === PUBLISHED_KIND;
    assert.equal(green, published.length > 0 || !!unattributed, `${where}: badge ${marks.badge.kind}; published branches ${published}`);
    for (const n of marks.counts) {
      if (n.kind === PUBLISHED_KIND) assert.equal(n.n, published.length, `${where}: published count`);
      if (record || truth.dead.has(id)) assert.notEqual(n.kind, "fulfilled", `${where}: a green status count after the join`);
    }
    if (published.length) assert.ok(marks.counts.some((n) => n.kind === PUBLISHED_KIND && n.n === published.length), `${where}: counts ${JSON.stringify(marks.counts)}`);
  }
}

/** Check after every event (every `step`-th for long runs, and always at the end). */
function checkEveryPrefix(events, label, step = 1) {
  const run = createRun();
  events.forEach((e, i) => {
    applyEvent(run, e);
    if (i % step === 0 || i === events.length - 1) check(run, events.slice(0, i + 1), `${label} @${e.seq}`);
  });
}

for (const name of goldens) {
  test(`${name}: nothing is marked published that its join's record did not apply`, () => {
    const events = parseJsonl(readFileSync(join(GOLDEN, name), "utf8"));
    for (const [runId, runEvents] of runsOf(events)) checkEveryPrefix(runEvents, `${name} ${runId}`);
  });
}

test("the atomic batch with a failure is marked as the discard it is", () => {
  const events = parseJsonl(readFileSync(join(GOLDEN, "atomic_failure.jsonl"), "utf8"));
  const run = fold(events);
  const b0 = barrierMarks(run, "b0");
  assert.notEqual(b0.badge.kind, PUBLISHED_KIND);
  assert.equal(b0.badge.label, "nothing published");
  assert.match(b0.text, /atomic policy discarded every branch/);
  assert.deepStrictEqual(b0.counts.map((n) => [n.kind, n.n]), [["discarded", 3]]);
  for (const path of ["0", "1"]) {
    const m = branchMarks(run, path);
    assert.deepStrictEqual([m.state, m.reason, m.dot], ["discarded", "atomic", "discarded"]);
    assert.match(m.text, /atomic policy: branch 2 \(car\) was rejected/);
  }
  const car = branchMarks(run, "2");
  assert.deepStrictEqual([car.state, car.reason, car.dot], ["discarded", "rejected", "rejected"]);
  assert.match(car.text, /SoldOutError: SOLD OUT/);
});

test("a branch that raised says it raised, not that the join rejected it", () => {
  const run = fold(parseJsonl(readFileSync(join(GOLDEN, "atomic_failure.jsonl"), "utf8")));
  const car = branchMarks(run, "2");
  assert.equal(car.badge.label, "discarded: it raised SoldOutError");
  assert.doesNotMatch(car.badge.label, /rejected by the join/);
  // Its row's chip stays short: the error has a chip of its own.
  assert.equal(car.chip.label, "discarded");
  for (const name of goldens) {
    const r = fold(parseJsonl(readFileSync(join(GOLDEN, name), "utf8")));
    for (const path of r.invocations.keys()) {
      const m = path ? branchMarks(r, path) : null;
      if (m) assert.doesNotMatch(m.badge.label, /by the join/, `${name} ${path}`);
    }
  }
});

test("each discard reason the events carry is told apart", () => {
  const reasons = (name) => {
    const run = fold(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8")));
    const out = {};
    for (const path of run.invocations.keys()) if (path) out[path] = publicationOf(run, path).reason;
    return out;
  };
  assert.deepStrictEqual(reasons("cancellation"), { 0: null, 1: "late", 2: "cancelled", 3: "cancelled" });
  assert.deepStrictEqual(reasons("conflict"), { 0: "invalidated", 1: "invalidated" });
  assert.deepStrictEqual(reasons("interrupted"), { 0: "not-joined", 1: "not-joined", "0.0": "not-joined", "0.1": "not-joined" });
  const checkpoints = fold(parseJsonl(readFileSync(join(GOLDEN, "checkpoints.jsonl"), "utf8")));
  const rolledBack = [...checkpoints.barriers.values()].find((b) => b.checkpointFailed);
  assert.ok(rolledBack, "the checkpoints golden has a failed checkpoint");
  for (const path of rolledBack.branches) assert.equal(publicationOf(checkpoints, path).reason, "rollback");
});

// -- generated traces -------------------------------------------------------------------

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A plausible run of random nested barriers, following the join's rules: rejected
 * branches are discarded, an atomic batch with a rejection discards every branch, a nested
 * join publishes its kept writes into its caller (who may then fail), a root join may fail
 * its checkpoint, any join may be invalidated, and the run may be cut short.
 */
function generate(seed) {
  const random = rng(seed);
  const pick = (p) => random() < p;
  const events = [];
  let offset = 0;
  const emit = (type, path, fields) => {
    offset += 0.01;
    events.push({ v: 1, run_id: `gen-${seed}`, session_id: "gen", seq: events.length, time: offset, offset, path, type, ...fields });
  };
  emit("turn.started", "", { flow: "Gen", message: "go" });
  emit("session.loaded", "", { new_session: true, revision: 1, current_step: "Root", steps: {}, context: {}, tokens: {} });
  let failed = false;

  // A second root barrier of one caller numbers its branches "1:0", "1:1", ... as the runtime does.
  const barrier = (caller, id, depth, prefix = "") => {
    const n = 1 + Math.floor(random() * 4);
    const policy = pick(0.4) ? "atomic" : "retain-successes";
    const checkpoint = caller === "" && pick(0.4) ? "root-join" : "none";
    const requests = Array.from({ length: n }, (_, i) => ({
      index: i, path: caller ? `${caller}.${i}` : `${prefix}${i}`, step: "W", key: `k${i}`, params: {}, user_message: null,
    }));
    emit("barrier.forked", caller, {
      barrier: id, caller_step: "Root", requests, policy, checkpoint, max_concurrency: null,
      branch_timeout: null, token_budget: null, base: caller || "canonical",
    });
    const outcomes = [];
    const late = [];
    for (const r of requests) {
      const writes = [];
      const contributions = [];
      emit("branch.started", r.path, { barrier: id, index: r.index, key: r.key, step: "W" });
      if (pick(0.5)) {
        writes.push({ step: "W", field: `f${r.path}`, value: r.path, writer: r.path });
        emit("state.replaced", r.path, { step: "W", field: `f${r.path}`, value: r.path, base: null, draft: true });
      }
      if (pick(0.5)) {
        contributions.push({ path: r.path, key: r.key, value: r.path });
        emit("state.contributed", r.path, { step: "R", field: "items", value: r.path, order: 1, draft: true, result: [r.path] });
      }
      let innerFailed = false;
      if (depth < 2 && pick(0.45)) {
        const inner = barrier(r.path, `${r.path}/b0`, depth + 1);
        if (inner === null) innerFailed = true;
        else {
          writes.push(...inner.writes);
          contributions.push(...inner.contributions);
        }
      }
      const fate = innerFailed ? "error" : random();
      let status = "fulfilled";
      if (fate === "error" || fate < 0.18) {
        status = "rejected";
        emit("branch.rejected", r.path, { barrier: id, index: r.index, key: r.key, error: { type: "SoldOutError", code: "internal", message: "sold out", extra: {} }, cancelled: false, started: true });
      } else if (fate < 0.24) {
        status = "rejected";
        const type = pick(0.3) ? "BranchBudgetError" : "BranchCancelledError";
        emit("branch.rejected", r.path, { barrier: id, index: r.index, key: r.key, error: { type, code: "branch_cancelled", message: "cancelled", extra: {} }, cancelled: true, started: true });
      } else if (fate < 0.3) {
        status = "rejected";
        late.push(r.path);
      } else {
        emit("branch.fulfilled", r.path, { barrier: id, index: r.index, key: r.key, output: r.path });
      }
      outcomes.push({ r, status, writes, contributions });
    }
    if (late.length) {
      emit("cancel.requested", caller, { barrier: id, reason: "stop" });
      emit("cancel.propagated", caller, { barrier: id, running: late, queued: [] });
      emit("cancel.grace_expired", caller, { barrier: id, closed: late });
      for (const o of outcomes.filter((x) => late.includes(x.r.path))) {
        emit("branch.rejected", o.r.path, { barrier: id, index: o.r.index, key: o.r.key, error: { type: "BranchCancelledError", code: "branch_cancelled", message: "late", extra: {} }, cancelled: true, started: true });
      }
    }
    const candidates = outcomes.filter((o) => o.status === "fulfilled");
    if (candidates.length && pick(0.1)) {
      emit("join.invalidated", caller, { barrier: id, error: { type: "ParallelStateConflictError", code: "parallel_state_conflict", message: "conflict", extra: {} }, provenance: [] });
      return null;
    }
    const discarded = outcomes.filter((o) => o.status === "rejected").map((o) => ({ index: o.r.index, key: o.r.key, reason: "rejected" }));
    const atomicFail = policy === "atomic" && discarded.length > 0;
    if (atomicFail) {
      for (const o of candidates) discarded.push({ index: o.r.index, key: o.r.key, reason: `atomic: branch ${discarded[0].index} was rejected` });
    }
    const kept = atomicFail ? [] : candidates;
    const writes = kept.flatMap((o) => o.writes);
    const contributions = kept.flatMap((o) => o.contributions);
    const fields = writes.map((w) => ({ step: w.step, field: w.field, value: w.value, deleted: false, writer: w.writer }));
    if (contributions.length) {
      emit("join.reduced", caller, { barrier: id, step: "R", field: "items", channel: "append", initial: [], inputs: contributions, completion_order: [], result: contributions.map((c) => c.value) });
      fields.push({ step: "R", field: "items", value: contributions.map((c) => c.value), deleted: false, writer: null });
    }
    emit("join.published", caller, { barrier: id, target: caller ? "caller-scope" : "canonical", fields, discarded });
    if (caller === "" && checkpoint === "root-join" && fields.length) {
      if (pick(0.3)) {
        emit("checkpoint.failed", "", { barrier: id, error: { type: "ParallelCheckpointError", code: "parallel_checkpoint", message: "disk full", extra: {} } });
        failed = true;
      } else emit("checkpoint.saved", "", { barrier: id, revision: 2 });
    }
    return { writes, contributions };
  };

  const roots = 1 + Math.floor(random() * 2);
  for (let i = 0; i < roots && !failed; i += 1) {
    if (barrier("", `b${i}`, 0, i ? `${i}:` : "") === null) failed = true;
  }
  if (failed) emit("turn.failed", "", { error: { type: "ParallelError", code: "parallel", message: "failed", extra: {} } });
  else emit("turn.finished", "", { success: true, completed: true, message: "done", content_type: "text/plain" });
  if (pick(0.25)) {
    // Cut short: the executor went silent somewhere in the middle.
    const cut = 3 + Math.floor(random() * (events.length - 3));
    const kept = events.slice(0, cut);
    const last = kept.at(-1);
    kept.push({ v: 1, run_id: last.run_id, session_id: last.session_id, seq: cut, time: last.time, offset: last.offset, path: "", type: "run.interrupted", reason: "silent", silent_for: 30 });
    return kept;
  }
  return events;
}

test("generated barrier trees: nothing is marked published that did not reach its target", () => {
  const seen = { published: 0, discarded: new Set(), budget: 0 };
  for (let seed = 1; seed <= 300; seed += 1) {
    const events = generate(seed);
    checkEveryPrefix(events, `generated seed ${seed}`);
    const run = fold(events);
    assert.deepStrictEqual(run.anomalies, [], `generated seed ${seed} is a well-formed trace`);
    for (const path of run.invocations.keys()) {
      if (!path) continue;
      const p = publicationOf(run, path);
      if (p.state === "published") seen.published += 1;
      if (p.state === "discarded") seen.discarded.add(p.reason);
      if (p.reason === "cancelled" && p.text.includes("token budget")) seen.budget += 1;
    }
  }
  // The generator must reach every case it claims to, or the property proves little.
  assert.ok(seen.published > 50, `published branches: ${seen.published}`);
  assert.ok(seen.budget > 0, "a branch stopped by the token budget says so");
  for (const reason of ["rejected", "cancelled", "late", "atomic", "invalidated", "rollback", "caller", "not-joined"]) {
    assert.ok(seen.discarded.has(reason), `no generated branch was discarded as ${reason}: ${[...seen.discarded]}`);
  }
});

test("a caller that fails after its inner join takes the inner branches down with it", () => {
  const events = [];
  const add = (type, path, fields) => events.push({ v: 1, run_id: "r", session_id: "s", seq: events.length, offset: events.length, time: 0, path, type, ...fields });
  const req = (path, index) => ({ index, path, step: "W", key: `k${path}`, params: {}, user_message: null });
  add("turn.started", "", { flow: "F", message: "m" });
  add("barrier.forked", "", { barrier: "b0", caller_step: "Root", requests: [req("0", 0), req("1", 1)], policy: "retain-successes", checkpoint: "none", base: "canonical" });
  add("branch.started", "0", { barrier: "b0", index: 0, key: "k0", step: "W" });
  add("barrier.forked", "0", { barrier: "0/b0", caller_step: "W", requests: [req("0.0", 0)], policy: "retain-successes", checkpoint: "none", base: "0" });
  add("branch.started", "0.0", { barrier: "0/b0", index: 0, key: "k0.0", step: "W" });
  add("state.replaced", "0.0", { step: "W", field: "found", value: 1, base: null, draft: true });
  add("branch.fulfilled", "0.0", { barrier: "0/b0", index: 0, key: "k0.0", output: 1 });
  add("join.published", "0", { barrier: "0/b0", target: "caller-scope", fields: [{ step: "W", field: "found", value: 1, deleted: false, writer: "0.0" }], discarded: [] });
  const scoped = fold(events);
  assert.equal(branchMarks(scoped, "0.0").state, "scoped", "in its caller's scope while the caller runs");
  assert.equal(barrierMarks(scoped, "0/b0").badge.kind, "scoped");
  add("branch.rejected", "0", { barrier: "b0", index: 0, key: "k0", error: { type: "ValueError", code: "internal", message: "bad plan", extra: {} }, cancelled: false, started: true });
  add("branch.started", "1", { barrier: "b0", index: 1, key: "k1", step: "W" });
  add("branch.fulfilled", "1", { barrier: "b0", index: 1, key: "k1", output: null });
  add("join.published", "", { barrier: "b0", target: "canonical", fields: [], discarded: [{ index: 0, key: "k0", reason: "rejected" }] });
  const run = fold(events);
  const inner = branchMarks(run, "0.0");
  assert.deepStrictEqual([inner.state, inner.reason, inner.dot], ["discarded", "caller", "discarded"]);
  assert.match(inner.text, /k0 \(0\) failed after this join: .*ValueError: bad plan/);
  assert.equal(barrierMarks(run, "0/b0").state, "discarded");
  assert.equal(branchMarks(run, "1").state, "nothing");
  assert.equal(barrierMarks(run, "b0").badge.label, "nothing published");
});

test("a join's applied index answers every path as the raw record does, wherever its branches' paths come from", () => {
  // The index reads a branch's request index off its path; a path it cannot read (foreign
  // names, requests out of order, a prefix of another branch's path) is looked up by name.
  const cases = [
    { caller: "", branches: Array.from({ length: 12 }, (_, i) => String(i)) },
    { caller: "4", branches: Array.from({ length: 12 }, (_, i) => `4.1:${i}`) },
    { caller: "2.0:3", branches: Array.from({ length: 3 }, (_, i) => `2.0:3.${i}`) },
    { caller: "", branches: ["a", "b", "c"] },
    { caller: "", branches: ["0", "2", "1", "10"] },
    { caller: "", branches: [undefined, "1", "2"] }, // a foreign request without a path
    // Branches nothing of which was applied, among ones that published.
    { caller: "", branches: Array.from({ length: 12 }, (_, i) => String(i)), quiet: ["3", "10"] },
    { caller: "", branches: ["a", "b", "c"], quiet: ["b"] },
    // A foreign record whose branch paths have more parts than its barrier's depth.
    { caller: "", branches: ["x.0", "x.1", "x.2"] },
  ];
  for (const { caller, branches, quiet = [] } of cases) {
    const named = branches.filter((b) => typeof b === "string");
    const under = (suffix) => named.filter((b) => !quiet.includes(b))
      .flatMap((b) => [b, `${b}.${suffix}`, `${b}0`, `${b}0.${suffix}`]);
    const origins = [...under("0:1"), ...under("1:2.0:5"), "elsewhere", "01"];
    const barrier = {
      caller, branches, applied: null,
      published: [
        { step: "S", field: "w", writer: `${named[0]}.0:1`, deleted: false },
        { step: "S", field: "x", writer: null, deleted: false },
        { step: "S", field: "gone", writer: named[1], deleted: true },
      ],
      reductions: [
        { step: "S", field: "x", inputs: origins.filter((_, i) => i % 3 !== 1).map((path) => ({ path })) },
        { step: "S", field: "unlisted", inputs: origins.map((path) => ({ path })) },
        { step: "S", field: "x", inputs: [{ path: null }, {}, null, { path: named[0] }] },
      ],
    };
    const index = appliedOf(barrier);
    const expected = (path) => {
      const out = [];
      for (const f of barrier.published) {
        if (f.writer && inSubtree(f.writer, path)) out.push({ step: f.step, field: f.field, kind: f.deleted ? "removal" : "replacement", origin: f.writer });
      }
      for (const r of barrier.reductions) {
        if (r.field === "unlisted") continue;
        for (const input of r.inputs) {
          if (typeof input?.path === "string" && inSubtree(input.path, path)) out.push({ step: r.step, field: r.field, kind: "contribution", origin: input.path });
        }
      }
      return out.length ? out : undefined;
    };
    const depth = caller === "" ? 1 : caller.split(".").length + 1;
    for (const path of new Set([...named, ...origins, ...origins.map((o) => o.split(".").slice(0, depth + 1).join("."))])) {
      if (path.split(".").length < depth) continue; // above the barrier's branches: not indexed
      const want = expected(path);
      assert.deepEqual(index.get(path), want, `${caller || "root"}: ${path}`);
      assert.equal(index.has(path), want !== undefined, `${caller || "root"}: has ${path}`);
    }
    branches.forEach((path, i) => {
      if (typeof path === "string") {
        assert.equal(index.hasBranch(i), expected(path) !== undefined, `${caller || "root"}: branch ${i}`);
      }
    });
  }
});
