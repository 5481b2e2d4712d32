// @ts-check
/**
 * Time-axis markers for the moments a barrier's clock ran out (pure): where a cancellation
 * grace period ended, where a branch's `branch_timeout` deadline fell, and where a branch
 * was rejected for running past it. The fork, join and cancel-request marks are layout.js's
 * `axisMarkers`; `cancelTitle` gives those cancel marks their words.
 *
 * A marker exists only where events put it:
 * - `grace`: a `cancel.grace_expired`, at its offset (the grace period itself is flow
 *   configuration that no event carries, so its length is shown as measured from the
 *   barrier's `cancel.requested`);
 * - `timeout`: a `branch.rejected` whose error code is `branch_timeout`, at its offset;
 * - `deadline`: a branch's `branch.started` offset plus its barrier's `branch_timeout`
 *   (both recorded), for branches that timed out or are still running; a branch that ended
 *   in time never met its deadline, and marking it would only add noise.
 */

import { eventBySeq } from "./fold.js";
import { formatDuration } from "./format.js";
import { barrierNameOf } from "./labels.js";
import { timeScale } from "./layout.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Barrier} Barrier */

/**
 * @typedef {{kind: "grace" | "timeout" | "deadline", barrier: string, path: string | null,
 *   t: number, x: number, seq: number | null, title: string}} TimeMarker
 */

/** @type {WeakMap<Run, {version: number, marks: Omit<TimeMarker, "x">[]}>} */
const CACHE = new WeakMap();

/**
 * Grace-end, deadline and timeout markers of `run` inside `bounds`, in time order.
 * @param {Run} run @param {{start: number, end: number}} bounds @returns {TimeMarker[]}
 */
export function timeMarkers(run, bounds) {
  let cached = CACHE.get(run);
  if (!cached || cached.version !== run.version) {
    cached = { version: run.version, marks: collect(run) };
    CACHE.set(run, cached);
  }
  const x = timeScale(bounds);
  return cached.marks.filter((m) => m.t >= bounds.start && m.t <= bounds.end).map((m) => ({ ...m, x: x(m.t) }));
}

/** @param {Run} run */
function collect(run) {
  /** @type {Omit<TimeMarker, "x">[]} */
  const out = [];
  for (const b of run.barriers.values()) {
    if (b.cancel && b.cancel.closed.length) graceMark(run, b, out);
    if (b.branchTimeout !== null) timeoutMarks(run, b, out);
  }
  return out.sort((a, b) => a.t - b.t || (a.seq ?? Infinity) - (b.seq ?? Infinity));
}

/** @param {Run} run @param {Barrier} b @param {Omit<TimeMarker, "x">[]} out */
function graceMark(run, b, out) {
  const e = graceEvent(run, b);
  if (!e || typeof e.offset !== "number") return;
  const asked = eventBySeq(run, /** @type {NonNullable<Barrier["cancel"]>} */ (b.cancel).seq);
  const after = asked && typeof asked.offset === "number" ? ` ${formatDuration(e.offset - asked.offset)} after the cancel request` : "";
  const closed = (e.closed || []).map((/** @type {string} */ p) => who(run, p)).join(", ");
  out.push({ kind: "grace", barrier: b.id, path: null, t: e.offset, seq: e.seq,
    title: `grace ended for ${barrierNameOf(run, b.id)}${after}: ${closed} lost publication rights` });
}

/**
 * The `cancel.grace_expired` of `barrier`, if one was recorded (it comes after the
 * barrier's `cancel.requested`, so the search starts there).
 * @param {Run} run @param {Barrier} barrier
 */
export function graceEvent(run, barrier) {
  if (!barrier.cancel || !barrier.cancel.closed.length) return null;
  const first = run.events.length ? run.events[0].seq : 0;
  for (let i = Math.max(0, barrier.cancel.seq - first); i < run.events.length; i += 1) {
    const e = run.events[i];
    if (e.type === "cancel.grace_expired" && e.barrier === barrier.id) return e;
  }
  return null;
}

/** @param {Run} run @param {Barrier} b @param {Omit<TimeMarker, "x">[]} out */
function timeoutMarks(run, b, out) {
  const limit = /** @type {number} */ (b.branchTimeout);
  for (const path of b.branches) {
    const inv = run.invocations.get(path);
    if (!inv || inv.started === null) continue;
    const timedOut = inv.status === "rejected" && isTimeout(inv.error);
    if (timedOut && inv.finished !== null) {
      out.push({ kind: "timeout", barrier: b.id, path, t: inv.finished, seq: inv.finishedSeq,
        title: `branch ${who(run, path)} timed out after ${formatDuration(limit)} (ran ${formatDuration(inv.finished - inv.started)})` });
    }
    if (timedOut || inv.status === "running") {
      out.push({ kind: "deadline", barrier: b.id, path, t: inv.started + limit, seq: null,
        title: `deadline of branch ${who(run, path)}: ${formatDuration(limit)} after its start (branch_timeout of ${barrierNameOf(run, b.id)})` });
    }
  }
}

/** @param {any} error */
export function isTimeout(error) {
  return !!error && (error.code === "branch_timeout" || error.type === "BranchTimeoutError");
}

/** @param {Run} run @param {string} path */
function who(run, path) {
  const inv = run.invocations.get(path);
  return inv && inv.key ? `${path} (${inv.key})` : path;
}

/**
 * The title of a barrier's cancel-request mark: its reason, who asked when the turn's
 * `turn.cancelled` names someone for that reason, and what the propagation found.
 * @param {Run} run @param {string} barrierId @param {number} t
 */
export function cancelTitle(run, barrierId, t) {
  const b = run.barriers.get(barrierId);
  if (!b || !b.cancel) return `cancel requested · ${barrierNameOf(run, barrierId)} · ${t.toFixed(6)}s`;
  const ending = run.cancellation;
  const by = ending && ending.reason === b.cancelReason && ending.requested_by ? ` by ${ending.requested_by}` : "";
  return `cancel requested${by} for ${barrierNameOf(run, barrierId)}: ${b.cancelReason ?? ""} · ${b.cancel.running.length} running, ${b.cancel.queued.length} queued · ${t.toFixed(6)}s`;
}
