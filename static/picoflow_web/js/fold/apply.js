// @ts-check
/**
 * The fold's door for events: `fold` a run's events, or `applyEvent` one at a time
 * (incrementally: live batches never refold). Mirrors `runtime/events/fold/apply.py`.
 *
 * Every event goes through the same checks first: one at or below the last applied seq
 * is ignored (a resumed stream may repeat); a jump in seq is an anomaly (and the event is
 * applied); after `run.interrupted` every event is an anomaly and is not applied (it
 * takes its seq and is kept in `run.events`). Then the handler for its type, from the
 * family modules' tables, applies it; a type no family handles changes nothing but the
 * seq. An event's offset stretches `endOffset`, except `run.interrupted`'s (declared
 * after the silence: the run's time ends at its last report).
 */

import { HANDLERS as BARRIER } from "./barrier.js";
import { HANDLERS as BRANCH } from "./branch.js";
import { HANDLERS as CALLS } from "./calls.js";
import { HANDLERS as CONCURRENT } from "./concurrent.js";
import { HANDLERS as JOIN } from "./join.js";
import { keepAll, keepRun, logging } from "./log.js";
import { anomaly, createRun } from "./model.js";
import { HANDLERS as STATE } from "./state.js";
import { HANDLERS as TURN } from "./turn.js";

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Handler} Handler */

/** What an event changes of the invocation on its path (made once, not per event). */
const PATH_KEYS = ["lastAt", "eventCount"];

/**
 * Every family's handlers by event type. A Map, not an object: an event whose type is
 * `constructor` or `__proto__` must find nothing.
 * @type {Map<string, Handler>}
 */
const HANDLERS = new Map();
for (const family of [TURN, STATE, BARRIER, BRANCH, JOIN, CALLS, CONCURRENT]) {
  for (const [type, handler] of Object.entries(family)) {
    if (HANDLERS.has(type)) throw new Error(`two fold handlers for ${type}`);
    HANDLERS.set(type, handler);
  }
}

/** The event types the fold handles. */
export const EVENT_TYPES = [...HANDLERS.keys()];

/**
 * Fold one run's events (in seq order) up to and including `upto`.
 * @param {Iterable<any>} events @param {number | null} [upto]
 */
export function fold(events, upto = null) {
  const run = createRun();
  for (const event of events) {
    if (upto !== null && upto !== undefined && event.seq > upto) break;
    applyEvent(run, event);
  }
  return run;
}

/**
 * `applyEvent`, writing how to undo it onto `undo` (see `undo.js`).
 * @param {Run} run @param {any} event @param {any[]} undo
 */
export function applyEventUndoable(run, event, undo) {
  return logging(undo, () => applyEvent(run, event));
}

/**
 * Apply a batch of events; returns how many were new.
 * @param {Run} run @param {any[]} events
 */
export function applyEvents(run, events) {
  let applied = 0;
  for (const event of events) if (applyEvent(run, event)) applied += 1;
  return applied;
}

/**
 * Apply one event; returns whether it applied (false for one at or below the last
 * applied seq).
 * @param {Run} run @param {any} event
 */
export function applyEvent(run, event) {
  if (!event || typeof event.seq !== "number" || event.seq <= run.lastSeq) return false;
  keepRun(run);
  if (event.seq !== run.lastSeq + 1 && run.lastSeq >= 0) {
    run.anomalies.push({ seq: event.seq, message: `events ${run.lastSeq + 1}..${event.seq - 1} missing` });
  }
  run.events.push(event);
  if (run.interruption) {
    run.pathPrev.push(-1);
    anomaly(run, event, `${event.type} after run.interrupted`);
  } else {
    const inv = run.invocations.get(event.path || "");
    if (inv) {
      keepAll(inv, PATH_KEYS);
      run.pathPrev.push(inv.lastAt);
      inv.lastAt = run.events.length - 1;
      inv.eventCount += 1;
    } else {
      run.pathPrev.push(-1);
    }
    if (typeof event.offset === "number" && event.offset > run.endOffset && event.type !== "run.interrupted") {
      run.endOffset = event.offset;
    }
    const handler = HANDLERS.get(event.type);
    if (handler) handler(run, event, inv);
  }
  run.lastSeq = event.seq;
  run.version += 1;
  return true;
}
