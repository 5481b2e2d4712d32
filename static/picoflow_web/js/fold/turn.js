// @ts-check
/**
 * The turn's own events: how it starts (`turn.started`, `session.loaded`), where its step
 * cursor goes (`step.entered`, `cursor.moved`), how it ends (`turn.finished`,
 * `turn.failed`, `turn.cancelled`, or `run.interrupted` when the dashboard found its
 * executor silent), and the sink overflows it reports (`sink.overflowed`). Mirrors
 * `runtime/events/fold/turn.py` (which has no trail: `step.entered` is the page's).
 *
 * `run.interrupted` ends the run: the branches still running and the barriers still open
 * get `interrupted: true` (their status and outcome stay what the events last said). It is
 * an anomaly after the turn finished, failed or was cancelled; `apply.js` refuses every
 * event after it.
 */

import { keep, keepAll, keepLength } from "./log.js";
import { anomaly, copyState } from "./model.js";

/** @typedef {import("./model.js").Handler} Handler */

/** What the events below change of the run, for the undo log (made once, not per event). */
const TURN_STARTED_KEYS = ["runId", "sessionId", "flow", "message", "startedAt"];
const SESSION_LOADED_KEYS = ["sessionId", "state", "cursor", "tokens"];

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "turn.started"(run, event) {
    keepAll(run, TURN_STARTED_KEYS);
    run.runId = event.run_id;
    run.sessionId = event.session_id;
    run.flow = event.flow;
    run.message = event.message ?? null;
    run.startedAt = event.time ?? null;
  },

  "session.loaded"(run, event) {
    keepAll(run, SESSION_LOADED_KEYS);
    run.sessionId = event.session_id;
    run.state = copyState(event.steps || {});
    run.cursor = event.current_step ?? null;
    run.tokens = { ...(event.tokens || {}) };
  },

  "step.entered"(run, event, inv) {
    const path = event.path || "";
    keepLength(run.trail);
    run.trail.push({ step: event.step, how: event.how, level: event.level, path, seq: event.seq });
    if (path === "" && inv && (event.how === "start" || event.how === "goto" || !inv.step)) {
      keep(inv, "step");
      inv.step = event.step;
    }
  },

  "cursor.moved"(run, event) {
    keep(run, "cursor");
    run.cursor = event.to_step;
  },

  "turn.finished"(run, event) {
    keep(run, "status");
    keep(run, "reply");
    run.status = "finished";
    run.reply = {
      success: event.success, completed: event.completed,
      message: event.message, content_type: event.content_type,
    };
  },

  "turn.failed"(run, event) {
    keep(run, "status");
    keep(run, "error");
    run.status = "failed";
    run.error = event.error;
  },

  "turn.cancelled"(run, event) {
    keep(run, "status");
    keep(run, "cancellation");
    run.status = "cancelled";
    run.cancellation = { seq: event.seq, reason: event.reason, requested_by: event.requested_by ?? null, revision: event.revision ?? null };
  },

  "run.interrupted"(run, event) {
    if (run.status === "finished" || run.status === "failed" || run.status === "cancelled") {
      anomaly(run, event, `run.interrupted after turn.${run.status}`);
      return;
    }
    keep(run, "status");
    keep(run, "interruption");
    run.status = "interrupted";
    run.interruption = { seq: event.seq, reason: event.reason, silent_for: event.silent_for };
    for (const [p, running] of run.invocations) {
      if (p && running.status === "running") {
        keep(running, "interrupted");
        running.interrupted = true;
      }
    }
    for (const b of run.barriers.values()) {
      if (b.outcome === "open") {
        keep(b, "interrupted");
        b.interrupted = true;
      }
    }
  },

  "sink.overflowed"(run, event) {
    keepLength(run.overflows);
    run.overflows.push({ seq: event.seq, sink: event.sink, first: event.first_seq, last: event.last_seq });
  },
};
