// Stopping a run, as the page reads it (stopping.js): the run status from events and
// summary, the Stop button, the tree's labels for branches a cancellation stopped, and the
// panel that explains a cancelled or interrupted run. Traces come from the goldens (the
// cancellation, checkpoints and interrupted ones) with a stop appended, and from a small
// stopped turn built here whose branches end in each of the three ways.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { describeEvent, runStatusKind } from "../../static/picoflow_web/js/format.js";
import { treeRows } from "../../static/picoflow_web/js/layout.js";
import {
  ENDED_STATUSES, LIVE_STATUSES, STOP_LABELS, barrierStopped, cancellationCounts, discardedText, endedExplanation, endingEvent,
  mergeSummary, originText, revisionKept, revisionText, runStatus, staleSummary, stopControl, stopKind, summaryNote,
  reasonBesides,
} from "../../static/picoflow_web/js/stopping.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const golden = (/** @type {string} */ name) => parseJsonl(readFileSync(join(ROOT, "tests", "golden", `${name}.jsonl`), "utf8"));

/** The events up to and including `upto`, then `extra` events numbered on from there. */
function stoppedAt(events, upto, ...extra) {
  const kept = events.filter((e) => e.seq <= upto);
  const last = kept.at(-1);
  return [...kept, ...extra.map((e, i) => ({
    v: 1, run_id: last.run_id, session_id: last.session_id, seq: upto + 1 + i,
    time: last.time + 0.01 * (i + 1), offset: last.offset + 0.01 * (i + 1), path: "", ...e,
  }))];
}

const cancelled = (/** @type {any} */ fields) => ({ type: "turn.cancelled", reason: "stopped from the dashboard", requested_by: "alice", revision: 1, ...fields });

/**
 * A turn stopped while its barrier ran: "fast" was running and ended within the grace
 * period, "slow" was running and outlived it, "wait1" and "wait2" were still queued.
 */
function stoppedTurn() {
  const base = { v: 1, run_id: "stop-1", session_id: "s-1", time: 1_800_000_000 };
  const requests = ["fast", "slow", "wait1", "wait2"].map((key, index) => ({ index, path: String(index), step: "Worker", key, params: {}, user_message: null }));
  const reject = (index, started, message) => ({
    path: String(index), type: "branch.rejected", barrier: "b0", index, key: requests[index].key,
    error: { type: "BranchCancelledError", code: "branch_cancelled", message, extra: {} }, cancelled: true, started,
  });
  const events = [
    { path: "", type: "turn.started", flow: "StopFlow", message: "go" },
    { path: "", type: "session.saved", revision: 3, reason: "restored" },
    { path: "", type: "session.loaded", new_session: false, revision: 3, current_step: "Desk", steps: {}, context: {}, tokens: {} },
    { path: "", type: "session.saved", revision: 4, reason: "crossing" },
    { path: "", type: "barrier.forked", barrier: "b0", caller_step: "Desk", requests, policy: "retain-successes", checkpoint: "none", max_concurrency: 2, branch_timeout: null, token_budget: null, base: "canonical" },
    { path: "0", type: "branch.started", barrier: "b0", index: 0, key: "fast", step: "Worker" },
    { path: "1", type: "branch.started", barrier: "b0", index: 1, key: "slow", step: "Worker" },
    { path: "", type: "cancel.requested", barrier: "b0", reason: "stop requested by alice" },
    { path: "", type: "cancel.propagated", barrier: "b0", running: ["0", "1"], queued: ["2", "3"] },
    reject(2, false, "Cancelled before it started."),
    reject(3, false, "Cancelled before it started."),
    reject(0, true, "Cancelled."),
    { path: "", type: "cancel.grace_expired", barrier: "b0", closed: ["1"] },
    reject(1, true, "Did not finish within the cancellation grace period; its writes were dropped."),
    { path: "", type: "turn.cancelled", reason: "stop requested by alice", requested_by: "alice", revision: 4 },
  ];
  return events.map((e, seq) => ({ ...base, seq, offset: seq * 0.1, ...e }));
}

test("the stopped turn: each branch is labelled by what the cancellation did to it", () => {
  const run = fold(stoppedTurn());
  assert.equal(run.status, "cancelled");
  assert.deepStrictEqual(run.anomalies, []);
  const labels = Object.fromEntries([...run.invocations].filter(([p]) => p).map(([p, inv]) => [p, stopKind(inv)]));
  assert.deepStrictEqual(labels, { 0: "cancelled", 1: "late", 2: "not-started", 3: "not-started" });
  assert.deepStrictEqual(Object.fromEntries(Object.entries(STOP_LABELS).map(([k, v]) => [k, v.label])),
    { "not-started": "not started", cancelled: "cancelled", late: "late" });
  // The tree rows carry the invocations these labels are read from, in request order.
  const rows = treeRows(run).filter((r) => r.kind === "branch");
  assert.deepStrictEqual(rows.map((r) => stopKind(r.inv)), ["cancelled", "late", "not-started", "not-started"]);
  assert.equal(treeRows(run)[0].status, "cancelled");
  // Its barrier never joined: the tree says so rather than "open".
  assert.equal(barrierStopped(run, /** @type {any} */ (run.barriers.get("b0"))), true);
  assert.equal(barrierStopped(fold(stoppedTurn().slice(0, -1)), /** @type {any} */ (fold(stoppedTurn().slice(0, -1)).barriers.get("b0"))), false);
  const joined = fold(stoppedAt(golden("cancellation"), 23, cancelled({})));
  assert.equal(barrierStopped(joined, /** @type {any} */ (joined.barriers.get("b0"))), false);
});

test("the stopped turn's panel: who stopped it and why, what was discarded, where the session stays", () => {
  const run = fold(stoppedTurn());
  assert.deepStrictEqual(cancellationCounts(run), { notStarted: 2, cancelled: 1, late: 1, barriers: ["b0"] });
  assert.deepStrictEqual(endedExplanation(run, { status: "cancelled", cancel_requested: { by: "alice", at: "2027-01-01T10:00:00+00:00" } }), {
    status: "cancelled",
    headline: "Stopped by alice: stop requested",
    lines: [
      "Discarded: 2 queued branches never started, 1 running branch cancelled, 1 late branch lost publication rights (its writes dropped).",
      "The session stays at revision 4: the save at the step crossing of #3.",
    ],
  });
  assert.equal(endingEvent(run).type, "turn.cancelled");
  assert.equal(describeEvent(endingEvent(run)), "stop requested by alice (by alice), session stays at revision 4");
});

test("a stop during the cancellation golden's barrier: counts from cancel.propagated, grace_expired and the rejections", () => {
  const events = stoppedAt(golden("cancellation"), 23, cancelled({}));
  const run = fold(events);
  assert.equal(run.status, "cancelled");
  assert.deepStrictEqual(run.cancellation, { seq: 24, reason: "stopped from the dashboard", requested_by: "alice", revision: 1 });
  // north finished inside the grace period: it is not discarded and carries no label.
  assert.equal(stopKind(/** @type {any} */ (run.invocations.get("0"))), null);
  assert.deepStrictEqual(cancellationCounts(run), { notStarted: 2, cancelled: 0, late: 1, barriers: ["b0"] });
  const explained = endedExplanation(run, null);
  assert.deepStrictEqual(explained, {
    status: "cancelled",
    headline: "Stopped by alice: stopped from the dashboard",
    lines: [
      "Discarded: 2 queued branches never started, 1 late branch lost publication rights (its writes dropped).",
      "The session stays at revision 1: the save at the start of this turn.",
    ],
  });
});

test("a branch named as queued by cancel.propagated counts as not started before its rejection arrives", () => {
  const run = fold(golden("cancellation"), 13);
  assert.deepStrictEqual(cancellationCounts(run), { notStarted: 2, cancelled: 0, late: 0, barriers: ["b0"] });
  assert.equal(stopKind(/** @type {any} */ (run.invocations.get("2"))), null);
});

test("the revision the session stays at names what it kept: a checkpoint names its barrier", () => {
  const events = stoppedAt(golden("checkpoints"), 28, cancelled({ requested_by: null, reason: "", revision: 2 }));
  const run = fold(events);
  assert.equal(revisionKept(run, 2), "root-join checkpoint of b0");
  assert.equal(revisionText(run, 2), "The session stays at revision 2: root-join checkpoint of b0.");
  assert.equal(revisionKept(run, 0), "the new session, as created");
  assert.equal(revisionKept(run, 9), null);
  assert.equal(revisionText(run, 9), "The session stays at revision 9.");
  assert.equal(revisionText(run, null), "");
  // Only saves at or before the point asked about count.
  assert.equal(revisionKept(run, 2, 26), null);
  const explained = endedExplanation(run, null);
  assert.equal(explained?.headline, "Stopped.");
  assert.deepStrictEqual(explained?.lines, ["No branch was discarded.", "The session stays at revision 2: root-join checkpoint of b0."]);
  assert.equal(describeEvent(events.at(-1)), "stopped, session stays at revision 2");
});

test("an interrupted run: which worker stopped, and where the session stays", () => {
  const events = golden("interrupted");
  const last = events.at(-1);
  const withWorker = [...events.slice(0, -1), { ...last, worker: "w-7", revision: 1 }];
  const run = fold(withWorker);
  assert.equal(run.status, "interrupted");
  assert.deepStrictEqual(endedExplanation(run, null), {
    status: "interrupted", headline: "",
    lines: ["Worker w-7 stopped.", "The session stays at revision 1: the save at the start of this turn."],
  });
  assert.match(describeEvent(withWorker.at(-1)), /, worker w-7$/);
  // Without the new fields (a remote run gone silent) the reply already says it all.
  assert.equal(endedExplanation(fold(events), null), null);
  assert.deepStrictEqual(endedExplanation(fold([...events.slice(0, -1), { ...last, worker: null, revision: 1 }]), null)?.lines,
    ["The session stays at revision 1: the save at the start of this turn."]);
});

test("a finished, failed or live run has no panel; a cancelled one without its event says who asked", () => {
  assert.equal(endedExplanation(fold(golden("cancellation")), null), null);
  assert.equal(endedExplanation(fold(golden("turn_failure")), null), null);
  assert.equal(endedExplanation(fold(golden("cancellation"), 15), { status: "running" }), null);
  assert.deepStrictEqual(endedExplanation(fold([]), { status: "cancelled", cancel_requested: { by: "bob", at: "2027-01-01T10:00:00Z" } }),
    { status: "cancelled", headline: "Stopped by bob.", lines: [] });
  assert.deepStrictEqual(endedExplanation(fold([]), { status: "cancelled", cancel_requested: null }),
    { status: "cancelled", headline: "Stopped.", lines: [] });
});

test("discarded counts read as one sentence, singular and plural", () => {
  assert.equal(discardedText({ notStarted: 0, cancelled: 0, late: 0 }), "No branch was discarded.");
  assert.equal(discardedText({ notStarted: 1, cancelled: 2, late: 3 }),
    "Discarded: 1 queued branch never started, 2 running branches cancelled, 3 late branches lost publication rights (their writes dropped).");
});

test("the run status: ended events are final, an ended summary beats live events, events beat a queued summary", () => {
  const empty = fold([]);
  const live = fold(golden("cancellation"), 15);
  const finished = fold(golden("cancellation"));
  assert.equal(runStatus(empty, null), "running");
  assert.equal(runStatus(empty, { status: "queued" }), "queued");
  assert.equal(runStatus(live, { status: "queued" }), "running");
  assert.equal(runStatus(live, { status: "cancelled" }), "cancelled");
  assert.equal(runStatus(finished, { status: "running" }), "finished");
  assert.equal(runStatus(fold(stoppedTurn()), { status: "running" }), "cancelled");
  for (const status of [...LIVE_STATUSES, ...ENDED_STATUSES]) assert.equal(runStatusKind(status), status);
});

test("the Stop button: shown while queued or running, Stopping… once asked, hidden once ended", () => {
  const empty = fold([]);
  const live = fold(golden("cancellation"), 15);
  const idle = { pending: false, sent: false, error: "" };
  const stop = { visible: true, disabled: false, label: "Stop", note: "", error: "" };
  assert.deepStrictEqual(stopControl(empty, { status: "queued" }, idle), stop);
  assert.deepStrictEqual(stopControl(live, { status: "running" }, idle), stop);
  assert.deepStrictEqual(stopControl(live, null), stop);
  assert.deepStrictEqual(stopControl(live, { status: "running" }, { pending: true, sent: false, error: "" }),
    { visible: true, disabled: true, label: "Stopping…", note: "Asking the run to stop…", error: "" });
  const asked = stopControl(live, { status: "running", cancel_requested: { by: "alice", at: "2027-01-01T10:00:00+00:00" } }, idle);
  assert.equal(asked.label, "Stopping…");
  assert.equal(asked.disabled, true);
  assert.match(asked.note, /^Stop requested by alice at .+/);
  // Accepted here, though the summary in hand predates the request.
  assert.deepStrictEqual(stopControl(live, { status: "running" }, { pending: false, sent: true, error: "" }),
    { visible: true, disabled: true, label: "Stopping…", note: "Stop requested", error: "" });
  assert.deepStrictEqual(stopControl(live, { status: "running" }, { pending: false, sent: false, error: "You may not stop this run." }),
    { ...stop, error: "You may not stop this run." });
  for (const [run, summary] of [[empty, { status: "cancelled" }], [live, { status: "finished" }], [fold(golden("cancellation")), { status: "running" }],
    [fold(golden("interrupted")), null], [fold(stoppedTurn()), { status: "running", cancel_requested: { by: "alice" } }]]) {
    assert.equal(stopControl(run, summary, idle).visible, false);
  }
});

test("summaries never move a run backwards, and a stop request once made stays", () => {
  const running = { id: "r", status: "running", cancel_requested: null, event_count: 3 };
  const asked = { ...running, cancel_requested: { by: "alice", at: "2027-01-01T10:00:00Z" } };
  const done = { id: "r", status: "cancelled", cancel_requested: asked.cancel_requested, event_count: 9 };
  assert.equal(mergeSummary(null, running), running);
  assert.equal(mergeSummary(running, null), running);
  assert.equal(mergeSummary({ id: "r", status: "queued" }, running), running);
  assert.equal(mergeSummary(running, { id: "r", status: "queued" }), running);
  assert.equal(mergeSummary(done, running), done);
  assert.equal(mergeSummary(running, done), done);
  assert.deepStrictEqual(mergeSummary(asked, { ...running, event_count: 5 }), { ...running, event_count: 5, cancel_requested: asked.cancel_requested });
  assert.deepStrictEqual(mergeSummary(done, { id: "other", status: "running" }), { id: "other", status: "running" });
});

test("the runs list's note for a run without a reply", () => {
  assert.equal(summaryNote({ status: "cancelled", cancel_requested: { by: "alice" } }), "Stopped by alice");
  assert.equal(summaryNote({ status: "cancelled", cancel_requested: null }), "Stopped");
  assert.equal(summaryNote({ status: "running", cancel_requested: { by: "alice" } }), "Stopping (asked by alice)…");
  assert.equal(summaryNote({ status: "queued", cancel_requested: null }), "Waiting for a worker…");
  assert.equal(summaryNote({ status: "running", cancel_requested: null }), "");
  assert.equal(summaryNote({ status: "finished", cancel_requested: { by: "alice" } }), "");
  assert.equal(summaryNote(null), "");
});

test("the stop control and the panel are in the run page, the new statuses in the runs filter", () => {
  const page = readFileSync(join(ROOT, "templates", "picoflow_web", "run.html"), "utf8");
  for (const id of ["pf-stop", "pf-stop-box", "pf-stop-note", "pf-stop-error", "pf-ended", "pf-ended-headline", "pf-ended-lines", "pf-run-status"]) {
    assert.match(page, new RegExp(`id="${id}"`), id);
  }
  const css = readFileSync(join(ROOT, "static", "picoflow_web", "css", "app.css"), "utf8");
  for (const cls of ["pf-button-stop", "pf-stop-note", "pf-stop-error", "pf-ended", "pf-ended-interrupted", "pf-badge-cancelled", "pf-badge-queued"]) {
    assert.match(css, new RegExp(`\\.${cls}\\b`), cls);
  }
});

test("a remote run's Stop waits for its process: the control and the runs list say so", () => {
  const live = fold(golden("cancellation"), 15);
  const idle = { pending: false, sent: false, error: "" };
  const origin = { kind: "remote", host: "laptop", pid: 7, label: "laptop (pid 7)" };
  const asked = stopControl(live, { status: "running", origin, cancel_requested: { by: "alice", at: "2027-01-01T10:00:00+00:00" } }, idle);
  assert.equal(asked.label, "Stopping…");
  assert.match(asked.note, /^Stop requested by alice at .+ — waiting for the process$/);
  assert.equal(stopControl(live, { status: "running", origin }, { pending: false, sent: true, error: "" }).note,
    "Stop requested — waiting for the process");
  // A worker's run: its lease keeper hears the request; nothing to wait for on the page.
  assert.doesNotMatch(stopControl(live, { status: "running", origin: { kind: "worker", label: "worker w1" }, cancel_requested: { by: "alice" } }, idle).note, /process/);
  assert.equal(summaryNote({ status: "running", origin, cancel_requested: { by: "alice" } }), "Stopping (asked by alice)… waiting for the process");
  // Its turn.cancelled ends it: the control goes, the panel says who stopped it.
  assert.equal(stopControl(fold(stoppedTurn()), { status: "running", origin, cancel_requested: { by: "alice" } }, idle).visible, false);
});

test("the header's origin follows the summary, and a summary the events made stale is named", () => {
  assert.equal(originText({ origin: { kind: "worker", worker: null, label: "worker (waiting for one)" } }), "worker (waiting for one)");
  assert.equal(originText({ origin: { kind: "worker", worker: "w1", label: "worker w1" } }), "worker w1");
  assert.equal(originText({ origin: { kind: "remote", label: "laptop (pid 7)" } }), "remote · laptop (pid 7)");
  assert.equal(originText(null), "");
  const queued = { status: "queued", origin: { kind: "worker", worker: null, label: "worker (waiting for one)" } };
  assert.equal(staleSummary(fold([]), queued), "");  // still waiting for a worker
  assert.equal(staleSummary(fold(golden("cancellation"), 15), queued), "started");
  assert.equal(staleSummary(fold(golden("cancellation"), 15), { ...queued, status: "running" }), "");
  const ended = fold(stoppedTurn());
  assert.equal(staleSummary(ended, queued), "ended");
  assert.equal(staleSummary(ended, { ...queued, status: "running" }), "ended");
  assert.equal(staleSummary(ended, { ...queued, status: "cancelled" }), "");
  assert.equal(staleSummary(ended, null), "");
});

test("a stop's reason does not repeat who stopped it", () => {
  assert.equal(reasonBesides("stopped by admin", "admin"), "");
  assert.equal(reasonBesides("stopped from the dashboard by admin", "admin"), "stopped from the dashboard");
  assert.equal(reasonBesides("Stop pressed in the dashboard", "ada"), "Stop pressed in the dashboard");
  assert.equal(reasonBesides("stopped by admin", null), "stopped by admin");
});
