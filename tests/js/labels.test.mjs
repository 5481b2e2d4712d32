// Labels people read: requests counted from 1, errors by their type and message.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { describeEvent, errorLabel, errorText, requestOrdinal } from "../../static/picoflow_web/js/format.js";
import { barrierLabelOf, barrierNameOf, barrierOrdinal, fieldLabelOf, fromLangGraph, labelOf, taskNounOf } from "../../static/picoflow_web/js/labels.js";
import { criticalPath } from "../../static/picoflow_web/js/critical_path.js";
import { cancelTitle, timeMarkers } from "../../static/picoflow_web/js/time_marks.js";
import { fork, request, trace } from "./trace_builder.mjs";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");

test("a request's place in its barrier is counted from 1", () => {
  assert.equal(requestOrdinal(0, 2), "1 of 2");
  assert.equal(requestOrdinal(1, 2), "2 of 2");
});

test("a flow's own error is named by its type, not the generic internal code", () => {
  const run = fold(parseJsonl(readFileSync(join(GOLDEN, "atomic_failure.jsonl"), "utf8")));
  const car = run.invocations.get("2");
  assert.equal(car.error.code, "internal", "the golden's error arrives with the generic code");
  assert.equal(errorLabel(car.error), "SoldOutError");
  assert.equal(errorText(car.error), "SoldOutError: SOLD OUT: no rental cars on those dates");
  const rejected = run.events.find((e) => e.type === "branch.rejected");
  assert.equal(describeEvent(rejected), "car: SoldOutError: SOLD OUT: no rental cars on those dates");
});

test("a code that says more than internal is kept", () => {
  const error = { type: "ParallelStateConflictError", code: "parallel_state_conflict", message: "two writers" };
  assert.equal(errorText(error), "ParallelStateConflictError: two writers [parallel_state_conflict]");
  assert.equal(errorLabel({ code: "timeout" }), "timeout");
  assert.equal(errorText({ type: "Boom" }), "Boom");
});

// Paths and barrier ids as labels (labels.js), against the committed goldens.
const goldenRun = (name) => fold(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8")));

test("a nested branch reads as its callers' and its own branch keys", () => {
  const run = goldenRun("nested_fanout");
  assert.equal(labelOf(run, ""), "turn");
  assert.equal(labelOf(run, "0"), "Planner");
  assert.equal(labelOf(run, "0.0"), "Planner › papers");
  assert.equal(labelOf(run, "0.1"), "Planner › news");
  assert.equal(labelOf(run, "1"), "archive");
});

test("a barrier reads as who forked it and the ordinal its id carries", () => {
  const run = goldenRun("nested_fanout");
  assert.equal(barrierLabelOf(run, "b0"), "ResearchDesk › barrier 0");
  assert.equal(barrierLabelOf(run, "0/b0"), "Planner › barrier 0");
});

test("a caller's second barrier and the paths of its branches read by their keys", () => {
  const run = goldenRun("cancelled");
  assert.equal(barrierLabelOf(run, "b1"), "Archivist › barrier 1");
  assert.equal(labelOf(run, "1:0"), "east");
  assert.equal(labelOf(run, "1:1.2"), "west › west-3");
  assert.equal(barrierLabelOf(run, "1:1/b0"), "west › barrier 0");
});

test("what the run does not know yet reads as the path or id itself", () => {
  const run = goldenRun("nested_fanout");
  assert.equal(labelOf(run, "0.7"), "Planner › 7");
  assert.equal(labelOf(fold([]), "2.1"), "2 › 1");
  assert.equal(barrierLabelOf(run, "9/b3"), "9/b3");
});

test("a label is built from keys, not from the path text: a renamed key shows", () => {
  const run = goldenRun("nested_fanout");
  run.invocations.get("0").key = "Lead";
  assert.equal(labelOf(run, "0.1"), "Lead › news");
  assert.equal(barrierLabelOf(run, "0/b0"), "Lead › barrier 0");
});

// A run recorded from LangGraph (runtime/integrations/langgraph) reads in LangGraph's words.
const langGraphRun = (flow) => {
  const { events, add } = trace();
  add("turn.started", { flow, message: null });
  let n = 0;
  const superstep = (requests) => {
    const id = `b${n}`;
    n += 1;
    add("barrier.forked", fork(id, requests, { caller_step: "state", policy: "atomic" }));
    for (const r of requests) add("branch.started", { barrier: id, index: r.index, key: r.key, step: r.step }, r.path);
    for (const r of requests) add("branch.fulfilled", { barrier: id, index: r.index, key: r.key, output: {} }, r.path);
    add("join.published", { barrier: id, target: "canonical", fields: [], discarded: [] });
  };
  superstep([request(0, "0", "fan", "fan")]);
  superstep([request(0, "1:0", "worker", "worker:0"), request(1, "1:1", "worker", "worker:1")]);
  return fold(events);
};

test("a LangGraph run's barriers are its supersteps, numbered as LangGraph numbers them", () => {
  const run = langGraphRun("LangGraph: my_graph");
  assert.equal(fromLangGraph(run), true);
  // LangGraph's superstep 0 runs __start__ (the turn's input); the first nodes run in 1.
  assert.deepEqual(["b0", "b1"].map((id) => barrierLabelOf(run, id)), ["superstep 1", "superstep 2"]);
});

test("a LangGraph task is a node, or a Send when LangGraph pushed it", () => {
  const run = langGraphRun("LangGraph");
  assert.equal(taskNounOf(run, "0"), "node fan");
  assert.equal(taskNounOf(run, "1:1"), "Send to worker");
  assert.equal(fieldLabelOf(run, "state", "items"), "channel items");
});

test("our own runs keep our words", () => {
  const run = langGraphRun("LangGraphLike");
  assert.equal(fromLangGraph(run), false);
  assert.equal(barrierLabelOf(run, "b1"), "state › barrier 1");
  assert.equal(taskNounOf(run, "1:1"), "worker");
  assert.equal(fieldLabelOf(run, "state", "items"), "state.items");
  assert.equal(fromLangGraph(goldenRun("nested_fanout")), false);
});

// One barrier, one number: the label, the id beside it and every sentence that names it.
test("a barrier's label and its id name the same number, however its caller counts", () => {
  const run = goldenRun("cancelled");
  for (const id of run.barriers.keys()) {
    const ordinal = barrierOrdinal(id);
    assert.notEqual(ordinal, null, id);
    assert.match(barrierLabelOf(run, id), new RegExp(`barrier ${ordinal}$`), id);
    assert.equal(barrierNameOf(run, id), `${barrierLabelOf(run, id)} (${id})`);
  }
  assert.equal(barrierOrdinal("0.1/b12"), 12);
  assert.equal(barrierOrdinal("superstep"), null);
  assert.equal(barrierNameOf(run, "9/b3"), "9/b3");
});

test("the timing panels name a barrier by its label and id, never by a bare id", () => {
  const run = goldenRun("nested_fanout");
  const cp = criticalPath(run, "b0");
  assert.ok(cp.sentence.startsWith("The join of ResearchDesk › barrier 0 (b0) waited on"), cp.sentence);
  const cancelled = goldenRun("cancelled");
  const marks = timeMarkers(cancelled, { start: 0, end: 1e9 }).filter((m) => m.kind === "grace");
  for (const m of marks) assert.ok(m.title.includes(barrierNameOf(cancelled, m.barrier)), m.title);
  const id = [...cancelled.barriers.values()].find((b) => b.cancel).id;
  assert.ok(cancelTitle(cancelled, id, 0).includes(`for ${barrierNameOf(cancelled, id)}:`));
});

test("a paged fork is listed with all its branches, its later pages by the requests they bring", () => {
  const run = fold(parseJsonl(readFileSync(join(GOLDEN, "paged_fork.jsonl"), "utf8")));
  const head = run.events.find((e) => e.type === "barrier.forked");
  const page = run.events.find((e) => e.type === "barrier.requested");
  assert.equal(describeEvent(head), "b0: 3 branches, atomic");
  assert.equal(describeEvent(page), "b0: 1 more request from request 3");
  const old = fold(parseJsonl(readFileSync(join(GOLDEN, "atomic_failure.jsonl"), "utf8")));
  assert.equal(describeEvent(old.events.find((e) => e.type === "barrier.forked")), "b0: 3 branches, atomic");
  assert.deepEqual(run.barriers.get("b0").branches, old.barriers.get("b0").branches);
  assert.deepEqual(run.barriers.get("b0").counts, old.barriers.get("b0").counts);
  assert.equal(run.branchCount, old.branchCount);
});

test("a paged cancellation and join say how many in all, their pages what they bring", () => {
  const run = fold(parseJsonl(readFileSync(join(GOLDEN, "paged_cancellation.jsonl"), "utf8")));
  const old = fold(parseJsonl(readFileSync(join(GOLDEN, "cancellation.jsonl"), "utf8")));
  const of = (r, type) => r.events.find((e) => e.type === type);
  assert.equal(describeEvent(of(run, "cancel.propagated")), "b0: running 0 … (2 in all); queued 2 … (2 in all)");
  assert.equal(describeEvent(of(run, "list.continued")), "b0 cancel.propagated: 1 more running from 2");
  assert.equal(describeEvent(of(run, "join.published")), describeEvent(of(old, "join.published")));
  assert.equal(describeEvent(of(run, "join.reduced")), describeEvent(of(old, "join.reduced")));
  const cancel = (r) => { const c = r.barriers.get("b0").cancel; return [c.running, c.queued, c.closed]; };
  assert.deepEqual(cancel(run), cancel(old));
  assert.deepEqual(run.barriers.get("b0").discarded, old.barriers.get("b0").discarded);
  assert.deepEqual([...run.barriers.get("b0").discardedAt.keys()], [...old.barriers.get("b0").discardedAt.keys()]);
  assert.deepEqual(run.barriers.get("b0").reductions.map((r) => [r.inputs, r.completion_order]),
    old.barriers.get("b0").reductions.map((r) => [r.inputs, r.completion_order]));
  assert.deepEqual([...run.invocations.values()].map((i) => [i.path, i.cancelTold, i.lostRights]),
    [...old.invocations.values()].map((i) => [i.path, i.cancelTold, i.lostRights]));
  assert.deepEqual(run.anomalies, []);
  const conflict = fold(parseJsonl(readFileSync(join(GOLDEN, "paged_conflict.jsonl"), "utf8")));
  const whole = fold(parseJsonl(readFileSync(join(GOLDEN, "conflict.jsonl"), "utf8")));
  assert.deepEqual(conflict.barriers.get("b0").provenance, whole.barriers.get("b0").provenance);
});
