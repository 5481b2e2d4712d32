// An interrupted run in the browser: how fold.js, layout.js and format.js read the
// `interrupted` golden (a ResearchFlow turn whose executor died, then the run.interrupted a
// dashboard records after 30 s of silence), and that every run status has its styles.
// fold.test.mjs already checks that fold.js folds this golden exactly like the Python fold.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { RUN_STATUSES, describeEvent, interruptionText, runStatusKind } from "../../static/picoflow_web/js/format.js";
import { lane, timeBounds, treeRows } from "../../static/picoflow_web/js/layout.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const events = parseJsonl(readFileSync(join(ROOT, "tests", "golden", "interrupted.jsonl"), "utf8"));
const REASON = "no events or heartbeats for 30 s";

test("the interrupted golden folds to an interrupted run with its branches still running", () => {
  const run = fold(events);
  const last = events.at(-1);
  assert.equal(last.type, "run.interrupted");
  assert.equal(run.status, "interrupted");
  assert.deepStrictEqual(run.interruption, { seq: last.seq, reason: REASON, silent_for: 30 });
  assert.deepStrictEqual(run.anomalies, []);
  const flags = Object.fromEntries([...run.invocations].filter(([p]) => p).map(([p, inv]) => [p, [inv.status, inv.interrupted]]));
  assert.deepStrictEqual(flags, {
    0: ["running", true], 1: ["running", true], "0.0": ["fulfilled", false], "0.1": ["running", true],
  });
  for (const b of run.barriers.values()) assert.deepStrictEqual([b.outcome, b.interrupted], ["open", true]);
  // The silence does not count as run time: the run ends at its last report.
  assert.equal(run.endOffset, events.at(-2).offset);
  assert.ok(last.offset >= run.endOffset + 30);
  // Before the interruption it is a run still running, nothing flagged.
  const cut = fold(events, last.seq - 1);
  assert.equal(cut.status, "running");
  assert.equal(cut.interruption, null);
  assert.ok([...cut.invocations.values()].every((inv) => !inv.interrupted));
});

test("the tree shows the turn interrupted, and a running branch's lane ends at the last report", () => {
  const run = fold(events);
  const rows = treeRows(run);
  assert.equal(rows[0].kind, "root");
  assert.equal(rows[0].status, "interrupted");
  const bounds = timeBounds(run, null);
  assert.equal(bounds.end, run.endOffset);
  const news = rows.find((r) => r.kind === "branch" && r.path === "0.1");
  assert.ok(news && news.inv.interrupted);
  const running = lane(news, run, bounds, null).segments.find((s) => s.kind === "running");
  assert.ok(running);
  assert.equal(running.t1, run.endOffset);
  assert.equal(running.x1, 1);
});

test("run statuses: interrupted beside queued, running, finished, failed and cancelled; unknown ones show muted", () => {
  assert.deepStrictEqual(RUN_STATUSES, ["queued", "running", "finished", "failed", "interrupted", "cancelled"]);
  for (const status of RUN_STATUSES) assert.equal(runStatusKind(status), status);
  assert.equal(runStatusKind("exploded"), "muted");
  assert.equal(runStatusKind(null), "muted");
  assert.equal(runStatusKind(undefined), "muted");
});

test("the reason of an interruption reads as a sentence, with or without a reason", () => {
  assert.equal(interruptionText({ reason: REASON }), `Interrupted: the executor stopped reporting (${REASON}).`);
  assert.equal(interruptionText({ reason: "  " }), "Interrupted: the executor stopped reporting.");
  assert.equal(interruptionText(null), "Interrupted: the executor stopped reporting.");
  assert.equal(interruptionText(undefined), "Interrupted: the executor stopped reporting.");
  assert.equal(describeEvent(events.at(-1)), `${REASON} (silent for 30.0s)`);
});

test("every run status has its badge, dot and runs-list colours in app.css", () => {
  const css = readFileSync(join(ROOT, "static", "picoflow_web", "css", "app.css"), "utf8");
  for (const status of RUN_STATUSES) {
    assert.match(css, new RegExp(`\\.pf-badge-${status}\\b`), `.pf-badge-${status}`);
    assert.match(css, new RegExp(`\\.pf-dot-${status}\\b`), `.pf-dot-${status}`);
  }
  // A finished run's row is the plain one; every other status marks its row.
  for (const status of RUN_STATUSES.filter((s) => s !== "finished")) assert.match(css, new RegExp(`\\.pf-run-row\\.pf-status-${status}\\b`), `.pf-run-row.pf-status-${status}`);
  for (const status of ["failed", "interrupted", "cancelled"]) {
    assert.match(css, new RegExp(`\\.pf-reply\\.pf-reply-${status}\\b`));
  }
  const index = readFileSync(join(ROOT, "templates", "picoflow_web", "index.html"), "utf8");
  for (const status of RUN_STATUSES) assert.match(index, new RegExp(`<option value="${status}">`), `status filter ${status}`);
});
