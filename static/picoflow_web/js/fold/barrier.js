// @ts-check
/**
 * A barrier's fork and its cancellation: `barrier.forked` opens the barrier and announces
 * its branches (queued invocations), a wide fork's first page of them; each
 * `barrier.requested` announces the next page; `cancel.requested`, `cancel.propagated` and
 * `cancel.grace_expired` record how a cancellation went through it, and mark the branches
 * it told and the ones it closed. Mirrors `runtime/events/fold/barrier.py`.
 *
 * A fork that reuses a barrier id or a branch path, whose base is not its caller, or from
 * an invocation the run does not know is an anomaly (and still applied); so is a page of
 * requests that does not follow the ones announced so far.
 */

import { keep, keepEntry, keepLength } from "./log.js";
import { anomaly, barrierOf, newInvocation, ownList, snapshot } from "./model.js";

/** @typedef {import("./model.js").Barrier} Barrier */
/** @typedef {import("./model.js").Handler} Handler */

/**
 * The queued invocations of a page of a fork's requests (the fork's own, or a later one).
 * @param {import("./model.js").Run} run @param {any} event @param {any[]} requests
 * @param {Barrier} barrier
 */
function announce(run, event, requests, barrier) {
  for (const request of requests) {
    if (run.invocations.has(request.path)) anomaly(run, event, `barrier ${event.barrier} reuses path ${request.path}`);
    const child = newInvocation(request.path, request.step, request.key, request.index, event.barrier);
    child.params = request.params ?? null;
    child.userMessage = request.user_message ?? null;
    keepEntry(run.invocations, request.path);
    run.invocations.set(request.path, child);
    barrier.invocations.push(child);
  }
  keep(run, "branchCount");
  run.branchCount += requests.length;
}

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "barrier.forked"(run, event, inv) {
    const path = event.path || "";
    const requests = event.requests || [];
    if (run.barriers.has(event.barrier)) anomaly(run, event, `barrier ${event.barrier} forked again`);
    if (!inv) anomaly(run, event, `fork from unknown invocation ${path}`);
    const expected = path || "canonical";
    if (event.base !== expected) anomaly(run, event, `barrier ${event.barrier} has base ${event.base}, not ${expected}`);
    /** @type {Barrier} */
    const barrier = {
      id: event.barrier, caller: path, callerStep: event.caller_step,
      policy: event.policy, checkpoint: event.checkpoint, base: event.base,
      forkedSeq: event.seq, forkedAt: event.offset,
      maxConcurrency: event.max_concurrency ?? null,
      branchTimeout: event.branch_timeout ?? null,
      tokenBudget: event.token_budget ?? null,
      branches: requests.map((/** @type {any} */ r) => r.path),
      invocations: [],
      baseState: event.base === "canonical" ? snapshot(run.state) : null,
      outcome: "open", target: null, published: [], discarded: [], reductions: [],
      error: null, provenance: [], checkpointRevision: null, checkpointFailed: false,
      cancelReason: null, cancel: null, joinedAt: null, joinedSeq: null, interrupted: false,
      undo: new Map(), applied: null, discardedAt: new Map(),
      counts: { queued: requests.length, running: 0, fulfilled: 0, rejected: 0 },
    };
    keepEntry(run.barriers, event.barrier);
    run.barriers.set(event.barrier, barrier);
    if (inv) {
      const barriers = ownList(inv, "barriers");
      keepLength(barriers);
      barriers.push(event.barrier);
    }
    announce(run, event, requests, barrier);
  },

  "barrier.requested"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    const requests = event.requests || [];
    if (event.first !== barrier.branches.length) anomaly(run, event, `barrier ${event.barrier} requests from ${event.first}, not ${barrier.branches.length}`);
    keepLength(barrier.branches);
    keepLength(barrier.invocations);
    for (const request of requests) barrier.branches.push(request.path);
    keep(barrier.counts, "queued");
    barrier.counts.queued += requests.length;
    announce(run, event, requests, barrier);
  },

  "cancel.requested"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keep(barrier, "cancelReason");
    keep(barrier, "cancel");
    barrier.cancelReason = event.reason;
    barrier.cancel = { seq: event.seq, running: [], queued: [], closed: [] };
  },

  "cancel.propagated"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keep(barrier, "cancel");
    barrier.cancel = { ...(barrier.cancel || { seq: event.seq, closed: [] }), running: [...(event.running || [])], queued: [...(event.queued || [])] };
    for (const p of event.running || []) {
      const told = run.invocations.get(p);
      if (told) {
        keep(told, "cancelTold");
        told.cancelTold = true;
      }
    }
  },

  "cancel.grace_expired"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keep(barrier, "cancel");
    barrier.cancel = { ...(barrier.cancel || { seq: event.seq, running: [], queued: [] }), closed: [...(event.closed || [])] };
    for (const p of event.closed || []) {
      const closed = run.invocations.get(p);
      if (closed) {
        keep(closed, "lostRights");
        closed.lostRights = true;
      }
    }
  },
};
