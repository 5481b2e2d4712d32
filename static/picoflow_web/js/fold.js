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

/** @typedef {Record<string, Record<string, any>>} State */
/**
 * @typedef {{seq: number, step: string, field: string, value: any, deleted: boolean,
 *   kind: "draft" | "join", barrier: string | null}} Change
 */
/**
 * @typedef {{call: number, attempt: number, step: string, seq: number, offset: number, model: any,
 *   messages: any[], tools: string[], finished: any, failed: any}} ModelCall
 */
/**
 * @typedef {{callId: string, name: string, step: string, args: any, seq: number,
 *   finished: any}} ToolCall
 */
/**
 * @typedef {object} Invocation
 * @property {string} path
 * @property {string} step
 * @property {string} key
 * @property {number} index
 * @property {string | null} barrier
 * @property {number} depth
 * @property {string} status  queued, running, fulfilled or rejected
 * @property {boolean} interrupted  the run was interrupted while it was running
 * @property {boolean} cancelled
 * @property {any} output
 * @property {any} error
 * @property {number | null} started
 * @property {number | null} finished
 * @property {number | null} startedSeq
 * @property {number | null} finishedSeq
 * @property {string[]} barriers  barriers this invocation opened, in order
 * @property {Change[]} changes  own drafts and received publications
 * @property {Change[]} drafts  own drafts only (what siblings cannot see)
 * @property {number} tokens
 * @property {any} params
 * @property {string | null} userMessage
 * @property {number[]} seqs  seq of every event on this path
 * @property {ModelCall[]} models
 * @property {ToolCall[]} tools
 * @property {any} directResult
 * @property {boolean} hasDirectResult
 * @property {boolean} cancelTold  a cancel.propagated named it while running
 * @property {boolean} lostRights  a cancel.grace_expired closed it
 */
/**
 * @typedef {object} Barrier
 * @property {string} id
 * @property {string} caller
 * @property {string} callerStep
 * @property {string} policy
 * @property {string} checkpoint
 * @property {string} base
 * @property {number} forkedSeq
 * @property {number} forkedAt
 * @property {number | null} maxConcurrency
 * @property {number | null} branchTimeout
 * @property {number | null} tokenBudget
 * @property {string[]} branches  branch paths in request order
 * @property {State | null} baseState  canonical state at the fork (root barriers)
 * @property {string} outcome  open, published or invalidated
 * @property {string | null} target  canonical or caller-scope, once published
 * @property {any[]} published
 * @property {any[]} discarded
 * @property {any[]} reductions
 * @property {any} error
 * @property {any[]} provenance
 * @property {number | null} checkpointRevision
 * @property {boolean} checkpointFailed
 * @property {string | null} cancelReason
 * @property {any} cancel  {seq, running, queued, closed} once cancelled
 * @property {number | null} joinedAt
 * @property {number | null} joinedSeq
 * @property {boolean} interrupted  the run was interrupted while it was open
 * @property {Map<string, [boolean, any]>} undo
 * @property {Record<string, number>} counts  branches by status
 * @property {Map<number, any>} discardedAt  the `discarded` entries by request index
 * @property {Map<string, Applied[]>} applied  what the join's publication record applied, by
 *   every invocation path (at or below this barrier's branches) it came from
 */
/**
 * One field a join's publication record lists as applied, and who it came from.
 * @typedef {{step: string, field: string, kind: "replacement" | "removal" | "contribution",
 *   origin: string}} Applied
 */

export const STATUSES = ["queued", "running", "fulfilled", "rejected"];

/** A fresh, empty run model. */
export function createRun() {
  return {
    runId: "",
    sessionId: "",
    flow: "",
    message: /** @type {string | null} */ (null),
    /** running, finished, failed, interrupted or cancelled */
    status: "running",
    reply: /** @type {any} */ (null),
    error: /** @type {any} */ (null),
    cursor: /** @type {string | null} */ (null),
    /** @type {State} */
    state: {},
    /** @type {Record<string, number>} */
    tokens: {},
    /** @type {Map<string, Invocation>} */
    invocations: new Map([["", newInvocation("", "", "", -1, null, "running")]]),
    /** @type {Map<string, Barrier>} */
    barriers: new Map(),
    /** @type {string[]} ids of barriers whose join was invalidated */
    conflicts: [],
    lastSeq: -1,
    /** @type {any[]} the applied events, in order */
    events: [],
    startedAt: /** @type {string | number | null} */ (null),
    endOffset: 0,
    /** @type {{step: string, how: string, level: number, path: string, seq: number}[]} */
    trail: [],
    /** @type {{seq: number, message: string}[]} events the fold could not place */
    anomalies: [],
    /** @type {{seq: number, sink: string, first: number, last: number}[]} */
    overflows: [],
    /** @type {{seq: number, reason: string, silent_for: number} | null} the run.interrupted that ended it */
    interruption: null,
    /** @type {{seq: number, reason: string, requested_by: string | null, revision: number | null} | null} the turn.cancelled that ended it */
    cancellation: null,
    branchCount: 0,
    /** bumped by every applied event (renderers compare it) */
    version: 0,
  };
}

/** @typedef {ReturnType<typeof createRun>} Run */

/**
 * @param {string} path @param {string} step @param {string} key @param {number} index
 * @param {string | null} barrier @param {string} status
 * @returns {Invocation}
 */
function newInvocation(path, step, key, index, barrier, status = "queued") {
  return {
    path, step, key, index, barrier,
    depth: pathDepth(path),
    status, interrupted: false, cancelled: false, output: null, error: null,
    started: null, finished: null, startedSeq: null, finishedSeq: null,
    barriers: [], changes: [], drafts: [], tokens: 0,
    params: null, userMessage: null, seqs: [], models: [], tools: [],
    directResult: null, hasDirectResult: false, cancelTold: false, lostRights: false,
  };
}

/** @param {string} path  "" is 0, "3" is 1, "3.1" is 2 */
function pathDepth(path) {
  if (path === "") return 0;
  let depth = 1;
  for (let i = path.indexOf("."); i >= 0; i = path.indexOf(".", i + 1)) depth += 1;
  return depth;
}

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
 * Apply a batch of events; returns how many were new.
 * @param {Run} run @param {any[]} events
 */
export function applyEvents(run, events) {
  let applied = 0;
  for (const event of events) if (applyEvent(run, event)) applied += 1;
  return applied;
}

/**
 * @param {State} state @param {string} step @param {string} name @param {any} value
 * @param {boolean} deleted
 */
function setField(state, step, name, value, deleted) {
  const fields = { ...(state[step] || {}) };
  if (deleted) delete fields[name];
  else fields[name] = value;
  state[step] = fields;
}

/** @param {State} state @returns {State} */
function snapshot(state) {
  return { ...state };
}

/**
 * Apply one event (incrementally: live batches never refold). Events at or below the
 * last applied seq are ignored (a resumed stream may repeat); returns whether it applied.
 * @param {Run} run @param {any} event
 */
export function applyEvent(run, event) {
  if (!event || typeof event.seq !== "number" || event.seq <= run.lastSeq) return false;
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
  if (inv) inv.seqs.push(event.seq);
  if (typeof event.offset === "number" && event.offset > run.endOffset && event.type !== "run.interrupted") {
    run.endOffset = event.offset;
  }
  switch (event.type) {
    case "turn.started":
      run.runId = event.run_id;
      run.sessionId = event.session_id;
      run.flow = event.flow;
      run.message = event.message ?? null;
      run.startedAt = event.time ?? null;
      break;
    case "session.loaded":
      run.sessionId = event.session_id;
      run.state = copyState(event.steps || {});
      run.cursor = event.current_step ?? null;
      run.tokens = { ...(event.tokens || {}) };
      break;
    case "step.entered":
      run.trail.push({ step: event.step, how: event.how, level: event.level, path, seq: event.seq });
      if (path === "" && inv && (event.how === "start" || event.how === "goto" || !inv.step)) {
        inv.step = event.step;
      }
      break;
    case "cursor.moved":
      run.cursor = event.to_step;
      break;
    case "state.replaced":
    case "state.removed":
    case "state.contributed": {
      const deleted = event.type === "state.removed";
      const value = event.type === "state.contributed" ? event.result
        : event.type === "state.replaced" ? event.value : null;
      if (!event.draft) {
        setField(run.state, event.step, event.field, value, deleted);
      } else if (inv) {
        /** @type {Change} */
        const change = { seq: event.seq, step: event.step, field: event.field, value, deleted, kind: "draft", barrier: null };
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
      run.barriers.set(event.barrier, barrier);
      if (inv) inv.barriers.push(event.barrier);
      for (const request of requests) {
        if (run.invocations.has(request.path)) anomaly(run, event, `barrier ${event.barrier} reuses path ${request.path}`);
        const child = newInvocation(request.path, request.step, request.key, request.index, event.barrier);
        child.params = request.params ?? null;
        child.userMessage = request.user_message ?? null;
        run.invocations.set(request.path, child);
      }
      run.branchCount += requests.length;
      break;
    }
    case "branch.started":
      if (inv) {
        setStatus(run, inv, "running");
        inv.started = event.offset;
        inv.startedSeq = event.seq;
      } else anomaly(run, event, `unknown branch ${path}`);
      break;
    case "branch.fulfilled":
      if (inv) {
        setStatus(run, inv, "fulfilled");
        inv.finished = event.offset;
        inv.finishedSeq = event.seq;
        inv.output = event.output;
      } else anomaly(run, event, `unknown branch ${path}`);
      break;
    case "branch.rejected":
      if (inv) {
        setStatus(run, inv, "rejected");
        inv.finished = event.offset;
        inv.finishedSeq = event.seq;
        inv.error = event.error;
        inv.cancelled = !!event.cancelled;
      } else anomaly(run, event, `unknown branch ${path}`);
      break;
    case "branch.direct_result":
      if (inv) {
        inv.output = event.value;
        inv.directResult = { tool: event.tool, value: event.value, seq: event.seq };
        inv.hasDirectResult = true;
      }
      break;
    case "join.reduced": {
      const barrier = barrierOf(run, event);
      if (barrier) {
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
          barrier.undo.set(undoKey(item.step, item.field), [
            Object.prototype.hasOwnProperty.call(fields, item.field), fields[item.field] ?? null]);
          setField(run.state, item.step, item.field, item.value, item.deleted);
        } else if (inv) {
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
      barrier.outcome = "invalidated";
      barrier.joinedAt = event.offset;
      barrier.joinedSeq = event.seq;
      barrier.error = event.error;
      barrier.provenance = [...(event.provenance || [])];
      run.conflicts.push(event.barrier);
      break;
    }
    case "checkpoint.saved": {
      const barrier = barrierOf(run, event);
      if (barrier) barrier.checkpointRevision = event.revision;
      break;
    }
    case "checkpoint.failed": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      for (const [key, [present, value]] of barrier.undo) {
        const [step, name] = splitUndoKey(key);
        setField(run.state, step, name, value, !present);
      }
      barrier.outcome = "invalidated";
      barrier.error = event.error;
      barrier.checkpointFailed = true;
      run.conflicts.push(event.barrier);
      break;
    }
    case "cancel.requested": {
      const barrier = barrierOf(run, event);
      if (barrier) {
        barrier.cancelReason = event.reason;
        barrier.cancel = { seq: event.seq, running: [], queued: [], closed: [] };
      }
      break;
    }
    case "cancel.propagated": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      barrier.cancel = { ...(barrier.cancel || { seq: event.seq, closed: [] }), running: event.running || [], queued: event.queued || [] };
      for (const p of event.running || []) {
        const told = run.invocations.get(p);
        if (told) told.cancelTold = true;
      }
      break;
    }
    case "cancel.grace_expired": {
      const barrier = barrierOf(run, event);
      if (!barrier) break;
      barrier.cancel = { ...(barrier.cancel || { seq: event.seq, running: [], queued: [] }), closed: event.closed || [] };
      for (const p of event.closed || []) {
        const closed = run.invocations.get(p);
        if (closed) closed.lostRights = true;
      }
      break;
    }
    case "model.started":
      if (inv) {
        inv.models.push({
          call: event.call, attempt: event.attempt, step: event.step, seq: event.seq,
          offset: event.offset, model: event.model, messages: event.messages || [], tools: event.tools || [],
          finished: null, failed: null,
        });
      }
      break;
    case "model.finished":
      run.tokens = {
        input_tokens: (run.tokens.input_tokens || 0) + event.input_tokens,
        output_tokens: (run.tokens.output_tokens || 0) + event.output_tokens,
        total_tokens: (run.tokens.total_tokens || 0) + event.total_tokens,
      };
      if (inv) {
        inv.tokens += event.total_tokens;
        const call = findModelCall(inv, event);
        if (call) call.finished = event;
      }
      break;
    case "model.failed":
      if (inv) {
        const call = findModelCall(inv, event);
        if (call) call.failed = event;
      }
      break;
    case "tool.started":
      if (inv) {
        inv.tools.push({ callId: event.call_id, name: event.name, step: event.step, args: event.args, seq: event.seq, finished: null });
      }
      break;
    case "tool.finished":
      if (inv) {
        const call = findLast(inv.tools, (t) => t.callId === event.call_id && !t.finished);
        if (call) call.finished = event;
        else inv.tools.push({ callId: event.call_id, name: event.name, step: event.step, args: null, seq: event.seq, finished: event });
      }
      break;
    case "turn.finished":
      run.status = "finished";
      run.reply = {
        success: event.success, completed: event.completed,
        message: event.message, content_type: event.content_type,
      };
      break;
    case "turn.failed":
      run.status = "failed";
      run.error = event.error;
      break;
    case "turn.cancelled":
      run.status = "cancelled";
      run.cancellation = { seq: event.seq, reason: event.reason, requested_by: event.requested_by ?? null, revision: event.revision ?? null };
      break;
    case "sink.overflowed":
      run.overflows.push({ seq: event.seq, sink: event.sink, first: event.first_seq, last: event.last_seq });
      break;
    case "run.interrupted":
      if (run.status === "finished" || run.status === "failed" || run.status === "cancelled") {
        anomaly(run, event, `run.interrupted after turn.${run.status}`);
        break;
      }
      run.status = "interrupted";
      run.interruption = { seq: event.seq, reason: event.reason, silent_for: event.silent_for };
      for (const [p, running] of run.invocations) if (p && running.status === "running") running.interrupted = true;
      for (const b of run.barriers.values()) if (b.outcome === "open") b.interrupted = true;
      break;
    default:
      break;
  }
  run.lastSeq = event.seq;
  run.version += 1;
  return true;
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
    barrier.counts[inv.status] -= 1;
    barrier.counts[status] += 1;
  }
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
      add({ step: r.step, field: r.field, kind: "contribution", origin: String(input.path) });
    }
  }
  return index;
}

/** @param {string} step @param {string} field */
function undoKey(step, field) {
  return JSON.stringify([step, field]);
}

/** @param {string} key @returns {[string, string]} */
function splitUndoKey(key) {
  return JSON.parse(key);
}

/** @param {State} state @returns {State} */
function copyState(state) {
  /** @type {State} */
  const out = {};
  for (const [step, fields] of Object.entries(state)) out[step] = { ...fields };
  return out;
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

/**
 * The fork-time base of invocation `path`: what its barrier's branches could read at the
 * fork (the caller's view then, or the canonical state then).
 * @param {Run} run @param {string} path @returns {State}
 */
export function baseAt(run, path) {
  if (path === "") return copyState(run.state);
  const inv = mustGet(run.invocations, path, "invocation");
  const barrier = mustGet(run.barriers, /** @type {string} */ (inv.barrier), "barrier");
  return baseState(run, barrier, new Set([path]));
}

/**
 * A fork-time base the events do not tell (a fork from an unknown invocation, or a cycle
 * of bases in a corrupt trace) reads as empty, as in the Python fold.
 * @param {Run} run @param {Barrier} barrier @param {Set<string>} seen @returns {State}
 */
function baseState(run, barrier, seen) {
  if (barrier.base === "canonical") return copyState(barrier.baseState || {});
  if (seen.has(barrier.base) || (barrier.base !== "" && !run.invocations.has(barrier.base))) return {};
  return viewAtSeen(run, barrier.base, barrier.forkedSeq, seen).state;
}

/**
 * What invocation `path` could read at `seq` (default: the end of the fold), exactly like
 * `view_at` in `runtime/events/fold.py`: `{state, own, invisible}` - the visible state, the
 * changes that came from the invocation itself or its inner joins (`kind` says which),
 * and the drafts its siblings had made by then (which it could not see).
 * @param {Run} run @param {string} path @param {number | null} [seq]
 */
export function viewAt(run, path, seq = null) {
  return viewAtSeen(run, path, seq, new Set());
}

/** @param {Run} run @param {string} path @param {number | null} seq @param {Set<string>} seen */
function viewAtSeen(run, path, seq, seen) {
  const limit = seq === null || seq === undefined ? run.lastSeq : seq;
  if (path === "") return { state: copyState(run.state), own: [], invisible: [] };
  const inv = mustGet(run.invocations, path, "invocation");
  const barrier = mustGet(run.barriers, /** @type {string} */ (inv.barrier), "barrier");
  const state = baseState(run, barrier, new Set([...seen, path]));
  const own = inv.changes.filter((c) => c.seq <= limit);
  for (const c of own) setField(state, c.step, c.field, c.value, c.deleted);
  const invisible = [];
  for (const other of barrier.branches) {
    if (other === path) continue;
    const sibling = run.invocations.get(other);
    if (!sibling) continue;
    for (const d of sibling.drafts) {
      if (d.seq <= limit) {
        invisible.push({ path: other, key: sibling.key, seq: d.seq, step: d.step, field: d.field, value: d.value, deleted: d.deleted });
      }
    }
  }
  return {
    state,
    own: own.map((c) => ({ seq: c.seq, step: c.step, field: c.field, value: c.value, deleted: c.deleted, kind: c.kind, barrier: c.barrier })),
    invisible,
  };
}

/**
 * What the join of `path`'s barrier published from it: its replacements (`writer` is it),
 * the contributions of it and its descendants that were reduced, whether the join
 * discarded it and why, and whether its publication reached the canonical state (true),
 * died on the way (false) or is still pending (null).
 * @param {Run} run @param {string} path
 */
export function published(run, path) {
  const inv = mustGet(run.invocations, path, "invocation");
  if (inv.barrier === null) return null;
  const barrier = mustGet(run.barriers, inv.barrier, "barrier");
  const mine = (/** @type {string} */ p) => p === path || p.startsWith(path + ".");
  const replacements = barrier.outcome === "published"
    ? barrier.published.filter((f) => f.writer === path) : [];
  const contributions = [];
  if (barrier.outcome === "published") {
    for (const r of barrier.reductions) {
      for (const input of r.inputs || []) {
        if (mine(String(input.path))) {
          contributions.push({ step: r.step, field: r.field, channel: r.channel, path: input.path, key: input.key, value: input.value, result: r.result });
        }
      }
    }
  }
  const discarded = barrier.discarded.find((d) => d.index === inv.index) || null;
  return {
    barrier: barrier.id,
    outcome: barrier.outcome,
    target: barrier.target,
    replacements,
    contributions,
    discarded: discarded ? discarded.reason : null,
    reached: reachesCanonical(run, path),
  };
}

/**
 * Whether `path`'s writes reached the canonical state: true, false, or null (undecided).
 * @param {Run} run @param {string} path @returns {boolean | null}
 */
export function reachesCanonical(run, path) {
  if (path === "") return true;
  const inv = run.invocations.get(path);
  if (!inv || inv.barrier === null) return null;
  const barrier = run.barriers.get(inv.barrier);
  if (!barrier) return null;
  if (inv.status === "rejected") return false;
  if (barrier.outcome === "invalidated") return false;
  if (barrier.discarded.some((d) => d.index === inv.index)) return false;
  if (barrier.outcome === "open") return null;
  if (barrier.target === "canonical") return true;
  return reachesCanonical(run, barrier.caller);
}

/**
 * What became of an invocation's writes, from its join's publication record and those of
 * the joins above it; the page draws only this, so a badge can never say more than the
 * record does.
 *
 * `state` is one of
 * - `pending`: its join has not run yet;
 * - `scoped`: its join applied something of it into its caller's private scope, and the
 *   caller's own join has not decided yet;
 * - `published`: fields it wrote reached the canonical state (`fields` lists them, from the
 *   record of the join that published into the canonical state);
 * - `nothing`: its join ran and kept it, but no field of the record came from it;
 * - `discarded`: its writes never reached their target; `reason` says why in one word
 *   (`rejected`, `cancelled`, `late`, `atomic`, `invalidated`, `rollback`, `caller`,
 *   `not-joined`, or `discarded` for a reason this page does not know) and `text` in words.
 *
 * @typedef {{state: "pending" | "scoped" | "published" | "nothing" | "discarded",
 *   reason: string | null, text: string, fields: Applied[], via: string | null}} Publication
 */

/**
 * @param {Publication["state"]} state @param {string | null} reason @param {string} text
 * @param {Applied[]} [fields] @param {string | null} [via]  the caller whose fate decided it
 * @returns {Publication}
 */
function pub(state, reason, text, fields = [], via = null) {
  return { state, reason, text, fields, via };
}

/**
 * The publication of invocation `path` (null for the turn itself, which publishes nothing).
 * @param {Run} run @param {string} path @returns {Publication | null}
 */
export function publicationOf(run, path) {
  const cache = publicationCache(run);
  if (cache.paths.has(path)) return /** @type {Publication | null} */ (cache.paths.get(path));
  const found = derivePublication(run, path);
  cache.paths.set(path, found);
  return found;
}

/**
 * Publications of one version of a run: rows, lanes, counts and the inspector ask for the
 * same ones many times a frame, and a nested branch's answer walks its callers.
 * @type {WeakMap<Run, {version: number, paths: Map<string, Publication | null>, barriers: Map<string, any>}>}
 */
const CACHE = new WeakMap();

/** @param {Run} run */
function publicationCache(run) {
  let cache = CACHE.get(run);
  if (!cache || cache.version !== run.version) {
    cache = { version: run.version, paths: new Map(), barriers: new Map() };
    CACHE.set(run, cache);
  }
  return cache;
}

/** @param {Run} run @param {string} path @returns {Publication | null} */
function derivePublication(run, path) {
  if (path === "") return null;
  const inv = run.invocations.get(path);
  if (!inv || inv.barrier === null) return null;
  const barrier = run.barriers.get(inv.barrier);
  if (!barrier) return null;
  const own = joinVerdict(run, barrier);
  if (own) return own;
  const entry = barrier.discardedAt.get(inv.index);
  if (entry) return discardedBranch(inv, entry);
  if (inv.status !== "fulfilled") {
    // A join only keeps fulfilled branches; a record that does not list this one is short.
    return pub("discarded", "rejected", `Discarded: it ended ${inv.status} and its join keeps only fulfilled branches.`);
  }
  const applied = barrier.applied.get(path) || [];
  if (barrier.target === "caller-scope") {
    const caller = publicationOf(run, barrier.caller);
    const callerInv = run.invocations.get(barrier.caller);
    const who = callerInv ? `${callerInv.key || callerInv.step} (${barrier.caller})` : barrier.caller;
    if (caller && caller.state === "discarded") {
      const why = unprefixed(caller.text);
      const how = callerInv && callerInv.status === "rejected" ? `failed after this join: ${why}`
        : `was discarded${why.startsWith("by ") ? " " : ": "}${why}`;
      return pub("discarded", "caller", `Discarded with its caller: ${who} ${how}`, [], barrier.caller);
    }
    if (!applied.length) return pub("nothing", null, "Its join kept it, but it wrote nothing that was published.");
    if (!caller || caller.state === "pending" || caller.state === "scoped") {
      return pub("scoped", null, `Published into the scope of its caller ${who}; its caller's join has not run yet.`, applied, barrier.caller);
    }
    const root = canonicalRecord(run, barrier);
    const reached = root ? root.applied.get(path) || [] : [];
    if (!reached.length) {
      return pub("discarded", "caller", `Discarded: its caller's join published none of it.`, [], barrier.caller);
    }
    return pub("published", null, "Published into the canonical session state.", reached, barrier.caller);
  }
  if (!applied.length) return pub("nothing", null, "Its join kept it, but it wrote nothing that was published.");
  return pub("published", null, "Published into the canonical session state.", applied);
}

/**
 * A caller's reason, to quote inside its descendants' own sentence.
 * @param {string} text
 */
function unprefixed(text) {
  return text.replace(/^Discarded:? /, "");
}

/**
 * The join above `barrier` that published into the canonical state (`barrier` itself for
 * a root barrier), once every join on the way has run.
 * @param {Run} run @param {Barrier} barrier @returns {Barrier | null}
 */
function canonicalRecord(run, barrier) {
  /** @type {Barrier | undefined} */
  let b = barrier;
  while (b && b.outcome === "published") {
    if (b.target === "canonical") return b;
    const caller = run.invocations.get(b.caller);
    if (!caller || caller.barrier === null) return null;
    b = run.barriers.get(caller.barrier);
  }
  return null;
}

/**
 * What a join that did not publish means for every branch of it (null when it published).
 * @param {Run} run @param {Barrier} barrier @returns {Publication | null}
 */
function joinVerdict(run, barrier) {
  if (barrier.outcome === "open") {
    if (run.status === "running") return pub("pending", null, "Its join has not run yet.");
    const why = run.status === "interrupted" ? "the run was interrupted"
      : run.status === "cancelled" ? "the turn was stopped" : `the turn ${run.status}`;
    return pub("discarded", "not-joined", `Discarded: ${why} before its join ran.`);
  }
  if (barrier.outcome === "invalidated") {
    if (barrier.checkpointFailed) {
      return pub("discarded", "rollback", "Discarded: the root-join checkpoint failed and the join's publication was rolled back.");
    }
    const code = barrier.error?.code || "conflict";
    return pub("discarded", "invalidated", `Discarded: the join was invalidated (${code}), so no branch published.`);
  }
  return null;
}

/**
 * Why the join's record discarded a branch, in the record's words where it has them
 * (`atomic: ...`) and from the branch's own events where it says only "rejected".
 * @param {Invocation} inv @param {any} entry  `{index, key, reason}` of `join.published`
 * @returns {Publication}
 */
function discardedBranch(inv, entry) {
  const reason = String(entry.reason ?? "");
  if (reason.startsWith("atomic")) {
    const detail = reason.replace(/^atomic:?\s*/, "");
    return pub("discarded", "atomic", `Discarded by the atomic policy${detail ? `: ${detail}` : ""}; an atomic batch publishes nothing when any branch is rejected.`);
  }
  if (reason === "rejected") {
    if (inv.lostRights) {
      return pub("discarded", "late", "Discarded: still running when the cancellation grace period ended, it lost its publication rights.");
    }
    if (inv.cancelled && inv.error?.type === "BranchBudgetError") {
      return pub("discarded", "cancelled", "Discarded: the barrier's token budget ran out, so it lost its publication rights.");
    }
    if (inv.cancelled) {
      return pub("discarded", "cancelled", inv.startedSeq === null
        ? "Discarded: cancelled before it started."
        : "Discarded: cancelled while it ran.");
    }
    const error = inv.error ? `${inv.error.type || "Error"}: ${inv.error.message || ""}`.trim() : "";
    return pub("discarded", "rejected", `Discarded: it was rejected${error ? ` (${error})` : ""}.`);
  }
  return pub("discarded", "discarded", `Discarded: ${reason || "the join did not say why"}.`);
}

/**
 * A barrier's publication: what its join applied and whether it reached the canonical
 * state, with how many of its branches ended in each publication state.
 * @param {Run} run @param {string} id
 * @returns {(Publication & {counts: Record<Publication["state"], number>}) | null}
 */
export function barrierPublicationOf(run, id) {
  const cache = publicationCache(run);
  if (!cache.barriers.has(id)) cache.barriers.set(id, deriveBarrierPublication(run, id));
  return cache.barriers.get(id);
}

/** @param {Run} run @param {string} id */
function deriveBarrierPublication(run, id) {
  const barrier = run.barriers.get(id);
  if (!barrier) return null;
  /** @type {Record<Publication["state"], number>} */
  const counts = { pending: 0, scoped: 0, published: 0, nothing: 0, discarded: 0 };
  if (barrier.outcome === "open" && run.status === "running") counts.pending = barrier.branches.length;
  else {
    for (const path of barrier.branches) {
      const p = publicationOf(run, path);
      if (p) counts[p.state] += 1;
    }
  }
  const own = joinVerdict(run, barrier);
  if (own) return { ...own, text: own.text.replace(/^Discarded: /, "Nothing published: "), counts };
  /** @type {Applied[]} */
  const fields = barrier.published.map((f) => ({ step: f.step, field: f.field, kind: f.deleted ? "removal" : "replacement", origin: f.writer ?? "" }));
  if (!fields.length) {
    const text = barrier.policy === "atomic" && barrier.discarded.some((d) => String(d.reason).startsWith("atomic"))
      ? "Nothing published: the atomic policy discarded every branch because one was rejected."
      : barrier.discarded.length >= barrier.branches.length
        ? "Nothing published: every branch was discarded."
        : "Nothing published: no branch wrote anything.";
    return { ...pub("nothing", barrier.discarded.length ? "discarded" : null, text), counts };
  }
  if (barrier.target === "caller-scope") {
    const caller = publicationOf(run, barrier.caller);
    if (caller && caller.state === "discarded") {
      return { ...pub("discarded", "caller", `Published into the scope of ${barrier.caller}, then discarded with it: ${unprefixed(caller.text)}`, [], barrier.caller), counts };
    }
    if (!caller || caller.state === "pending" || caller.state === "scoped") {
      return { ...pub("scoped", null, `Published into the scope of ${barrier.caller}; its join has not run yet.`, fields, barrier.caller), counts };
    }
    if (caller.state === "nothing") {
      return { ...pub("discarded", "caller", `Published into the scope of ${barrier.caller}, whose join published none of it.`, [], barrier.caller), counts };
    }
    return { ...pub("published", null, `Published into the scope of ${barrier.caller}, and from there into the canonical state.`, fields, barrier.caller), counts };
  }
  return { ...pub("published", null, "Published into the canonical session state.", fields), counts };
}

/**
 * State without the framework fields events do not carry (`_saveOn`, `_transient`).
 * @param {State} state @returns {State}
 */
export function comparable(state) {
  /** @type {State} */
  const out = {};
  for (const [step, fields] of Object.entries(state)) {
    /** @type {Record<string, any>} */
    const kept = {};
    for (const [k, v] of Object.entries(fields)) if (k !== "_saveOn" && k !== "_transient") kept[k] = v;
    out[step] = kept;
  }
  return out;
}

/**
 * Group a mixed event list by run id, keeping order.
 * @param {any[]} events @returns {Map<string, any[]>}
 */
export function runsOf(events) {
  const grouped = new Map();
  for (const event of events) {
    if (!grouped.has(event.run_id)) grouped.set(event.run_id, []);
    grouped.get(event.run_id).push(event);
  }
  return grouped;
}

/**
 * Parse JSON Lines text into events (blank lines skipped; errors name the line).
 * @param {string} text
 */
export function parseJsonl(text) {
  const events = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i].trim();
    if (!line) continue;
    try {
      events.push(JSON.parse(line));
    } catch (err) {
      throw new Error(`line ${i + 1}: not JSON: ${/** @type {Error} */ (err).message}`);
    }
  }
  return events;
}

/**
 * The invocation path's parent path ("" for a top-level branch).
 * @param {string} path
 */
export function parentPath(path) {
  const dot = path.lastIndexOf(".");
  return dot < 0 ? "" : path.slice(0, dot);
}

/**
 * @template V @param {Map<string, V>} map @param {string} key @param {string} what
 * @returns {V}
 */
function mustGet(map, key, what) {
  const value = map.get(key);
  if (value === undefined) throw new Error(`unknown ${what} ${JSON.stringify(key)}`);
  return value;
}
