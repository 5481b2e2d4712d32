// @ts-check
/**
 * Stopping a run, as data (no DOM; node tests import it): how the run page and the runs
 * list read a run's status from the folded events and the server's run summary, what the
 * Stop button shows, how a branch stopped by a cancellation is labelled in the tree, and
 * the sentences that explain a run that ended without finishing.
 *
 * Everything here derives from recorded events (the folded run and `run.events`) or from
 * the run summary the server sent; nothing is guessed from time or from the page's own
 * actions beyond "a stop request is on its way".
 */

import { formatClock } from "./format.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */

/** A run that may still be stopped: waiting for a worker, or executing. */
export const LIVE_STATUSES = ["queued", "running"];
/** A run that is over; a run never leaves one of these. */
export const ENDED_STATUSES = ["finished", "failed", "interrupted", "cancelled"];
/** The events that end a run: nothing follows them. */
export const ENDING_EVENTS = ["turn.finished", "turn.failed", "turn.cancelled", "run.interrupted"];

/** @param {string | null | undefined} status */
export function isEnded(status) {
  return !!status && ENDED_STATUSES.includes(status);
}

/** Order of a run's life, so a late message cannot move it backwards. @param {any} status */
function stage(status) {
  if (status === "queued") return 0;
  if (isEnded(status)) return 2;
  return 1;
}

/**
 * The run's status from its events and its summary. The events' word is final once they
 * end the run; before that an ended summary wins (its events may still be on the way),
 * and a summary that says "queued" is out of date as soon as events arrive, since only a
 * worker that holds the run emits them.
 * @param {Run} run @param {any} summary
 */
export function runStatus(run, summary) {
  if (run.status !== "running") return run.status;
  const said = summary && typeof summary.status === "string" ? summary.status : null;
  if (isEnded(said)) return /** @type {string} */ (said);
  if (run.lastSeq >= 0) return "running";
  return said || "running";
}

/**
 * The newer of two summaries of one run. Summaries come from the socket, from polling and
 * from the cancel endpoint's reply, in no guaranteed order: one that would move the run
 * back (ended -> running, running -> queued) is stale, and a stop request, once made,
 * stays made.
 * @param {any} previous @param {any} next
 */
export function mergeSummary(previous, next) {
  if (!previous || !next) return next || previous || null;
  if (previous.id !== undefined && next.id !== undefined && previous.id !== next.id) return next;
  if (stage(next.status) < stage(previous.status)) return previous;
  if (!next.cancel_requested && previous.cancel_requested) return { ...next, cancel_requested: previous.cancel_requested };
  return next;
}

/** Whether the summary's run executes in another process (shipped through ingest). @param {any} summary */
export function isRemote(summary) {
  return !!(summary && summary.origin && summary.origin.kind === "remote");
}

/**
 * The run header's origin, as the page's template writes it: "remote · <label>" for a
 * remote run, else the label ("worker w1", "worker (waiting for one)"); "" without one.
 * @param {any} summary
 */
export function originText(summary) {
  const origin = summary && summary.origin;
  if (!origin || typeof origin.label !== "string") return "";
  return origin.kind === "remote" ? `remote · ${origin.label}` : origin.label;
}

/**
 * Why the page's run summary is out of date, from what the events say ("" when it is
 * not): events arrived while it says "queued" (a worker took the run: it names the
 * worker), or the events ended the run while it says the run goes on. The run socket
 * sends a summary only when it connects, so the page asks for a fresh one.
 * @param {Run} run @param {any} summary
 */
export function staleSummary(run, summary) {
  if (!summary || typeof summary.status !== "string") return "";
  if (isEnded(run.status) && !isEnded(summary.status)) return "ended";
  if (run.lastSeq >= 0 && summary.status === "queued") return "started";
  return "";
}

/**
 * Who asked the run to stop, and when, as the summary says ("" when it does not).
 * @param {any} summary
 */
export function stopRequestText(summary) {
  const request = summary && summary.cancel_requested;
  if (!request || typeof request !== "object") return "";
  const by = typeof request.by === "string" && request.by ? request.by : null;
  const at = typeof request.at === "string" && request.at ? ` at ${formatClock(request.at)}` : "";
  return by ? `Stop requested by ${by}${at}` : `Stop requested${at}`;
}

/**
 * @typedef {{pending: boolean, sent: boolean, error: string}} StopRequest
 *   this page's own request: in flight, accepted (202), or refused with `error`
 */

/**
 * What the Stop button shows. Visible while the run is queued or running; once a stop is
 * requested (by anyone, per the summary, or accepted from this page) it reads "Stopping…"
 * and stays disabled until the turn's end arrives, because the turn decides when it is
 * over, not the click.
 * @param {Run} run @param {any} summary @param {StopRequest} [request]
 * @returns {{visible: boolean, disabled: boolean, label: string, note: string, error: string}}
 */
export function stopControl(run, summary, request = { pending: false, sent: false, error: "" }) {
  const status = runStatus(run, summary);
  if (!LIVE_STATUSES.includes(status)) return { visible: false, disabled: true, label: "Stop", note: "", error: "" };
  const asked = !!(summary && summary.cancel_requested);
  if (asked || request.sent) {
    const note = stopRequestText(summary) || "Stop requested";
    // A remote run's process hears the request with its next answer and stops its turn
    // itself; until its turn.cancelled arrives the page only knows it was asked.
    return { visible: true, disabled: true, label: "Stopping…", note: isRemote(summary) ? `${note} — waiting for the process` : note, error: "" };
  }
  if (request.pending) return { visible: true, disabled: true, label: "Stopping…", note: "Asking the run to stop…", error: "" };
  return { visible: true, disabled: false, label: "Stop", note: "", error: request.error };
}

/**
 * How a cancellation stopped a branch, from what fold.js records: a branch rejected by a
 * cancellation that never started was queued when the cancel came; one closed by
 * `cancel.grace_expired` outlived the grace period and lost its publication rights; any
 * other branch rejected by a cancellation was running and ended within the grace period.
 */
export const STOP_LABELS = {
  "not-started": { label: "not started", title: "Queued when the cancel came: it never ran." },
  cancelled: { label: "cancelled", title: "Running when the cancel came: it ended within the grace period." },
  late: { label: "late", title: "Still running when the grace period ended: it lost its publication rights and its writes were dropped." },
};

/**
 * The stop label of a branch, or null when no cancellation stopped it.
 * @param {Invocation} inv @returns {"not-started" | "cancelled" | "late" | null}
 */
export function stopKind(inv) {
  if (inv.lostRights) return "late";
  if (!inv.cancelled) return null;
  return inv.startedSeq === null ? "not-started" : "cancelled";
}

/**
 * Whether a barrier was still open when its turn was cancelled: its join never ran, so
 * nothing of it was published.
 * @param {Run} run @param {import("./fold.js").Barrier} barrier
 */
export function barrierStopped(run, barrier) {
  return run.status === "cancelled" && barrier.outcome === "open";
}

/**
 * Branches stopped by cancellations, across every barrier of the run. A branch named as
 * queued by `cancel.propagated` counts as not started even before its rejection arrives.
 * @param {Run} run
 */
export function cancellationCounts(run) {
  const counts = { notStarted: 0, cancelled: 0, late: 0, barriers: /** @type {string[]} */ ([]) };
  /** @type {Set<string>} */
  const queued = new Set();
  for (const barrier of run.barriers.values()) {
    if (!barrier.cancel) continue;
    counts.barriers.push(barrier.id);
    for (const p of barrier.cancel.queued || []) queued.add(p);
  }
  for (const inv of run.invocations.values()) {
    if (inv.path === "") continue;
    const kind = stopKind(inv);
    if (kind === "late") counts.late += 1;
    else if (kind === "cancelled") counts.cancelled += 1;
    else if (kind === "not-started" || (queued.has(inv.path) && inv.startedSeq === null)) counts.notStarted += 1;
  }
  return counts;
}

/** @param {number} n @param {string} one @param {string} many */
function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * What the cancellations discarded, as one sentence.
 * @param {{notStarted: number, cancelled: number, late: number}} counts
 */
export function discardedText(counts) {
  const parts = [];
  if (counts.notStarted) parts.push(`${plural(counts.notStarted, "queued branch", "queued branches")} never started`);
  if (counts.cancelled) parts.push(`${plural(counts.cancelled, "running branch", "running branches")} cancelled`);
  if (counts.late) {
    parts.push(`${plural(counts.late, "late branch", "late branches")} lost publication rights (${counts.late === 1 ? "its" : "their"} writes dropped)`);
  }
  return parts.length ? `Discarded: ${parts.join(", ")}.` : "No branch was discarded.";
}

/**
 * The event that ended the run (the last of `ENDING_EVENTS` in it), or null.
 * @param {Run} run
 */
export function endingEvent(run) {
  for (let i = run.events.length - 1; i >= 0; i -= 1) {
    if (ENDING_EVENTS.includes(run.events[i].type)) return run.events[i];
  }
  return null;
}

/** @param {any} e */
function saveWhat(e) {
  if (e.type === "checkpoint.saved") return `root-join checkpoint of ${e.barrier}`;
  if (e.type === "session.loaded") return "the session as this turn loaded it";
  switch (e.reason) {
    case "created": return "the new session, as created";
    case "started": return "the save at the start of this turn";
    case "restored": return "the session as restored at the start of this turn";
    case "crossing": return `the save at the step crossing of #${e.seq}`;
    case "final": return "the final save of this turn";
    case "aborted": return "the save of the aborted turn";
    case "checkpoint": return "a root-join checkpoint";
    default: return `the ${e.reason} save`;
  }
}

/**
 * What revision `revision` of the session holds: the reason of the last `session.saved`
 * or `checkpoint.saved` of that revision at or before `upto` (a checkpoint's save is
 * followed by its `checkpoint.saved`, which names the barrier), else the `session.loaded`
 * of that revision; null when no event of this run says.
 * @param {Run} run @param {number} revision @param {number | null} [upto]
 */
export function revisionKept(run, revision, upto = null) {
  const limit = upto ?? run.lastSeq;
  let loaded = null;
  for (let i = run.events.length - 1; i >= 0; i -= 1) {
    const e = run.events[i];
    if (e.seq > limit || e.revision !== revision) continue;
    if (e.type === "session.saved" || e.type === "checkpoint.saved") return saveWhat(e);
    if (e.type === "session.loaded" && loaded === null) loaded = e;
  }
  return loaded ? saveWhat(loaded) : null;
}

/**
 * "The session stays at revision N: <what it kept>." ("" without a revision).
 * @param {Run} run @param {number | null | undefined} revision @param {number | null} [upto]
 */
export function revisionText(run, revision, upto = null) {
  if (typeof revision !== "number") return "";
  const kept = revisionKept(run, revision, upto);
  return kept ? `The session stays at revision ${revision}: ${kept}.` : `The session stays at revision ${revision}.`;
}

/**
 * Why a run that ended without finishing ended, for the run page's panel: a headline and
 * the sentences under it, or null for a run that is live, finished or failed (its reply or
 * error says it all). A cancelled run whose `turn.cancelled` has not arrived is explained
 * by what its summary says about the request.
 * @param {Run} run @param {any} summary
 * @returns {{status: string, headline: string, lines: string[]} | null}
 */
export function endedExplanation(run, summary) {
  const status = runStatus(run, summary);
  if (status !== "cancelled" && status !== "interrupted") return null;
  const end = endingEvent(run);
  if (status === "cancelled") {
    if (!end || end.type !== "turn.cancelled") {
      const by = summary && summary.cancel_requested && summary.cancel_requested.by;
      return { status, headline: by ? `Stopped by ${by}.` : "Stopped.", lines: [] };
    }
    const reason = reasonBesides(typeof end.reason === "string" ? end.reason.trim() : "",
      end.requested_by);
    const who = end.requested_by ? `Stopped by ${end.requested_by}` : "Stopped";
    const lines = [discardedText(cancellationCounts(run))];
    const kept = revisionText(run, end.revision, end.seq);
    if (kept) lines.push(kept);
    return { status, headline: reason ? `${who}: ${reason}` : `${who}.`, lines };
  }
  if (!end || end.type !== "run.interrupted") return null;
  const lines = [];
  if (typeof end.worker === "string" && end.worker) lines.push(`Worker ${end.worker} stopped.`);
  const kept = revisionText(run, end.revision, end.seq);
  if (kept) lines.push(kept);
  // Without these the reply already says all there is: the executor stopped reporting.
  return lines.length ? { status, headline: "", lines } : null;
}

/**
 * A stop's reason as the headline adds it after "Stopped by <who>": without the "by <who>"
 * that headline already says, and nothing when that was all of it ("stopped by admin").
 * @param {string} reason @param {string | null | undefined} who
 */
export function reasonBesides(reason, who) {
  if (!who) return reason;
  const suffix = ` by ${who}`;
  const bare = reason.endsWith(suffix) ? reason.slice(0, -suffix.length).trim() : reason;
  return /^stopped$/i.test(bare) ? "" : bare;
}

/**
 * What the runs list says in place of a reply for a run that has none: queued, stopping,
 * or stopped, from its summary ("" when nothing applies).
 * @param {any} summary
 */
export function summaryNote(summary) {
  if (!summary) return "";
  const by = summary.cancel_requested && summary.cancel_requested.by;
  if (summary.status === "cancelled") return by ? `Stopped by ${by}` : "Stopped";
  if (LIVE_STATUSES.includes(summary.status) && summary.cancel_requested) {
    const stopping = by ? `Stopping (asked by ${by})…` : "Stopping…";
    return isRemote(summary) ? `${stopping} waiting for the process` : stopping;
  }
  if (summary.status === "queued") return "Waiting for a worker…";
  return "";
}
