// The cancellation cascade of a barrier, read from the committed golden traces: who asked,
// when, and where each branch stood, exactly as the recorded events say.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { cascadeOf, cascadeSentence } from "../../static/picoflow_web/js/cascade.js";
import { fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
// A golden may hold several turns; the first is the one with the barriers.
const events = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()][0];
const one = (list, type, barrier) => {
  const found = list.filter((e) => e.type === type && e.barrier === barrier);
  assert.equal(found.length, 1, `one ${type} for ${barrier}`);
  return found[0];
};

test("the cancelled golden: 1:0/b0 had 1:0.1 running, 1:0.2 queued and 1:0.0 done, asked by ada from b1", () => {
  const list = events("cancelled");
  const c = cascadeOf(fold(list), "1:0/b0");
  const requested = one(list, "cancel.requested", "1:0/b0");
  const propagated = one(list, "cancel.propagated", "1:0/b0");
  assert.deepStrictEqual(c.running, ["1:0.1"]);
  assert.deepStrictEqual(c.queued, ["1:0.2"]);
  assert.deepStrictEqual([c.running, c.queued], [propagated.running, propagated.queued]);
  assert.deepStrictEqual(c.finished, ["1:0.0"]);
  assert.deepStrictEqual(c.late, []);
  assert.equal(c.graceEnded, null, "no cancel.grace_expired for it, so no grace end");
  assert.deepStrictEqual(c.requested, { seq: requested.seq, t: requested.offset });
  assert.equal(c.reason, "Stop pressed in the dashboard");
  assert.equal(c.requestedBy, list.find((e) => e.type === "turn.cancelled").requested_by);
  assert.equal(c.requestedBy, "ada");
  assert.deepStrictEqual(c.from, ["b1"]);
  assert.deepStrictEqual(c.branches.map((b) => [b.path, b.at, b.status]),
    [["1:0.0", "finished", "fulfilled"], ["1:0.1", "running", "fulfilled"], ["1:0.2", "queued", "rejected"]]);
  // No model calls in this flow: time is what they spent.
  const running = c.branches[1];
  const started = list.find((e) => e.type === "branch.started" && e.path === "1:0.1");
  const ended = list.find((e) => e.type === "branch.fulfilled" && e.path === "1:0.1");
  assert.equal(running.tokens, null);
  assert.equal(running.elapsed, ended.offset - started.offset);
  assert.equal(running.after, ended.offset - requested.offset);
  assert.equal(c.branches[2].elapsed, null, "a queued branch never ran");
  assert.equal(cascadeSentence(c),
    "Cancel requested: Stop pressed in the dashboard (asked by ada), passed down from b1. At that moment: 1 running, 1 queued, 1 already finished.");
});

test("the root barrier of the cancelled golden came from nobody above it", () => {
  const c = cascadeOf(fold(events("cancelled")), "b1");
  assert.deepStrictEqual(c.from, []);
  assert.deepStrictEqual(c.running, ["1:0", "1:1"]);
  assert.deepStrictEqual(c.queued, []);
});

test("the cancellation golden: a deadline token names nobody, legacy outlived the grace period, north spent tokens", () => {
  const list = events("cancellation");
  const c = cascadeOf(fold(list), "b0");
  const grace = one(list, "cancel.grace_expired", "b0");
  assert.equal(c.reason, "deadline reached");
  assert.equal(c.requestedBy, null);
  assert.deepStrictEqual(c.running, ["0", "1"]);
  assert.deepStrictEqual(c.queued, ["2", "3"]);
  assert.deepStrictEqual(c.late, grace.closed);
  assert.deepStrictEqual(c.late, ["1"]);
  assert.deepStrictEqual(c.graceEnded, { seq: grace.seq, t: grace.offset });
  const byPath = new Map(c.branches.map((b) => [b.path, b]));
  const tokens = list.filter((e) => e.type === "model.finished" && e.path === "0").reduce((n, e) => n + e.total_tokens, 0);
  assert.ok(tokens > 0);
  assert.equal(byPath.get("0").tokens, tokens);
  assert.equal(byPath.get("0").tokensAtRequest, tokens, "its one model call finished before the deadline");
  assert.equal(byPath.get("1").tokens, null);
  assert.equal(byPath.get("1").late, true);
  assert.equal(byPath.get("0").late, false);
  assert.deepStrictEqual(c.branches.map((b) => b.at), ["running", "running", "queued", "queued"]);
});

test("before cancel.propagated is recorded, no branch is said to be running or queued", () => {
  const list = events("cancelled");
  const requested = one(list, "cancel.requested", "b1");
  const c = cascadeOf(fold(list, requested.seq), "b1");
  assert.deepStrictEqual([c.running, c.queued, c.branches], [[], [], []]);
  assert.equal(cascadeOf(fold(list, requested.seq - 1), "b1"), null, "not cancelled yet");
});

test("a barrier that was never cancelled has no cascade", () => {
  assert.equal(cascadeOf(fold(events("nested_fanout")), "b0"), null);
  assert.equal(cascadeOf(fold(events("cancelled")), "b0"), null);
  assert.equal(cascadeOf(fold(events("cancelled")), "nope"), null);
});
