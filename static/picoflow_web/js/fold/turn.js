// @ts-check
/**
 * The turn's own events: how it starts (`turn.started`, `session.loaded`), where its step
 * cursor goes (`step.entered`, `cursor.moved`), how it ends (`turn.finished`,
 * `turn.failed`, `turn.cancelled`, or `run.interrupted` when the dashboard found its
 * executor silent), and the sink overflows it reports (`sink.overflowed`). Mirrors
 * `runtime/events/fold/turn.py` (which has no trail: `step.entered` is the page's).
 *
 * `turn.cancelled` ends the run with the canonical state the session store holds: the state
 * as of the last `session.saved` (or `session.loaded`), as nothing is saved after a stop;
 * what was published in memory since then is kept apart in `run.unsaved`.
 *
 * `run.interrupted` ends the run: the branches still running and the barriers still open
 * get `interrupted: true` (their status and outcome stay what the events last said). It is
 * an anomaly after the turn finished, failed or was cancelled; `apply.js` refuses every
 * event after it.
 */

import { keep, keepAll, keepLength } from "./log.js";
import { anomaly, copyState, snapshot } from "./model.js";

/** @typedef {import("./model.js").Handler} Handler */

/** What the events below change of the run, for the undo log (made once, not per event). */
const TURN_STARTED_KEYS = ["runId", "sessionId", "flow", "message", "startedAt", "resumes"];
const SESSION_LOADED_KEYS = ["sessionId", "state", "saved", "cursor", "tokens"];

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "turn.started"(run, event) {
    keepAll(run, TURN_STARTED_KEYS);
    run.runId = event.run_id;
    run.sessionId = event.session_id;
    run.flow = event.flow;
    run.message = event.message ?? null;
    run.startedAt = event.time ?? null;
    run.resumes = event.resumes ?? null;
  },

  "session.loaded"(run, event) {
    keepAll(run, SESSION_LOADED_KEYS);
    run.sessionId = event.session_id;
    run.state = copyState(event.steps || {});
    run.saved = snapshot(run.state);  // a field write replaces its step's object: no deep copy
    run.cursor = event.current_step ?? null;
    run.tokens = { ...(event.tokens || {}) };
  },

  "session.saved"(run) {
    keep(run, "saved");
    run.saved = snapshot(run.state);
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
    keep(run, "unsaved");
    keep(run, "state");
    run.unsaved = unsavedFields(run.state, run.saved);
    run.state = snapshot(run.saved);
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

/**
 * The fields `memory` holds otherwise than `saved`, step by step in `memory`'s order, then
 * the steps only `saved` has. Mirrors `unsaved_fields` in `runtime/events/fold/turn.py`.
 * @param {import("./model.js").State} memory @param {import("./model.js").State} saved
 * @returns {{step: string, field: string, value: any, deleted: boolean}[]}
 */
export function unsavedFields(memory, saved) {
  /** @type {{step: string, field: string, value: any, deleted: boolean}[]} */
  const out = [];
  const steps = [...Object.keys(memory), ...Object.keys(saved).filter((s) => !has(memory, s))];
  for (const step of steps) {
    const now = memory[step] || {};
    const then = saved[step] || {};
    if (now === then) continue;
    const names = [...Object.keys(now), ...Object.keys(then).filter((f) => !has(now, f))];
    for (const name of names) {
      if (!has(now, name)) out.push({ step, field: name, value: null, deleted: true });
      else if (!has(then, name) || !sameJson(now[name], then[name])) out.push({ step, field: name, value: now[name], deleted: false });
    }
  }
  return out;
}

/** JSON equality, as `_same` in the Python fold has it. @param {any} a @param {any} b @returns {boolean} */
function sameJson(a, b) {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameJson(x, b[i]));
  }
  if (a && b && typeof a === "object" && typeof b === "object") {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => has(b, k) && sameJson(a[k], b[k]));
  }
  return false;
}

/** @param {object} obj @param {string} key */
function has(obj, key) {
  return Object.prototype.hasOwnProperty.call(obj, key);
}
