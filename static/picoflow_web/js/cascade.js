// @ts-check
/**
 * The cancellation cascade of one barrier (pure): who asked, when, and where each of its
 * branches stood at that moment and what it had spent.
 *
 * Everything comes from recorded events: the reason and time from `cancel.requested`, the
 * running and queued branches from `cancel.propagated` (the driver's own list, not a
 * guess from statuses), the late ones from `cancel.grace_expired`, who asked from
 * `turn.cancelled.requested_by` (only when that event's reason is the barrier's: a flow's
 * own deadline token names nobody), and the enclosing barrier whose cancel reached this
 * one from its `cancel.propagated` naming this barrier's caller as running.
 *
 * Spending is model tokens (the branch's and its descendants' `model.finished`) when there
 * are any, else time: a branch that never called a model still spent its running time.
 */

import { eventBySeq } from "./fold.js";
import { graceEvent } from "./time_marks.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./fold.js").Invocation} Invocation */

/**
 * @typedef {object} CascadeBranch
 * @property {string} path
 * @property {string} key
 * @property {"finished" | "running" | "queued"} at  where it stood at the request
 * @property {boolean} late  still running when the grace period ended
 * @property {string} status  what it ended as (or is, while live)
 * @property {number | null} tokens  tokens of its recorded model calls (null: none)
 * @property {number | null} tokensAtRequest  of those, finished before the request
 * @property {number | null} elapsed  running time, to its end (or the run's last event)
 * @property {number | null} after  how long after the request it ended (null: before, or never)
 */

/**
 * @typedef {object} Cascade
 * @property {string} barrier
 * @property {string} reason
 * @property {string | null} requestedBy
 * @property {string[]} from  enclosing barriers the cancel came down from, outermost first
 * @property {{seq: number, t: number | null}} requested
 * @property {{seq: number, t: number | null} | null} graceEnded
 * @property {string[]} finished  paths done before the request, in request order
 * @property {string[]} running  as `cancel.propagated` listed them
 * @property {string[]} queued  as `cancel.propagated` listed them
 * @property {string[]} late  as `cancel.grace_expired` listed them
 * @property {CascadeBranch[]} branches  every branch, in request order
 */

/**
 * @param {Run} run @param {string} barrierId @returns {Cascade | null}
 */
export function cascadeOf(run, barrierId) {
  const barrier = run.barriers.get(barrierId);
  if (!barrier || !barrier.cancel) return null;
  const cancel = barrier.cancel;
  const requestedEvent = eventBySeq(run, cancel.seq);
  const requestedT = requestedEvent && typeof requestedEvent.offset === "number" ? requestedEvent.offset : null;
  const grace = graceEvent(run, barrier);
  const running = new Set(cancel.running);
  const queued = new Set(cancel.queued);
  const late = new Set(cancel.closed);
  /** @type {CascadeBranch[]} */
  const branches = [];
  for (const path of barrier.branches) {
    const inv = run.invocations.get(path);
    if (!inv) continue;
    const at = running.has(path) ? "running" : queued.has(path) ? "queued"
      : inv.finishedSeq !== null && inv.finishedSeq < cancel.seq ? "finished" : null;
    // Neither listed nor done before the request: the propagation is not recorded yet.
    if (at === null) continue;
    const spent = spending(run, inv, cancel.seq);
    branches.push({
      path, key: inv.key, at, late: late.has(path), status: inv.status,
      tokens: spent.tokens, tokensAtRequest: spent.tokensAtRequest,
      elapsed: inv.started !== null ? (inv.finished ?? run.endOffset) - inv.started : null,
      after: inv.finishedSeq !== null && inv.finishedSeq > cancel.seq && inv.finished !== null && requestedT !== null
        ? Math.max(0, inv.finished - requestedT) : null,
    });
  }
  const ending = run.cancellation;
  return {
    barrier: barrier.id,
    reason: barrier.cancelReason ?? "",
    requestedBy: ending && ending.reason === barrier.cancelReason ? ending.requested_by : null,
    from: cameFrom(run, barrier),
    requested: { seq: cancel.seq, t: requestedT },
    graceEnded: grace ? { seq: grace.seq, t: typeof grace.offset === "number" ? grace.offset : null } : null,
    finished: branches.filter((b) => b.at === "finished").map((b) => b.path),
    running: [...cancel.running],
    queued: [...cancel.queued],
    late: [...cancel.closed],
    branches,
  };
}

/**
 * Tokens of `inv` and every invocation below it; null when none of them called a model.
 * @param {Run} run @param {Invocation} inv @param {number} seq  the request's
 */
function spending(run, inv, seq) {
  let tokens = 0;
  let before = 0;
  let calls = 0;
  /** @type {Invocation[]} */
  const stack = [inv];
  while (stack.length) {
    const cur = /** @type {Invocation} */ (stack.pop());
    for (const call of cur.models) {
      if (!call.finished) continue;
      calls += 1;
      tokens += call.finished.total_tokens || 0;
      if (call.finished.seq < seq) before += call.finished.total_tokens || 0;
    }
    for (const id of cur.barriers) {
      const b = run.barriers.get(id);
      if (!b) continue;
      for (const p of b.branches) {
        const child = run.invocations.get(p);
        if (child) stack.push(child);
      }
    }
  }
  return calls ? { tokens, tokensAtRequest: before } : { tokens: null, tokensAtRequest: null };
}

/**
 * The enclosing barriers whose cancel told this barrier's caller (outermost first), with
 * the same reason; a cancel the caller asked for itself has none.
 * @param {Run} run @param {Barrier} barrier @returns {string[]}
 */
function cameFrom(run, barrier) {
  /** @type {string[]} */
  const chain = [];
  let current = barrier;
  for (;;) {
    const caller = run.invocations.get(current.caller);
    if (!caller || caller.barrier === null) break;
    const outer = run.barriers.get(caller.barrier);
    if (!outer || !outer.cancel || !outer.cancel.running.includes(caller.path)) break;
    if (outer.cancelReason !== current.cancelReason || !current.cancel || outer.cancel.seq > current.cancel.seq) break;
    chain.unshift(outer.id);
    current = outer;
  }
  return chain;
}

/**
 * One line for people: "Stop pressed in the dashboard (asked by ada), from b1: 1 running,
 * 1 queued, 1 already finished".
 * @param {Cascade} c
 * @param {(id: string) => string} [nameOf]  how a barrier is named (its id by default)
 */
export function cascadeSentence(c, nameOf = (/** @type {string} */ id) => id) {
  const who = c.requestedBy ? ` (asked by ${c.requestedBy})` : "";
  const from = c.from.length ? `, passed down from ${c.from.map(nameOf).join(" → ")}` : "";
  const counts = [
    `${c.running.length} running`, `${c.queued.length} queued`,
    c.finished.length ? `${c.finished.length} already finished` : "",
    c.late.length ? `${c.late.length} still running when the grace period ended` : "",
  ].filter(Boolean).join(", ");
  return `Cancel requested: ${c.reason || "no reason given"}${who}${from}. At that moment: ${counts}.`;
}
