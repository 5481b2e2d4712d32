// The turn's inspector is drawn again when what it shows changed, and only then: checked
// after every event of every golden trace against what the panel reads of the fold.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvent, createRun, eventsOf, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { turnSignature } from "../../static/picoflow_web/js/turn_signature.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const goldens = readdirSync(GOLDEN).filter((f) => f.endsWith(".jsonl")).sort();

/** Everything `rootInspector` (inspector_ui.js) reads of the fold, as text. @param {any} run */
function shown(run) {
  const root = run.invocations.get("");
  return JSON.stringify({
    flow: run.flow, message: run.message, status: run.status, conflicts: run.conflicts, cursor: run.cursor,
    tokens: run.tokens, barriers: run.barriers.size, branches: run.branchCount, reply: run.reply,
    error: run.error, interruption: run.interruption, cancellation: run.cancellation, state: run.state,
    unsaved: run.unsaved, trail: run.trail, anomalies: run.anomalies, overflows: run.overflows,
    models: root.models, tools: root.tools, events: eventsOf(run, root).map((e) => e.seq),
  });
}

for (const name of goldens) {
  test(`${name}: the turn's signature changes whenever what its panel shows does`, () => {
    for (const events of runsOf(parseJsonl(readFileSync(join(GOLDEN, name), "utf8"))).values()) {
      const run = createRun();
      let before = shown(run);
      let signature = turnSignature(run);
      for (const event of events) {
        applyEvent(run, event);
        const now = shown(run);
        const next = turnSignature(run);
        if (now !== before) assert.notEqual(next, signature, `seq ${event.seq} (${event.type}) changed the panel`);
        before = now;
        signature = next;
      }
    }
  });
}

test("a fork's branch events leave the turn's panel as it was", () => {
  const events = [];
  const add = (type, path, fields) => events.push({ v: 1, run_id: "r", session_id: "s", seq: events.length, offset: events.length, time: 0, path, type, ...fields });
  const width = 50;
  const requests = Array.from({ length: width }, (_, i) => ({ index: i, path: String(i), step: "W", key: `k${i}`, params: {}, user_message: null }));
  add("turn.started", "", { flow: "F", message: "m" });
  add("barrier.forked", "", { barrier: "b0", caller_step: "Root", requests, policy: "retain-successes", checkpoint: "none", base: "canonical" });
  const forked = events.length;
  for (let i = 0; i < width; i += 1) {
    add("branch.started", String(i), { barrier: "b0", index: i, key: `k${i}`, step: "W" });
    add("state.replaced", String(i), { step: "W", field: `t${i}`, value: i, draft: true });
    add("branch.fulfilled", String(i), { barrier: "b0", index: i, key: `k${i}`, output: i });
  }
  const run = createRun();
  const signatures = new Set();
  events.forEach((event, at) => {
    applyEvent(run, event);
    if (at >= forked - 1) signatures.add(turnSignature(run));
  });
  assert.equal(run.invocations.get("9").status, "fulfilled");
  assert.equal(signatures.size, 1, "nothing the turn's panel shows changed after the fork");
  add("state.replaced", "", { step: "W", field: "done", value: true, draft: false });
  applyEvent(run, events[events.length - 1]);
  assert.ok(!signatures.has(turnSignature(run)), "a write to the canonical state does change it");
});
