// @ts-check
/**
 * The fold of a coordinator's `concurrent.*` events into `run.concurrent`: its
 * `concurrent_steps()` calls (groups), their batches and children. Pure (no DOM); the
 * same rules as `runtime/events/fold/concurrent.py`, checked by the `coordinator` golden.
 *
 * - `concurrent.batch_started` opens a call at its first batch, records the batch, and
 *   lists its items as children `queued`;
 * - `concurrent.child_started` makes a child `running` with its run and session ids and
 *   the attempt; `concurrent.child_finished` gives it its end (status, attempts, HTTP
 *   status, reply or error, duration); `concurrent.batch_finished` closes the batch;
 * - an event for a call, batch or item no earlier event announced is an anomaly.
 *
 * Every change goes through `log.js`, so the replay cursor can undo it.
 */

import { keep, keepAll, keepEntry, keepLength } from "./log.js";
import { anomaly } from "./model.js";

/** What the events below change of an object, for the undo log (made once, not per event). */
const BATCH_FINISHED_KEYS = ["finishedSeq", "finishedAt", "fulfilled", "failed"];
const CHILD_FINISHED_KEYS = ["status", "attempts", "duration", "finishedSeq", "finishedAt", "httpStatus", "completed", "reply", "error"];

/**
 * @typedef {object} ConcurrentBatch
 * @property {number} batch
 * @property {number[]} items
 * @property {number} startedSeq
 * @property {number} startedAt
 * @property {number | null} finishedSeq
 * @property {number | null} finishedAt
 * @property {number | null} fulfilled
 * @property {number | null} failed
 */
/**
 * @typedef {object} ConcurrentChild
 * @property {number} item
 * @property {number} batch
 * @property {string} status  queued, running, or how it ended
 * @property {string | null} runId
 * @property {string | null} sessionId
 * @property {number} attempts
 * @property {number | null} startedSeq
 * @property {number | null} startedAt
 * @property {number | null} finishedSeq
 * @property {number | null} finishedAt
 * @property {number | null} duration
 * @property {number | null} httpStatus
 * @property {boolean | null} completed
 * @property {any} reply
 * @property {any} error
 */
/**
 * @typedef {object} ConcurrentGroup
 * @property {string} group
 * @property {string} flow
 * @property {number} batches
 * @property {number} total  items of the call
 * @property {number} batchSize
 * @property {number} timeout
 * @property {number} retries
 * @property {string} caller
 * @property {ConcurrentBatch[]} batchList
 * @property {Map<number, ConcurrentChild>} children
 */

/** How a child ended badly, as statuses go (everything but queued, running, fulfilled). */
export const CHILD_FAILURES = ["failed", "refused", "timed_out", "unreachable", "malformed", "error"];

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Handler} Handler */

/** @type {Handler} */
function batchStarted(run, event) {
  const groups = run.concurrent;
  let found = groups.find((g) => g.group === event.group);
  if (!found) {
    found = {
      group: event.group, flow: event.flow, batches: event.batches, total: event.total, batchSize: event.batch_size,
      timeout: event.timeout, retries: event.retries, caller: event.path || "",
      batchList: [], children: new Map(),
    };
    keepLength(groups);
    groups.push(found);
  }
  if (found.batchList.some((b) => b.batch === event.batch)) {
    anomaly(run, event, `concurrent batch ${event.group}/${event.batch} started again`);
    return;
  }
  keepLength(found.batchList);
  found.batchList.push({
    batch: event.batch, items: [...(event.items || [])], startedSeq: event.seq, startedAt: event.offset,
    finishedSeq: null, finishedAt: null, fulfilled: null, failed: null,
  });
  for (const item of event.items || []) {
    if (found.children.has(item)) {
      anomaly(run, event, `concurrent item ${event.group}/${item} in two batches`);
      continue;
    }
    keepEntry(found.children, item);
    found.children.set(item, {
      item, batch: event.batch, status: "queued", runId: null, sessionId: null, attempts: 0,
      startedSeq: null, startedAt: null, finishedSeq: null, finishedAt: null, duration: null,
      httpStatus: null, completed: null, reply: null, error: null,
    });
  }
}

/** @type {Handler} */
function batchFinished(run, event) {
  const found = callOf(run, event);
  if (!found) return;
  const batch = found.batchList.find((b) => b.batch === event.batch);
  if (!batch) {
    anomaly(run, event, `${event.type} for unknown batch ${event.group}/${event.batch}`);
    return;
  }
  keepAll(batch, BATCH_FINISHED_KEYS);
  batch.finishedSeq = event.seq;
  batch.finishedAt = event.offset;
  batch.fulfilled = event.fulfilled;
  batch.failed = event.failed;
}

/** @type {Handler} */
function childStarted(run, event) {
  const child = childOf(run, event);
  if (!child) return;
  keep(child, "status");
  keep(child, "attempts");
  child.status = "running";
  child.attempts = event.attempt;
  if (child.startedSeq === null) {
    keep(child, "startedSeq");
    keep(child, "startedAt");
    child.startedSeq = event.seq;
    child.startedAt = event.offset;
  }
}

/** @type {Handler} */
function childFinished(run, event) {
  const child = childOf(run, event);
  if (!child) return;
  keepAll(child, CHILD_FINISHED_KEYS);
  child.status = event.status;
  child.attempts = event.attempts;
  child.duration = event.duration;
  child.finishedSeq = event.seq;
  child.finishedAt = event.offset;
  child.httpStatus = event.http_status ?? null;
  child.completed = event.completed ?? null;
  child.reply = event.reply ?? null;
  child.error = event.error ?? null;
}

/**
 * The call `event` names, or an anomaly when no `concurrent.batch_started` opened it.
 * @param {Run} run @param {any} event @returns {ConcurrentGroup | undefined}
 */
function callOf(run, event) {
  const found = run.concurrent.find((g) => g.group === event.group);
  if (!found) anomaly(run, event, `${event.type} for unknown concurrent call ${event.group}`);
  return found;
}

/**
 * The child `event` names, given the run and session ids the event carries; an anomaly
 * when its call or batch never listed it.
 * @param {Run} run @param {any} event @returns {ConcurrentChild | undefined}
 */
function childOf(run, event) {
  const found = callOf(run, event);
  if (!found) return undefined;
  const child = found.children.get(event.item);
  if (!child || child.batch !== event.batch) {
    anomaly(run, event, `${event.type} for unknown item ${event.group}/${event.item}`);
    return undefined;
  }
  keep(child, "runId");
  keep(child, "sessionId");
  child.runId = event.child_run_id;
  child.sessionId = event.child_session_id;
  return child;
}

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "concurrent.batch_started": batchStarted,
  "concurrent.child_started": childStarted,
  "concurrent.child_finished": childFinished,
  "concurrent.batch_finished": batchFinished,
};

/**
 * The calls as plain JSON, as `runtime/events/fold/concurrent.py` exports them (children in
 * item order).
 * @param {ConcurrentGroup[]} groups
 */
export function exportGroups(groups) {
  return groups.map((g) => ({
    group: g.group, flow: g.flow, batches: g.batches, total: g.total, batch_size: g.batchSize,
    timeout: g.timeout, retries: g.retries, caller: g.caller,
    batch_list: g.batchList.map((b) => ({
      batch: b.batch, items: b.items, started_seq: b.startedSeq, finished_seq: b.finishedSeq,
      fulfilled: b.fulfilled, failed: b.failed,
    })),
    children: [...g.children.values()].sort((a, b) => a.item - b.item).map((c) => ({
      item: c.item, batch: c.batch, status: c.status, run_id: c.runId, session_id: c.sessionId,
      attempts: c.attempts, started_seq: c.startedSeq, finished_seq: c.finishedSeq,
      http_status: c.httpStatus, completed: c.completed, reply: c.reply,
      error_code: c.error ? c.error.code ?? null : null,
    })),
  }));
}
