// What a model is writing, as the lane and the inspector show it (streaming.js), read
// from the fold of the `streamed` golden: two branches whose answers stream, one attempt
// breaking mid-answer, one answer a tool call whose arguments stream.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvents, createRun, fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { mergeToolChunks } from "../../static/picoflow_web/js/fold/calls.js";
import { createCursor } from "../../static/picoflow_web/js/fold/undo.js";
import { LANE_TAIL, laneStream, openStream, openStreams, streamedView, tail, writtenText } from "../../static/picoflow_web/js/streaming.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const events = parseJsonl(readFileSync(join(GOLDEN, "streamed.jsonl"), "utf8"));
const seqOf = (type, path, attempt, nth = 0) => events.filter((e) => e.type === type && e.path === path && (attempt === undefined || e.attempt === attempt))[nth].seq;

test("the open attempt's text grows delta by delta, and its start places the lane's label", () => {
  const first = seqOf("model.delta", "0", 1, 0);
  let run = fold(events, first);
  const intro = run.invocations.get("0");
  assert.equal(openStream(intro)?.text, "The tide ");
  assert.deepEqual(laneStream(intro), { text: "The tide ", offset: intro.models[0].offset, call: 1, attempt: 1 });
  run = fold(events, seqOf("model.delta", "0", 1, 1));
  assert.equal(laneStream(run.invocations.get("0"))?.text, "The tide comes in tw");
  // Before its first delta an open attempt shows nothing (nothing written yet).
  run = fold(events, seqOf("model.started", "1", 1));
  assert.equal(openStream(run.invocations.get("1")), null);
});

test("a tool call's arguments stream by index, with its name once known", () => {
  const run = fold(events, seqOf("model.delta", "1", 1, 1));
  const outro = /** @type {any} */ (openStream(run.invocations.get("1")));
  assert.deepEqual(outro.toolCalls, [{ index: 0, id: "call_tide", name: "tide_table", arguments: '{"harbour": "Brest"}' }]);
  assert.equal(outro.text, "");
  assert.equal(writtenText(outro), 'tide_table({"harbour": "Brest"}');
  assert.deepEqual(streamedView(outro), { state: "writing", text: 'tide_table({"harbour": "Brest"}' });
});

test("a finished attempt shows its reply, not a stream; a failed one keeps what it wrote, marked", () => {
  const run = fold(events);
  const [failed, answered] = run.invocations.get("0").models;
  assert.equal(openStream(run.invocations.get("0")), null);
  assert.equal(laneStream(run.invocations.get("0")), null);
  assert.deepEqual(streamedView(failed), { state: "failed", text: "The tide comes in tw" });
  assert.equal(streamedView(answered), null);
  assert.equal(answered.finished.content, "The tide comes in twice a day.");
  assert.equal(answered.text, answered.finished.content); // the deltas added up to the reply
  assert.deepEqual(openStreams(run), {});
});

test("a replay stopped inside an attempt shows what was written up to that event", () => {
  const live = createRun();
  applyEvents(live, events);
  const cursor = createCursor(live);
  const at = seqOf("model.delta", "0", 2, 1);
  assert.equal(laneStream(cursor.moveTo(at).invocations.get("0"))?.text, "The tide comes in ");
  assert.equal(cursor.moveTo(seqOf("model.delta", "0", 1, 0)).invocations.get("0").models[0].text, "The tide ");
  assert.equal(laneStream(cursor.moveTo(at).invocations.get("0"))?.text, "The tide comes in ");
  assert.equal(laneStream(cursor.moveTo(live.lastSeq).invocations.get("0")), null);
});

test("a delta for an attempt the fold has not seen start, or that ended, changes nothing", () => {
  const base = { run_id: "r", session_id: "s", path: "", offset: 0, time: 0 };
  const started = { ...base, seq: 0, type: "model.started", step: "A", call: 1, attempt: 1, model: {}, messages: [], tools: [] };
  const finished = { ...base, seq: 2, type: "model.finished", step: "A", call: 1, attempt: 1, content: "hi", tool_calls: [], input_tokens: 1, output_tokens: 1, total_tokens: 2, finish_reason: "stop", accepted: true, latency: 0 };
  const delta = (seq, call, text) => ({ ...base, seq, type: "model.delta", step: "A", call, attempt: 1, text, tool_calls: [], chunks: 1 });
  const run = fold([started, delta(1, 2, "stray"), finished, delta(3, 1, "late")]);
  assert.deepEqual(run.invocations.get("").models.map((m) => [m.text, m.deltas]), [["", 0]]);
});

test("tail keeps the end of the text on one line, whole characters only", () => {
  assert.equal(tail("short\ntext"), "short text");
  const long = `${"a".repeat(100)}END`;
  assert.equal(tail(long), `…${long.slice(-LANE_TAIL)}`);
  assert.equal(tail("😀".repeat(70)).length, 1 + 2 * LANE_TAIL);
  assert.equal(tail("ab", 1), "…b");
  // Only the end of a long text is read; what it keeps is the same.
  const answer = `${"word ".repeat(20_000)}and the last words.`;
  assert.equal(tail(answer), `…${answer.slice(-LANE_TAIL)}`);
  assert.equal(tail(`${"x".repeat(1000)}${" ".repeat(600)}end`, 10), "…end");
});

test("tool-call chunks merge into a new array, ordered by index", () => {
  const calls = [{ index: 1, arguments: "{" }];
  const merged = mergeToolChunks(calls, [{ index: 0, id: "c0", name: "f", arguments: "[" }, { index: 1, arguments: "}" }, { arguments: "]" }]);
  assert.deepEqual(merged, [{ index: 0, id: "c0", name: "f", arguments: "[]" }, { index: 1, arguments: "{}" }]);
  assert.deepEqual(calls, [{ index: 1, arguments: "{" }]);
});
