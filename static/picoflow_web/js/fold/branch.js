// @ts-check
/**
 * A branch's life: `branch.started`, `branch.fulfilled`, `branch.rejected` (each moves its
 * barrier's status counts), `branch.reused` (a resumed turn restored it from the ledger:
 * fulfilled at once, marked reused) and `branch.direct_result` (a tool that answered for it).
 * Mirrors `runtime/events/fold/branch.py`. An event for a branch no fork announced is an
 * anomaly; a direct result for one is ignored.
 */

import { keep, keepAll } from "./log.js";
import { anomaly } from "./model.js";

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Invocation} Invocation */
/** @typedef {import("./model.js").Handler} Handler */

/** What the events below change of an invocation, for the undo log (made once, not per event). */
const FULFILLED_KEYS = ["finished", "finishedSeq", "output"];
const REJECTED_KEYS = ["finished", "finishedSeq", "error", "cancelled"];
const REUSED_KEYS = ["started", "startedSeq", "finished", "finishedSeq", "output", "reused"];
const DIRECT_RESULT_KEYS = ["output", "directResult", "hasDirectResult"];

/** @param {Run} run @param {Invocation} inv @param {string} status */
function setStatus(run, inv, status) {
  const barrier = inv.barrier === null ? undefined : run.barriers.get(inv.barrier);
  if (barrier) {
    keep(barrier.counts, inv.status);
    keep(barrier.counts, status);
    barrier.counts[inv.status] -= 1;
    barrier.counts[status] += 1;
  }
  keep(inv, "status");
  inv.status = status;
}

/** @param {Run} run @param {any} event */
function unknownBranch(run, event) {
  anomaly(run, event, `unknown branch ${event.path || ""}`);
}

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "branch.started"(run, event, inv) {
    if (!inv) return unknownBranch(run, event);
    setStatus(run, inv, "running");
    keep(inv, "started");
    keep(inv, "startedSeq");
    inv.started = event.offset;
    inv.startedSeq = event.seq;
    if (event.rerun) {
      keep(inv, "rerun");
      inv.rerun = event.rerun;
    }
  },

  "branch.fulfilled"(run, event, inv) {
    if (!inv) return unknownBranch(run, event);
    setStatus(run, inv, "fulfilled");
    keepAll(inv, FULFILLED_KEYS);
    inv.finished = event.offset;
    inv.finishedSeq = event.seq;
    inv.output = event.output;
  },

  "branch.rejected"(run, event, inv) {
    if (!inv) return unknownBranch(run, event);
    setStatus(run, inv, "rejected");
    keepAll(inv, REJECTED_KEYS);
    inv.finished = event.offset;
    inv.finishedSeq = event.seq;
    inv.error = event.error;
    inv.cancelled = !!event.cancelled;
  },

  "branch.reused"(run, event, inv) {
    if (!inv) return unknownBranch(run, event);
    setStatus(run, inv, "fulfilled");
    keepAll(inv, REUSED_KEYS);
    inv.started = inv.finished = event.offset;
    inv.startedSeq = inv.finishedSeq = event.seq;
    inv.output = event.output;
    inv.reused = { runId: event.original_run_id, seq: event.original_seq ?? null,
                   tokens: event.total_tokens };
    keep(run, "reusedBranches");
    run.reusedBranches += 1;
    // Spent once, where it ran: the session counts them, and so does the run's total.
    keep(run, "tokens");
    run.tokens = {
      input_tokens: (run.tokens.input_tokens || 0) + event.input_tokens,
      output_tokens: (run.tokens.output_tokens || 0) + event.output_tokens,
      total_tokens: (run.tokens.total_tokens || 0) + event.total_tokens,
    };
  },

  "branch.direct_result"(run, event, inv) {
    if (!inv) return;
    keepAll(inv, DIRECT_RESULT_KEYS);
    inv.output = event.value;
    inv.directResult = { tool: event.tool, value: event.value, seq: event.seq };
    inv.hasDirectResult = true;
  },
};
