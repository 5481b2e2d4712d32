// Edge cases of the browser fold that the golden traces do not reach: a failed root-join
// checkpoint, an invalidated join, nested caller-scope publication (and its loss when the
// caller fails), stopping at any seq, and resumed streams.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  applyEvent, applyEvents, baseAt, comparable, createRun, fold, published, reachesCanonical,
  viewAt,
} from "../../static/picoflow_web/js/fold.js";
import { fork, request, trace } from "./trace_builder.mjs";

const replaced = (step, field, value, draft = true) => ({ step, field, value, base: null, draft });
const err = (code) => ({ type: "E", code, message: code, extra: {} });

test("a failed root-join checkpoint rolls the publication back", () => {
  const { events, add } = trace();
  add("turn.started", { flow: "F", message: "hi" });
  add("session.loaded", { new_session: false, revision: 3, current_step: "Top", steps: { Top: { a: 1 } }, context: {}, tokens: {} });
  add("barrier.forked", fork("b0", [request(0, "0", "W", "w")], { checkpoint: "root-join" }));
  add("branch.started", { barrier: "b0", index: 0, key: "w", step: "W" }, "0");
  add("state.replaced", replaced("W", "x", 5), "0");
  add("branch.fulfilled", { barrier: "b0", index: 0, key: "w", output: "ok" }, "0");
  const pub = add("join.published", {
    barrier: "b0", target: "canonical", discarded: [],
    fields: [{ step: "W", field: "x", value: 5, deleted: false, writer: "0" },
      { step: "Top", field: "a", value: 2, deleted: false, writer: null }],
  });
  add("checkpoint.failed", { barrier: "b0", error: err("checkpoint_failed") });

  const before = fold(events, pub);
  assert.deepStrictEqual(before.state, { Top: { a: 2 }, W: { x: 5 } });
  assert.equal(published(before, "0").reached, true);

  const run = fold(events);
  // Python's fold leaves the step it had added as an empty object; so do we.
  assert.deepStrictEqual(run.state, { Top: { a: 1 }, W: {} });
  const b0 = run.barriers.get("b0");
  assert.equal(b0.outcome, "invalidated");
  assert.equal(b0.checkpointFailed, true);
  assert.equal(b0.error.code, "checkpoint_failed");
  assert.deepStrictEqual(run.conflicts, ["b0"]);
  assert.equal(published(run, "0").reached, false);
  assert.deepStrictEqual(published(run, "0").replacements, [], "nothing counts as published");
});

test("a checkpoint save records its revision and keeps the publication", () => {
  const { events, add } = trace();
  add("session.loaded", { new_session: true, revision: 1, current_step: null, steps: {}, context: {}, tokens: {} });
  add("barrier.forked", fork("b0", [request(0, "0", "W", "w")], { checkpoint: "root-join" }));
  add("join.published", { barrier: "b0", target: "canonical", discarded: [], fields: [{ step: "W", field: "x", value: 1, writer: "0" }] });
  add("checkpoint.saved", { barrier: "b0", revision: 2 });
  const run = fold(events);
  assert.equal(run.barriers.get("b0").checkpointRevision, 2);
  // A live payload may omit defaults: deleted and writer are filled in.
  assert.deepStrictEqual(run.barriers.get("b0").published, [{ step: "W", field: "x", value: 1, deleted: false, writer: "0" }]);
  assert.deepStrictEqual(run.state, { W: { x: 1 } });
});

function conflictTrace() {
  const { events, add } = trace();
  add("session.loaded", { new_session: true, revision: 1, current_step: "Top", steps: { V: { venue: "Old Hall" } }, context: {}, tokens: {} });
  add("barrier.forked", fork("b0", [request(0, "0", "V", "north"), request(1, "1", "V", "south")]));
  add("branch.started", { barrier: "b0", index: 0, key: "north", step: "V" }, "0");
  add("branch.started", { barrier: "b0", index: 1, key: "south", step: "V" }, "1");
  const north = add("state.replaced", { ...replaced("V", "venue", "Lakeside"), base: "Old Hall" }, "0");
  const south = add("state.replaced", { ...replaced("V", "venue", "Riverside"), base: "Old Hall" }, "1");
  add("branch.fulfilled", { barrier: "b0", index: 0, key: "north", output: "Lakeside" }, "0");
  add("branch.fulfilled", { barrier: "b0", index: 1, key: "south", output: "Riverside" }, "1");
  const provenance = [
    { path: "0", key: "north", step: "V", field: "venue", kind: "replace", value: "Lakeside", base: "Old Hall" },
    { path: "1", key: "south", step: "V", field: "venue", kind: "replace", value: "Riverside", base: "Old Hall" },
  ];
  add("join.invalidated", { barrier: "b0", error: { ...err("parallel_state_conflict"), extra: { provenance } }, provenance });
  return { events, north, south, provenance };
}

test("an invalidated join publishes nothing and keeps its provenance", () => {
  const { events, north, south, provenance } = conflictTrace();
  const run = fold(events);
  assert.deepStrictEqual(run.state, { V: { venue: "Old Hall" } });
  const b0 = run.barriers.get("b0");
  assert.equal(b0.outcome, "invalidated");
  assert.deepStrictEqual(b0.provenance, provenance);
  assert.deepStrictEqual(run.conflicts, ["b0"]);
  assert.deepStrictEqual(b0.counts, { queued: 0, running: 0, fulfilled: 2, rejected: 0 });
  const p = published(run, "0");
  assert.equal(p.outcome, "invalidated");
  assert.equal(p.reached, false);
  assert.deepStrictEqual(p.replacements, []);
  // Each scout saw only its own venue; the other's write is listed as invisible.
  const seen = viewAt(run, "0");
  assert.deepStrictEqual(seen.state, { V: { venue: "Lakeside" } });
  assert.deepStrictEqual(seen.invisible.map((w) => [w.path, w.key, w.seq, w.value]), [["1", "south", south, "Riverside"]]);
  assert.deepStrictEqual(seen.own.map((c) => [c.seq, c.kind]), [[north, "draft"]]);
  assert.deepStrictEqual(baseAt(run, "1"), { V: { venue: "Old Hall" } });
});

function nestedTrace({ callerFails = false } = {}) {
  const { events, add } = trace();
  add("session.loaded", { new_session: true, revision: 1, current_step: "Top", steps: {}, context: {}, tokens: {} });
  add("barrier.forked", fork("b0", [request(0, "0", "P", "planner"), request(1, "1", "F", "side")]));
  add("branch.started", { barrier: "b0", index: 0, key: "planner", step: "P" }, "0");
  add("branch.started", { barrier: "b0", index: 1, key: "side", step: "F" }, "1");
  const plan = add("state.replaced", replaced("P", "plan", "p1"), "0");
  const innerFork = add("barrier.forked", { ...fork("0/b0", [request(0, "0.0", "F", "a")]), caller_step: "P", base: "0" }, "0");
  const late = add("state.replaced", replaced("P", "note", "after fork"), "0");
  add("branch.started", { barrier: "0/b0", index: 0, key: "a", step: "F" }, "0.0");
  const contrib = add("state.contributed", { step: "F", field: "found", value: "x", order: 1, draft: true, result: ["x"] }, "0.0");
  add("branch.fulfilled", { barrier: "0/b0", index: 0, key: "a", output: "x" }, "0.0");
  add("join.reduced", { barrier: "0/b0", step: "F", field: "found", channel: "append", initial: [], inputs: [{ path: "0.0", key: "a", value: "x" }], completion_order: ["0.0"], result: ["x"] }, "0");
  const innerJoin = add("join.published", { barrier: "0/b0", target: "caller-scope", discarded: [], fields: [{ step: "F", field: "found", value: ["x"], deleted: false, writer: null }] }, "0");
  add("state.contributed", { step: "F", field: "found", value: "y", order: 1, draft: true, result: ["y"] }, "1");
  add("branch.fulfilled", { barrier: "b0", index: 1, key: "side", output: "y" }, "1");
  if (callerFails) {
    add("branch.rejected", { barrier: "b0", index: 0, key: "planner", error: err("boom"), cancelled: false, started: true }, "0");
    add("join.reduced", { barrier: "b0", step: "F", field: "found", channel: "append", initial: [], inputs: [{ path: "1", key: "side", value: "y" }], completion_order: ["1"], result: ["y"] });
    add("join.published", { barrier: "b0", target: "canonical", discarded: [{ index: 0, key: "planner", reason: "rejected" }], fields: [{ step: "F", field: "found", value: ["y"], deleted: false, writer: null }] });
  } else {
    add("branch.fulfilled", { barrier: "b0", index: 0, key: "planner", output: "done" }, "0");
    add("join.reduced", { barrier: "b0", step: "F", field: "found", channel: "append", initial: [], inputs: [{ path: "0.0", key: "a", value: "x" }, { path: "1", key: "side", value: "y" }], completion_order: ["1", "0"], result: ["x", "y"] });
    add("join.published", { barrier: "b0", target: "canonical", discarded: [], fields: [{ step: "P", field: "plan", value: "p1", deleted: false, writer: "0" }, { step: "P", field: "note", value: "after fork", deleted: false, writer: "0" }, { step: "F", field: "found", value: ["x", "y"], deleted: false, writer: null }] });
  }
  return { events, plan, innerFork, late, contrib, innerJoin };
}

test("a nested join publishes into its caller's scope, then canonically via the outer join", () => {
  const { events, plan, innerFork, late, contrib, innerJoin } = nestedTrace();
  const atInner = fold(events, innerJoin);
  // The inner branch forked from the caller's view at its fork: the plan, not the late note.
  assert.deepStrictEqual(viewAt(atInner, "0.0", innerFork).state, { P: { plan: "p1" } });
  assert.deepStrictEqual(baseAt(atInner, "0.0"), { P: { plan: "p1" } });
  assert.equal(late > innerFork, true);
  // The caller sees the inner publication in its own scope; canonical state does not.
  assert.deepStrictEqual(viewAt(atInner, "0").state, { P: { plan: "p1", note: "after fork" }, F: { found: ["x"] } });
  assert.deepStrictEqual(viewAt(atInner, "0").own.map((c) => [c.seq, c.kind, c.barrier]), [
    [plan, "draft", null], [late, "draft", null], [innerJoin, "join", "0/b0"]]);
  assert.deepStrictEqual(atInner.state, {});
  // The sibling cannot see any of it: the caller's drafts, nor what the inner join
  // published into the caller's scope (the seed's C, which does not see D's and E's results).
  assert.deepStrictEqual(viewAt(atInner, "1").state, {});
  assert.deepStrictEqual(viewAt(atInner, "1").invisible.map((w) => [w.path, w.field, w.kind]), [
    ["0", "plan", "draft"], ["0", "note", "draft"], ["0", "found", "join"]]);
  // Pending: the inner join published, the outer one has not.
  assert.equal(reachesCanonical(atInner, "0.0"), null);
  assert.deepStrictEqual(published(atInner, "0.0").contributions.map((c) => c.value), ["x"]);
  assert.equal(published(atInner, "0.0").target, "caller-scope");
  assert.equal(contrib < innerJoin, true);

  const run = fold(events);
  assert.deepStrictEqual(comparable(run.state), { P: { plan: "p1", note: "after fork" }, F: { found: ["x", "y"] } });
  assert.equal(reachesCanonical(run, "0.0"), true);
  // The outer join's reduction lists the bubbled-up contribution under the planner.
  assert.deepStrictEqual(published(run, "0").contributions.map((c) => c.path), ["0.0"]);
  assert.deepStrictEqual(published(run, "0").replacements.map((f) => f.field), ["plan", "note"]);
});

test("when the caller fails after its inner join, its descendants' updates are discarded", () => {
  const { events } = nestedTrace({ callerFails: true });
  const run = fold(events);
  assert.deepStrictEqual(run.state, { F: { found: ["y"] } });
  assert.equal(reachesCanonical(run, "0.0"), false, "the inner branch's write died with its caller");
  assert.equal(published(run, "0").discarded, "rejected");
  assert.equal(published(run, "1").reached, true);
  assert.deepStrictEqual(run.barriers.get("b0").counts, { queued: 0, running: 0, fulfilled: 1, rejected: 1 });
});

test("the fold stops at any seq and equals the incremental model there", () => {
  const { events } = nestedTrace();
  for (let upto = 0; upto < events.length; upto += 1) {
    const stopped = fold(events, upto);
    const incremental = createRun();
    for (const e of events.slice(0, upto + 1)) applyEvent(incremental, e);
    assert.equal(stopped.lastSeq, upto);
    assert.deepStrictEqual(stopped.state, incremental.state);
    assert.deepStrictEqual([...stopped.invocations.keys()], [...incremental.invocations.keys()]);
    for (const [path, inv] of stopped.invocations) {
      assert.equal(inv.status, incremental.invocations.get(path).status);
      if (path) assert.deepStrictEqual(viewAt(stopped, path), viewAt(incremental, path));
    }
  }
  // Branches exist from their fork on, queued until they start: no orphans at any point.
  const atFork = fold(events, 1);
  assert.deepStrictEqual([...atFork.invocations.values()].map((i) => [i.path, i.status]), [
    ["", "running"], ["0", "queued"], ["1", "queued"]]);
  // viewAt(seq) of the full fold equals the view of the fold stopped at that seq.
  const full = fold(events);
  for (let seq = 1; seq < events.length; seq += 1) {
    const stopped = fold(events, seq);
    for (const path of stopped.invocations.keys()) {
      if (path) assert.deepStrictEqual(viewAt(full, path, seq).state, viewAt(stopped, path).state, `${path}@${seq}`);
    }
  }
});

test("resent events are ignored and gaps are recorded, not hidden", () => {
  const { events } = conflictTrace();
  const run = createRun();
  assert.equal(applyEvents(run, events.slice(0, 4)), 4);
  assert.equal(applyEvents(run, events.slice(2, 6)), 2, "a resumed stream may overlap");
  assert.equal(run.events.length, 6);
  assert.deepStrictEqual(run.anomalies, []);
  applyEvent(run, events[8]);
  assert.deepStrictEqual(run.anomalies, [{ seq: 8, message: "events 6..7 missing" }]);
  assert.equal(applyEvent(run, events[7]), false, "an event older than the last applied is dropped");
});

test("model and tool calls, tokens and cancellation land on their invocation", () => {
  const { events, add } = trace();
  add("session.loaded", { new_session: true, revision: 1, current_step: "Top", steps: {}, context: {}, tokens: { input_tokens: 5, output_tokens: 1, total_tokens: 6 } });
  add("barrier.forked", fork("b0", [request(0, "0", "W", "w"), request(1, "1", "W", "q")], { max_concurrency: 1 }));
  add("branch.started", { barrier: "b0", index: 0, key: "w", step: "W" }, "0");
  add("model.started", { step: "W", call: 1, attempt: 1, model: { name: "m" }, messages: [{ type: "human", content: "go" }], tools: ["t"] }, "0");
  add("model.failed", { step: "W", call: 1, attempt: 1, latency: 0.1, error: err("rate"), retrying: true }, "0");
  add("model.started", { step: "W", call: 1, attempt: 2, model: { name: "m" }, messages: [{ type: "human", content: "go" }], tools: ["t"] }, "0");
  add("model.finished", { step: "W", call: 1, attempt: 2, latency: 0.1, content: "", tool_calls: [{ id: "c1", name: "t", args: {} }], input_tokens: 3, output_tokens: 2, total_tokens: 5, finish_reason: "tool_calls", accepted: true }, "0");
  add("tool.started", { step: "W", name: "t", call_id: "c1", args: { a: 1 } }, "0");
  add("tool.finished", { step: "W", name: "t", call_id: "c1", status: "success", result: "r", transition: null, outcome: "handled" }, "0");
  add("cancel.requested", { barrier: "b0", reason: "deadline" });
  add("cancel.propagated", { barrier: "b0", running: ["0"], queued: ["1"] });
  add("branch.rejected", { barrier: "b0", index: 1, key: "q", error: err("branch_cancelled"), cancelled: true, started: false }, "1");
  add("cancel.grace_expired", { barrier: "b0", closed: ["0"] });
  add("branch.rejected", { barrier: "b0", index: 0, key: "w", error: err("branch_cancelled"), cancelled: true, started: true }, "0");
  const run = fold(events);
  const w = run.invocations.get("0");
  assert.deepStrictEqual(w.models.map((m) => [m.attempt, !!m.failed, !!m.finished]), [[1, true, false], [2, false, true]]);
  assert.deepStrictEqual(w.tools.map((t) => [t.name, t.args, t.finished.result]), [["t", { a: 1 }, "r"]]);
  assert.equal(w.tokens, 5);
  assert.deepStrictEqual(run.tokens, { input_tokens: 8, output_tokens: 3, total_tokens: 11 });
  assert.equal(w.cancelTold, true);
  assert.equal(w.lostRights, true);
  assert.equal(w.cancelled, true);
  const b0 = run.barriers.get("b0");
  assert.equal(b0.cancelReason, "deadline");
  assert.deepStrictEqual(b0.cancel.queued, ["1"]);
  assert.deepStrictEqual(b0.cancel.closed, ["0"]);
  assert.equal(run.invocations.get("1").started, null, "a queued branch never started");
  assert.equal(b0.maxConcurrency, 1);
});
