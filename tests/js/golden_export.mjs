// The browser fold's answers in the shape of tests/golden/export_fold.py, so the two
// folds can be compared with one deep equality per golden.
import { exportGroups } from "../../static/picoflow_web/js/fold/concurrent.js";
import { barrierPublicationOf, comparable, fold, publicationOf, viewAt } from "../../static/picoflow_web/js/fold.js";
import { openStreams } from "../../static/picoflow_web/js/streaming.js";

const pick = (obj, keys) => Object.fromEntries(keys.map((k) => [k, obj[k]]));

function finishSeqs(events) {
  const out = new Map();
  for (const e of events) {
    if (e.type === "branch.fulfilled" || e.type === "branch.rejected") out.set(e.path, e.seq);
  }
  return out;
}

function branch(run, path, finished) {
  const inv = run.invocations.get(path);
  const at = finished.has(path) ? finished.get(path) : run.lastSeq;
  const seen = viewAt(run, path, at);
  // Flagged only when set, as tests/golden/export_fold.py does.
  return {
    ...(inv.interrupted ? { interrupted: true } : {}),
    ...(inv.reused ? { reused: { run_id: inv.reused.runId, seq: inv.reused.seq, tokens: inv.reused.tokens } } : {}),
    step: inv.step, key: inv.key, index: inv.index, barrier: inv.barrier,
    status: inv.status, cancelled: inv.cancelled, output: inv.output, error: inv.error,
    started: inv.started, finished: inv.finished, barriers: inv.barriers, tokens: inv.tokens,
    view_seq: at,
    view_at_fulfilled: inv.status === "fulfilled" ? comparable(seen.state) : null,
    view_at_end: comparable(viewAt(run, path).state),
    own: seen.own.map((c) => pick(c, ["seq", "step", "field", "value", "deleted"])),
    invisible: seen.invisible.map((c) => pick(c, ["path", "step", "field", "value", "deleted", "kind"])),
    publication: publicationOf(run, path),
  };
}

function barrier(run, b) {
  return {
    ...(b.interrupted ? { interrupted: true } : {}),
    caller: b.caller, caller_step: b.callerStep, policy: b.policy, checkpoint: b.checkpoint,
    base: b.base, forked_seq: b.forkedSeq, branches: b.branches,
    base_state: b.baseState === null ? null : comparable(b.baseState),
    outcome: b.outcome, published: b.published, discarded: b.discarded,
    reductions: b.reductions.map((r) => pick(r, ["step", "field", "channel", "inputs", "completion_order", "result"])),
    error: b.error, provenance: b.provenance, checkpoint_revision: b.checkpointRevision,
    cancel_reason: b.cancelReason, joined_at: b.joinedAt, publication: barrierPublicationOf(run, b.id),
  };
}

function snapshot(events, upto) {
  const run = fold(events, upto);
  const statuses = {};
  for (const [path, inv] of run.invocations) if (path) statuses[path] = inv.status;
  const outcomes = {};
  for (const [id, b] of run.barriers) outcomes[id] = b.outcome;
  const publications = {};
  for (const path of run.invocations.keys()) {
    const found = publicationOf(run, path);
    if (found) publications[path] = [found.state, found.reason];
  }
  const streams = openStreams(run);
  return {
    ...(Object.keys(streams).length ? { streams } : {}),
    upto, last_seq: run.lastSeq, status: run.status, state: comparable(run.state),
    tokens: run.tokens, conflicts: run.conflicts, statuses, outcomes, publications,
  };
}

/** The JS export of one run's events; `stops` are the seqs to snapshot at. */
export function exportRun(events, stops) {
  return exportModel(fold(events), events, stops);
}

/** The JS export of an already folded model (`events` are its run's events). */
export function exportModel(run, events, stops) {
  const finished = finishSeqs(events);
  const branches = {};
  for (const path of run.invocations.keys()) if (path) branches[path] = branch(run, path, finished);
  const barriers = {};
  for (const [id, b] of run.barriers) barriers[id] = barrier(run, b);
  // Listed only when there are some, as tests/golden/export_fold.py does.
  const extra = {};
  if (run.anomalies.length) extra.anomalies = run.anomalies.map((a) => pick(a, ["seq", "message"]));
  if (run.overflows.length) extra.overflows = run.overflows.map((o) => pick(o, ["seq", "sink", "first", "last"]));
  if (run.interruption) extra.interruption = pick(run.interruption, ["seq", "reason", "silent_for"]);
  if (run.cancellation) extra.cancellation = pick(run.cancellation, ["seq", "reason", "requested_by", "revision"]);
  if (run.unsaved.length) extra.unsaved = run.unsaved.map((u) => pick(u, ["step", "field", "value", "deleted"]));
  if (run.concurrent.length) extra.concurrent = exportGroups(run.concurrent);
  const streams = openStreams(run);
  if (Object.keys(streams).length) extra.streams = streams;
  if (run.resumes) extra.resumes = run.resumes;
  return {
    ...extra,
    run_id: run.runId, session_id: run.sessionId, flow: run.flow, status: run.status,
    reply: run.reply, error: run.error, cursor: run.cursor, tokens: run.tokens,
    last_seq: run.lastSeq, conflicts: run.conflicts, state: comparable(run.state),
    branches, barriers, snapshots: stops.map((seq) => snapshot(events, seq)),
  };
}
