// A run read from OpenTelemetry spans (the OTLP receiver, picoflow_web/record/span_events.py)
// reads in span words, and says that its tree and timings are inferred and that it has no
// state views (labels.js, publication.js).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { messageText } from "../../static/picoflow_web/js/format.js";
import { barrierLabelOf, fromLangGraph, fromSpans, labelOf, spanService, spansNotice, taskNounOf } from "../../static/picoflow_web/js/labels.js";
import { spanCounts } from "../../static/picoflow_web/js/publication.js";
import { fork, request, trace } from "./trace_builder.mjs";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");

/**
 * The events the receiver derives for an agent span with six overlapping tool spans (two
 * of one name, keyed `name:index`), one failed, then a second group of two overlapping
 * spans, and a search span with two overlapping children of its own.
 */
const spanRun = (flow = "OpenTelemetry:trip-planner") => {
  const { events, add } = trace();
  add("turn.started", { flow, message: null });
  add("step.entered", { step: "invoke_agent trip-planner", level: 1, how: "start" });
  const root = "invoke_agent trip-planner";
  const tools = ["execute_tool flights", "execute_tool hotels", "execute_tool weather", "execute_tool rates", "search", "search"];
  const requests = tools.map((name, i) => request(i, String(i), name, tools.filter((t) => t === name).length > 1 ? `${name}:${i}` : name));
  add("barrier.forked", fork("b0", requests, { caller_step: root }));
  for (const r of requests) add("branch.started", { barrier: "b0", index: r.index, key: r.key, step: r.step }, r.path);
  add("barrier.forked", fork("4/b0", [request(0, "4.0", "fetch", "fetch:0"), request(1, "4.1", "fetch", "fetch:1")], { caller_step: "search", base: "4" }), "4");
  for (const i of [0, 1]) add("branch.started", { barrier: "4/b0", index: i, key: `fetch:${i}`, step: "fetch" }, `4.${i}`);
  for (const i of [0, 1]) add("branch.fulfilled", { barrier: "4/b0", index: i, key: `fetch:${i}`, output: null }, `4.${i}`);
  add("join.published", { barrier: "4/b0", target: "caller-scope", fields: [], discarded: [] }, "4");
  for (const r of requests.slice(0, 5)) add("branch.fulfilled", { barrier: "b0", index: r.index, key: r.key, output: null }, r.path);
  add("branch.rejected", { barrier: "b0", index: 5, key: "search:5", error: { type: "SpanError", code: "span_error", message: "timeout", extra: {} }, cancelled: false, started: true }, "5");
  add("join.published", { barrier: "b0", target: "canonical", fields: [], discarded: [{ index: 5, key: "search:5", reason: "rejected" }] });
  const second = [request(0, "1:0", "summarise", "summarise"), request(1, "1:1", "translate", "translate")];
  add("barrier.forked", fork("b1", second, { caller_step: root }));
  for (const r of second) add("branch.started", { barrier: "b1", index: r.index, key: r.key, step: r.step }, r.path);
  return fold(events);
};

test("a run whose flow the receiver named is read from spans; LangGraph's and ours are not", () => {
  const run = spanRun();
  assert.equal(fromSpans(run), true);
  assert.equal(fromLangGraph(run), false);
  assert.equal(spanService(run), "trip-planner");
  assert.equal(fromSpans(spanRun("OpenTelemetry")), true);
  assert.equal(spanService(spanRun("OpenTelemetry")), "");
  assert.equal(fromSpans(spanRun("OpenTelemetryish")), false);
  assert.equal(fromSpans(spanRun("LangGraph: g")), false);
  assert.equal(fromSpans(fold(parseJsonl(readFileSync(join(GOLDEN, "nested_fanout.jsonl"), "utf8")))), false);
});

test("a barrier of a span run is the overlapping child spans of its parent span", () => {
  const run = spanRun();
  assert.equal(barrierLabelOf(run, "b0"), "overlapping child spans of invoke_agent trip-planner");
  assert.equal(barrierLabelOf(run, "4/b0"), "overlapping child spans of search");
  // A parent's later group is numbered: the first group's label never changes.
  assert.equal(barrierLabelOf(run, "b1"), "overlapping child spans of invoke_agent trip-planner (2)");
  assert.equal(barrierLabelOf(run, "9/b9"), "9/b9");
});

test("a branch of a span run is its span, keyed by the span's name", () => {
  const run = spanRun();
  assert.equal(taskNounOf(run, "0"), "span execute_tool flights");
  assert.equal(labelOf(run, "0"), "execute_tool flights");
  assert.equal(labelOf(run, "4.1"), "search:4 › fetch:1");
  assert.equal(taskNounOf(run, "4.1"), "span fetch");
});

test("the notices say what is inferred from spans and that there are no state views", () => {
  const run = spanRun();
  const turn = spansNotice(run, "turn");
  assert.match(turn, /^Inferred from OpenTelemetry spans of trip-planner: the barrier tree, branches and timings are inferred from span times/);
  assert.match(turn, /No state views/);
  const barrier = spansNotice(run, "barrier", "4/b0");
  assert.match(barrier, /^Inferred from spans: its branches are child spans of search that overlap in time/);
  assert.match(barrier, /no publication, no state views/);
  const branch = spansNotice(run, "branch", "4.0");
  assert.match(branch, /^Inferred from spans: this branch is the span fetch, its timings the span's start and end\./);
  assert.match(branch, /what this branch could see/);
  assert.match(spansNotice(spanRun("OpenTelemetry"), "turn"), /^Inferred from OpenTelemetry spans: /);
});

test("a span barrier's row counts its spans by how they ended, not by publication", () => {
  const run = spanRun();
  assert.deepEqual(spanCounts(run, "b0").map((n) => [n.kind, n.n]), [["fulfilled", 5], ["rejected", 1]]);
  assert.deepEqual(spanCounts(run, "b1").map((n) => [n.kind, n.n, n.title]), [["running", 2, "2 spans not ended yet"]]);
  assert.deepEqual(spanCounts(run, "nope"), []);
});

test("a model call's message parts in the OTel GenAI conventions read as their text", () => {
  const parts = [{ type: "text", content: "Plan the trip." }, { type: "text", content: "Lisbon" }];
  assert.equal(messageText(parts), "Plan the trip.\nLisbon");
  // The other shapes keep reading as before.
  assert.equal(messageText([{ type: "text", text: "hi" }, "there"]), "hi\nthere");
  assert.equal(messageText([{ type: "image", url: "x" }]), '{"type":"image","url":"x"}');
  assert.equal(messageText("plain"), "plain");
  assert.equal(messageText(null), "");
});
