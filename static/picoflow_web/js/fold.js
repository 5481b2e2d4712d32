// @ts-check
/**
 * The browser fold: a run's events -> its run model, and any invocation's view at any
 * moment. Pure (no DOM): node imports it for the tests.
 *
 * Same rules as `runtime/events/fold.py`; both are checked against the committed golden traces
 * (`tests/golden/<name>.jsonl` folded by Python into `<name>.fold.json`), so they cannot
 * drift:
 *
 * - Canonical state starts from `session.loaded` and changes by non-draft
 *   `state.replaced` / `state.removed` / `state.contributed`, by `join.published` with
 *   target `canonical`, and back by `checkpoint.failed` (that join is rolled back).
 * - A branch's view at sequence number N is its barrier's fork-time base (the canonical
 *   state as of `barrier.forked`, or the calling branch's own view as of then) overlaid
 *   with its own drafts up to N (a contribution's event carries the resulting value) and
 *   the publications its inner joins made into its scope up to N. Siblings' drafts up to
 *   N are listed as invisible to it.
 *
 * Bad input never throws: what the fold cannot place (a gap in seq, a draft or fork on an
 * unannounced invocation, a fork that reuses a barrier id or a path or whose base is not
 * its caller, an event for an unknown branch or barrier) is recorded in
 * `run.anomalies`, exactly as the Python fold records it; an event at or below the last
 * applied seq is ignored.
 *
 * `run.interrupted` (recorded by the dashboard when a run's executor went silent) ends the
 * run: `run.status` becomes "interrupted", `run.interruption` keeps `{seq, reason,
 * silent_for}`, and the branches still running and barriers still open then get
 * `interrupted: true` (their status and outcome stay what the events last said). Any event
 * after it is an anomaly and is not applied (it takes its seq and is kept in `run.events`);
 * so is a `run.interrupted` after `turn.finished` or `turn.failed`. Its offset (declared
 * after the silence) does not stretch `endOffset`: the run's time ends at its last report.
 *
 * Beyond the Python fold, the model keeps what the page draws: per-invocation model and
 * tool calls, event seqs, timing, cancellation, per-barrier status counts.
 *
 * State objects are copy-on-write at the step level (`setField` replaces a step's object,
 * never edits it), so a shallow copy of the outer object is a snapshot. Event values are
 * shared, never mutated.
 */

import {
  copyState, createRun, newInvocation, pathDepth, setField, snapshot, splitUndoKey, undoKey,
} from "./fold_model.js";
import { applyConcurrent } from "./fold_concurrent.js";
import { keep, keepAll, keepEntry, keepField, keepLength, keepRun, logging } from "./fold_log.js";
import { appendTip, grownChange, reduceOne } from "./fold_reduce.js";
import { fieldBefore } from "./fold_views.js";

/** What the events below change of an object, for the undo log (made once, not per event). */
const TURN_STARTED_KEYS = ["runId", "sessionId", "flow", "message", "startedAt"];
const SESSION_LOADED_KEYS = ["sessionId", "state", "cursor", "tokens"];
const FULFILLED_KEYS = ["finished", "finishedSeq", "output"];
const REJECTED_KEYS = ["finished", "finishedSeq", "error", "cancelled"];
const DIRECT_RESULT_KEYS = ["output", "directResult", "hasDirectResult"];
const PUBLISHED_KEYS = ["outcome", "joinedAt", "joinedSeq", "target", "published", "discarded", "applied", "discardedAt"];
const INVALIDATED_KEYS = ["outcome", "joinedAt", "joinedSeq", "error", "provenance"];
const CHECKPOINT_FAILED_KEYS = ["outcome", "error", "checkpointFailed"];

// The fold's model, views and publications live in their own modules; this one stays the
// door every importer uses.
export { STATUSES, comparable, createRun, parentPath } from "./fold_model.js";
export { baseAt, fieldBefore, published, reachesCanonical, viewAt } from "./fold_views.js";
export { barrierPublicationOf, publicationOf } from "./fold_publication.js";
export { parseJsonl, runsOf, shareStrings } from "./fold_io.js";
export { UNDO } from "./fold_log.js";

/** @typedef {import("./fold_model.js").State} State */
/** @typedef {import("./fold_model.js").Change} Change */
/** @typedef {import("./fold_model.js").ModelCall} ModelCall */
/** @typedef {import("./fold_model.js").ToolCall} ToolCall */
/** @typedef {import("./fold_model.js").Invocation} Invocation */
/** @typedef {import("./fold_model.js").Barrier} Barrier */
/** @typedef {import("./fold_model.js").Applied} Applied */
/** @typedef {import("./fold_model.js").Run} Run */
/** @typedef {import("./fold_publication.js").Publication} Publication */

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
 * `applyEvent`, writing how to undo it onto `undo` (see `fold_undo.js`).
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
 * Apply one event (incrementally: live batches never refold). Events at or below the
 * last applied seq are ignored (a resumed stream may repeat); returns whether it applied.
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
    anomaly(run, event, `${event.type} after run.interrupted`);
    run.lastSeq = event.seq;
    run.version += 1;
    return true;
  }
  const path = event.path || "";
  const inv = run.invocations.get(path);
  if (inv) {
    keepLength(inv.seqs);
    inv.seqs.push(event.seq);
  }
  if (typeof event.offset === "number" && event.offset > run.endOffset && event.type !== "run.interrupted") {
    run.endOffset = event.offset;
  }
  switch (event.type) {
    case "turn.started":
      keepAll(run, TURN_STARTED_KEYS);
      run.runId = event.run_id;
      run.sessionId = event.session_id;
      run.flow = event.flow;
      run.message = event.message ?? null;
      run.startedAt = event.time ?? null;
      break;
    case "session.loaded":
      keepAll(run, SESSION_LOADED_KEYS);
      run.sessionId = event.session_id;
      run.state = copyState(event.steps || {});
      run.cursor = event.current_step ?? null;
      run.tokens = { ...(event.tokens || {}) };
      break;
    case "step.entered":
      keepLength(run.trail);
      run.trail.push({ step: event.step, how: event.how, level: event.level, path, seq: event.seq });
      if (path === "" && inv && (event.how === "start" || event.how === "goto" || !inv.step)) {
        keep(inv, "step");
        inv.step = event.step;
      }
      break;
    case "cursor.moved":
      keep(run, "cursor");
      run.cursor = event.to_step;
      break;
    case "state.replaced":
    case "state.removed":
    case "state.contributed": {
      const deleted = event.type === "state.removed";
      if (!event.draft) {
        const value = event.type === "state.contributed" ? contributed(run, inv, event)
          : event.type === "state.replaced" ? event.value : null;
        keepField(run.state, event.step);
        setField(run.state, event.step, event.field, value, deleted);
      } else if (inv) {
        /** @type {Change} */
        const change = event.type === "state.contributed" ? contributionChange(run, inv, event)
          : { seq: event.seq, step: event.step, field: event.field, value: event.type === "state.replaced" ? event.value : null, deleted, kind: "draft", barrier: null };
        keepLength(inv.changes);
        keepLength(inv.drafts);
        inv.changes.push(change);
        inv.drafts.push(change);
      } else {
        anomaly(run, event, `draft on unknown invocation ${path}`);
      }
      break;
    }
    case "barrier.forked": {
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
        baseState: event.base === "canonical" ? snapshot(run.state) : null,
        outcome: "open", target: null, published: [], discarded: [], reductions: [],
        error: null, provenance: [], checkpointRevision: null, checkpointFailed: false,
        cancelReason: null, cancel: null, joinedAt: null, joinedSeq: null, interrupted: false,
        undo: new Map(), applied: new Map(), discardedAt: new Map(),
        counts: { queued: requests.length, running: 0, fulfilled: 0, rejected: 0 },
      };
      keepEntry(run.barriers, event.barrier);
      run.barriers.set(event.barrier, barrier);
      if (inv) {
        keepLength(inv.barriers);
        inv.barriers.push(event.barrier);
      }
      for (const request of requests) {
        if (run.invocations.has(request.path)) anomaly(run, event, `barrier ${event.barrier} reuses path ${request.path}`);
        const child = newInvocation(request.path, request.step, request.key, request.index, event.barrier);
        child.params = request.params ?? null;
        child.userMessage = request.user_message ?? null;
        keepEntry(run.invocations, request.path);
        run.invocations.set(request.path, child);
      }
      keep(run, "branchCount");
      run.branchCount += requests.length;
      break;
    }
    case "branch.started":
      if (inv) {
        setStatus(run, inv, "running");
        keep(inv, "started");
        keep(inv, "startedSeq");
        inv.started = event.offset;
        inv.startedSeq = event.seq;
      } else anomaly(run, event, `unknown branch ${path}`);
      break;
    case "branch.fulfilled":
      if (inv) {
        setStatus(run, inv, "fulfilled");
        keepAll(inv, FULFILLED_KEYS);
        inv.finished = event.offset;
        inv.finishedSeq = event.seq;
        inv.output = event.output;
      } else anomaly(run, event, `unknown branch ${path}`);
      break;
    case "branch.rejected":
      if (inv) {
        setStatus(run, inv, "rejected");
        keepAll(inv, REJECTED_KEYS);
        inv.finished = event.offset;
        inv.finishedSeq = event.seq;
        inv.error = event.error;
        inv.cancelled = !!event.cancelled;
      } else anomaly(run, event, `unknown branch ${path}`);
      break;
    case "branch.direct_result":
      if (inv) {
        keepAll(inv, DIRECT_RESULT_KEYS);
        inv.output = event.value;
        inv.directResult = { tool: event.tool, value: event.value, seq: event.seq };
        inv.hasDirectResult = true;
      }
      break;
    case "join.reduced": {
      const barrier = barrierOf(run, event);
      if (barrier) {
        keepLength(barrier.reductions);
        barrier.reductions.push({
          step: event.step, field: event.field, channel: event.channel,
          inputs: event.inputs, completion_order: event.completion_order, result: event.result,
          initial: event.initial, seq: event.seq,
        });
      }
      break;
    }
    case "join.published": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      keepAll(barrier, PUBLISHED_KEYS);
      barrier.outcome = "published";
      barrier.joinedAt = event.offset;
      barrier.joinedSeq = event.seq;
      barrier.target = event.target;
      barrier.published = (event.fields || []).map(publishedField);
      barrier.discarded = [...(event.discarded || [])];
      barrier.applied = appliedIndex(barrier);
      barrier.discardedAt = new Map(barrier.discarded.map((d) => [d.index, d]));
      for (const item of barrier.published) {
        if (event.target === "canonical") {
          const fields = run.state[item.step] || {};
          const key = undoKey(item.step, item.field);
          keepEntry(barrier.undo, key);
          barrier.undo.set(key, [
            Object.prototype.hasOwnProperty.call(fields, item.field), fields[item.field] ?? null]);
          keepField(run.state, item.step);
          setField(run.state, item.step, item.field, item.value, item.deleted);
        } else if (inv) {
          keepLength(inv.changes);
          inv.changes.push({
            seq: event.seq, step: item.step, field: item.field, value: item.value,
            deleted: item.deleted, kind: "join", barrier: barrier.id,
          });
        }
      }
      break;
    }
    case "join.invalidated": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      keepAll(barrier, INVALIDATED_KEYS);
      barrier.outcome = "invalidated";
      barrier.joinedAt = event.offset;
      barrier.joinedSeq = event.seq;
      barrier.error = event.error;
      barrier.provenance = [...(event.provenance || [])];
      keepLength(run.conflicts);
      run.conflicts.push(event.barrier);
      break;
    }
    case "checkpoint.saved": {
      const barrier = barrierOf(run, event);
      if (barrier) {
        keep(barrier, "checkpointRevision");
        barrier.checkpointRevision = event.revision;
      }
      break;
    }
    case "checkpoint.failed": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      for (const [key, [present, value]] of barrier.undo) {
        const [step, name] = splitUndoKey(key);
        keepField(run.state, step);
        setField(run.state, step, name, value, !present);
      }
      keepAll(barrier, CHECKPOINT_FAILED_KEYS);
      barrier.outcome = "invalidated";
      barrier.error = event.error;
      barrier.checkpointFailed = true;
      keepLength(run.conflicts);
      run.conflicts.push(event.barrier);
      break;
    }
    case "cancel.requested": {
      const barrier = barrierOf(run, event);
      if (barrier) {
        keep(barrier, "cancelReason");
        keep(barrier, "cancel");
        barrier.cancelReason = event.reason;
        barrier.cancel = { seq: event.seq, running: [], queued: [], closed: [] };
      }
      break;
    }
    case "cancel.propagated": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      keep(barrier, "cancel");
      barrier.cancel = { ...(barrier.cancel || { seq: event.seq, closed: [] }), running: event.running || [], queued: event.queued || [] };
      for (const p of event.running || []) {
        const told = run.invocations.get(p);
        if (told) {
          keep(told, "cancelTold");
          told.cancelTold = true;
        }
      }
      break;
    }
    case "cancel.grace_expired": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      keep(barrier, "cancel");
      barrier.cancel = { ...(barrier.cancel || { seq: event.seq, running: [], queued: [] }), closed: event.closed || [] };
      for (const p of event.closed || []) {
        const closed = run.invocations.get(p);
        if (closed) {
          keep(closed, "lostRights");
          closed.lostRights = true;
        }
      }
      break;
    }
    case "model.started":
      if (inv) {
        keepLength(inv.models);
        inv.models.push({
          call: event.call, attempt: event.attempt, step: event.step, seq: event.seq,
          offset: event.offset, model: event.model, messages: event.messages || [], tools: event.tools || [],
          finished: null, failed: null,
        });
      }
      break;
    case "model.finished":
      keep(run, "tokens");
      run.tokens = {
        input_tokens: (run.tokens.input_tokens || 0) + event.input_tokens,
        output_tokens: (run.tokens.output_tokens || 0) + event.output_tokens,
        total_tokens: (run.tokens.total_tokens || 0) + event.total_tokens,
      };
      if (inv) {
        keep(inv, "tokens");
        inv.tokens += event.total_tokens;
        const call = findModelCall(inv, event);
        if (call) {
          keep(call, "finished");
          call.finished = event;
        }
      }
      break;
    case "model.failed":
      if (inv) {
        const call = findModelCall(inv, event);
        if (call) {
          keep(call, "failed");
          call.failed = event;
        }
      }
      break;
    case "tool.started":
      if (inv) {
        keepLength(inv.tools);
        inv.tools.push({ callId: event.call_id, name: event.name, step: event.step, args: event.args, seq: event.seq, finished: null });
      }
      break;
    case "tool.finished":
      if (inv) {
        const call = findLast(inv.tools, (t) => t.callId === event.call_id && !t.finished);
        keepLength(inv.tools);
        if (call) {
          keep(call, "finished");
          call.finished = event;
        } else inv.tools.push({ callId: event.call_id, name: event.name, step: event.step, args: null, seq: event.seq, finished: event });
      }
      break;
    case "turn.finished":
      keep(run, "status");
      keep(run, "reply");
      run.status = "finished";
      run.reply = {
        success: event.success, completed: event.completed,
        message: event.message, content_type: event.content_type,
      };
      break;
    case "turn.failed":
      keep(run, "status");
      keep(run, "error");
      run.status = "failed";
      run.error = event.error;
      break;
    case "turn.cancelled":
      keep(run, "status");
      keep(run, "cancellation");
      run.status = "cancelled";
      run.cancellation = { seq: event.seq, reason: event.reason, requested_by: event.requested_by ?? null, revision: event.revision ?? null };
      break;
    case "concurrent.batch_started":
    case "concurrent.child_started":
    case "concurrent.child_finished":
    case "concurrent.batch_finished":
      applyConcurrent(run.concurrent, event, (message) => anomaly(run, event, message));
      break;
    case "sink.overflowed":
      keepLength(run.overflows);
      run.overflows.push({ seq: event.seq, sink: event.sink, first: event.first_seq, last: event.last_seq });
      break;
    case "run.interrupted":
      if (run.status === "finished" || run.status === "failed" || run.status === "cancelled") {
        anomaly(run, event, `run.interrupted after turn.${run.status}`);
        break;
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
      break;
    default:
      break;
  }
  run.lastSeq = event.seq;
  run.version += 1;
  return true;
}

/**
 * A contribution's value in its view: what the event carries, or, when it names its
 * built-in channel, the contribution reduced onto the view's value just before.
 * @param {Run} run @param {Invocation | undefined} inv @param {any} event
 */
function contributed(run, inv, event) {
  if (!event.channel || !event.draft || !inv) return event.result;
  const before = fieldBefore(run, inv.path, event.step, event.field, event.seq);
  try {
    return reduceOne(event.channel, before.present, before.value, event.value, inv.key);
  } catch (error) {
    anomaly(run, event, `contribution to ${event.step}.${event.field}: ${/** @type {Error} */ (error).message}`);
    return null;
  }
}

/**
 * A branch's draft change for a contribution it made (the event is a draft of `inv`).
 * An `append` the fold reduces becomes a `grownChange`: pushed onto the list of the
 * branch's previous append to the field when that one ends its list, else onto a copy
 * of the value before (made once; the next appends push onto it).
 * @param {Run} run @param {Invocation} inv @param {any} event @returns {Change}
 */
function contributionChange(run, inv, event) {
  if (event.channel === "append") {
    const tip = appendTip(inv.changes, event.step, event.field);
    if (tip) {
      tip.push(event.value);
      return grownChange(event.seq, event.step, event.field, tip, tip.length);
    }
  }
  const value = contributed(run, inv, event);
  if (event.channel === "append" && Array.isArray(value)) {
    return grownChange(event.seq, event.step, event.field, value, value.length);
  }
  return { seq: event.seq, step: event.step, field: event.field, value, deleted: false, kind: "draft", barrier: null };
}

/** @param {Run} run @param {any} event @param {string} message */
function anomaly(run, event, message) {
  run.anomalies.push({ seq: event.seq, message });
}

/** @param {Run} run @param {any} event */
function barrierOf(run, event) {
  const barrier = run.barriers.get(event.barrier);
  if (!barrier) anomaly(run, event, `${event.type} for unknown barrier ${event.barrier}`);
  return barrier;
}

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

/** @param {any} f */
function publishedField(f) {
  return {
    step: f.step, field: f.field, value: f.value ?? null,
    deleted: !!f.deleted, writer: f.writer ?? null,
  };
}

/**
 * Who each applied field of a join's publication record came from, indexed under every
 * path from the branch down to the writer, so "did anything of `path` publish" is one
 * lookup for a branch and for any of its descendants. Contributions count only when the
 * record lists their field: a reduction alone publishes nothing.
 * @param {Barrier} barrier @returns {Map<string, Applied[]>}
 */
function appliedIndex(barrier) {
  /** @type {Map<string, Applied[]>} */
  const index = new Map();
  const depth = pathDepth(barrier.caller) + 1;
  /** @param {Applied} item */
  const add = (item) => {
    const parts = item.origin.split(".");
    for (let n = depth; n <= parts.length; n += 1) {
      const key = parts.slice(0, n).join(".");
      const list = index.get(key);
      if (list) list.push(item);
      else index.set(key, [item]);
    }
  };
  const listed = new Set();
  for (const f of barrier.published) {
    listed.add(undoKey(f.step, f.field));
    if (f.writer !== null && f.writer !== "") {
      add({ step: f.step, field: f.field, kind: f.deleted ? "removal" : "replacement", origin: String(f.writer) });
    }
  }
  for (const r of barrier.reductions) {
    if (!listed.has(undoKey(r.step, r.field))) continue;
    for (const input of r.inputs || []) {
      // A foreign record without a path names nobody.
      if (typeof input?.path === "string") add({ step: r.step, field: r.field, kind: "contribution", origin: input.path });
    }
  }
  return index;
}

/** @param {Invocation} inv @param {any} event */
function findModelCall(inv, event) {
  return findLast(inv.models, (m) => m.call === event.call && m.attempt === event.attempt);
}

/**
 * @template T @param {T[]} items @param {(item: T) => boolean} test @returns {T | undefined}
 */
function findLast(items, test) {
  for (let i = items.length - 1; i >= 0; i -= 1) if (test(items[i])) return items[i];
  return undefined;
}
