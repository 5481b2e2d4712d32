// Resuming a run, as the page reads it (resumption.js): the resumed run's counts of reused
// and executed branches and the tokens saved, folded from the `resumed` golden (a ledgered
// survey killed after two of four sites, then resumed), where a reused branch links to,
// and the Resume button.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { createCursor } from "../../static/picoflow_web/js/fold/undo.js";
import { describeEvent } from "../../static/picoflow_web/js/format.js";
import {
  RESUMABLE_STATUSES, resumeControl, resumeDetail, reuseCounts, reuseLine, reusedHref, reusedTitle,
} from "../../static/picoflow_web/js/resumption.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const events = parseJsonl(readFileSync(join(ROOT, "tests", "golden", "resumed.jsonl"), "utf8"));
const runOf = (/** @type {string} */ id) => fold(events.filter((e) => e.run_id === id));

test("the resumed run counts what it reused, what it executed and the tokens saved", () => {
  const resumed = runOf("resumed-2");
  assert.equal(resumed.resumes, "resumed-1");
  const reused = events.filter((e) => e.run_id === "resumed-2" && e.type === "branch.reused");
  const started = events.filter((e) => e.run_id === "resumed-2" && e.type === "branch.started");
  const saved = reused.reduce((sum, e) => sum + e.total_tokens, 0);
  assert.ok(reused.length > 0 && started.length > 0 && saved > 0);
  assert.deepEqual(reuseCounts(resumed), { reused: reused.length, executed: started.length, tokensSaved: saved });
  assert.equal(reuseLine(resumed), `${reused.length} reused · ${started.length} executed · ${saved} tokens saved`);
});

test("a run that resumes nothing has no reuse line; the interrupted one neither", () => {
  const original = runOf("resumed-1");
  assert.equal(original.resumes, null);
  assert.equal(reuseCounts(original).reused, 0);
  assert.equal(reuseLine(original), "");
});

test("a reused branch links to where it ran, at the event that fulfilled it", () => {
  const resumed = runOf("resumed-2");
  const first = events.find((e) => e.run_id === "resumed-2" && e.type === "branch.reused");
  const inv = resumed.invocations.get(first.path);
  assert.deepEqual(inv?.reused, { runId: "resumed-1", seq: first.original_seq, tokens: first.total_tokens });
  assert.equal(reusedHref(inv.reused), `/runs/resumed-1/#seq=${first.original_seq}`);
  assert.equal(reusedHref({ runId: "a b", seq: null }), "/runs/a%20b/");
  assert.match(reusedTitle(inv.reused), new RegExp(`run resumed-1 \\(event #${first.original_seq}\\)`));
  // The original run fulfilled that branch at that seq.
  const original = events.find((e) => e.run_id === "resumed-1" && e.seq === first.original_seq);
  assert.equal(original.type, "branch.fulfilled");
  assert.equal(original.key, first.key);
});

test("the Resume button shows to operators on a resumable ended run only", () => {
  const idle = { pending: false, error: "" };
  const ledger = { entries: 2, tokens: 28 };
  for (const status of RESUMABLE_STATUSES) assert.equal(resumeControl(status, ledger, true, idle).visible, true);
  for (const status of ["queued", "running", "finished"]) assert.equal(resumeControl(status, ledger, true, idle).visible, false);
  assert.equal(resumeControl("interrupted", null, true, idle).visible, false);
  assert.equal(resumeControl("interrupted", ledger, false, idle).visible, false);
  const shown = resumeControl("interrupted", ledger, true, idle);
  assert.deepEqual([shown.label, shown.disabled, shown.note], ["Resume", false, "reuses 2 branches · saves 28 tokens"]);
  const pressed = resumeControl("interrupted", ledger, true, { pending: true, error: "" });
  assert.deepEqual([pressed.label, pressed.disabled], ["Resuming…", true]);
  assert.equal(resumeControl("failed", { entries: 1, tokens: 7 }, true, { pending: false, error: "nope" }).error, "nope");
});

test("the run detail's resumable and resumed_by are read defensively", () => {
  assert.deepEqual(resumeDetail({ resumable: { entries: 3, tokens: 45 }, resumed_by: "r2" }),
    { resumable: { entries: 3, tokens: 45 }, resumedBy: "r2" });
  assert.deepEqual(resumeDetail({ id: "r" }), { resumable: null, resumedBy: null });
  assert.deepEqual(resumeDetail(null), { resumable: null, resumedBy: null });
});

test("event lists say what a resume did: the run resumed, a branch reused, one run again", () => {
  const started = events.find((e) => e.run_id === "resumed-2" && e.type === "turn.started");
  assert.match(describeEvent(started), /\(resumes run resumed-1\)$/);
  const reused = events.find((e) => e.run_id === "resumed-2" && e.type === "branch.reused");
  assert.equal(describeEvent(reused), `${reused.key}: reused from run resumed-1 #${reused.original_seq}, ${reused.total_tokens} tokens saved`);
  const plain = events.find((e) => e.run_id === "resumed-2" && e.type === "branch.started");
  assert.equal(describeEvent(plain), `${plain.key} (${plain.step})`);
  assert.equal(describeEvent({ ...plain, rerun: "its request changed" }), `${plain.key} (${plain.step}), run again: its request changed`);
});

test("a branch the ledger held that ran again says why, and scrubbing back before it forgets it", () => {
  const resumed = events.filter((e) => e.run_id === "resumed-2");
  const first = resumed.find((e) => e.type === "branch.started");
  assert.ok(first);
  const why = "its request changed since the ledger held it (params)";
  const changed = resumed.map((e) => (e === first ? { ...e, rerun: why } : e));
  assert.equal(fold(changed).invocations.get(first.path)?.rerun, why);
  assert.equal(fold(resumed).invocations.get(first.path)?.rerun, null);
  const cursor = createCursor(fold(changed));
  assert.equal(cursor.moveTo(first.seq - 1).invocations.get(first.path)?.rerun, null);
  assert.equal(cursor.moveTo(first.seq).invocations.get(first.path)?.rerun, why);
});

test("the reuse line counts from the branches reused up to the seq shown, resumed or not", () => {
  const own = events.filter((e) => e.run_id === "resumed-2");
  const reused = own.filter((e) => e.type === "branch.reused");
  // A record whose turn.started does not name the run it resumes still shows what it reused.
  const unnamed = own.map((e) => (e.type === "turn.started" ? { ...e, resumes: null } : e));
  const run = fold(unnamed);
  assert.equal(run.resumes, null);
  assert.equal(run.reusedBranches, reused.length);
  assert.match(reuseLine(run), new RegExp(`^${reused.length} reused · `));
  // Moved back before the first reuse, the fold has none and the line is gone.
  const cursor = createCursor(fold(unnamed));
  assert.equal(cursor.moveTo(reused[0].seq - 1).reusedBranches, 0);
  assert.equal(reuseLine(cursor.moveTo(reused[0].seq - 1)), "");
  assert.equal(cursor.moveTo(reused[0].seq).reusedBranches, 1);
  assert.match(reuseLine(cursor.moveTo(reused[0].seq)), /^1 reused · /);
});
