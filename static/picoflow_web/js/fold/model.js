// @ts-check
/**
 * The run model the fold builds: its typedefs, a fresh run and invocation, the small state
 * and path helpers, and how a handler records what it cannot place (`anomaly`). Pure (no
 * DOM). Modules outside `fold/` import the public names from `../fold.js`.
 */

import { keep } from "./log.js";

/** @typedef {Record<string, Record<string, any>>} State */
/**
 * @typedef {{seq: number, step: string, field: string, value: any, deleted: boolean,
 *   kind: "draft" | "join", barrier: string | null}} Change
 */
/**
 * @typedef {{call: number, attempt: number, step: string, seq: number, offset: number, model: any,
 *   messages: any[], tools: string[], finished: any, failed: any, text: string,
 *   toolCalls: any[], deltas: number}} ModelCall
 *   `text` and `toolCalls` (`{index, arguments, id?, name?}`): what its `model.delta`
 *   events wrote; `deltas`: how many there were.
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
 * @property {Change[]} drafts  own drafts only (what siblings cannot see): the very list
 *   `changes` is until a join publishes into its scope
 * @property {number} tokens
 * @property {any} params
 * @property {string | null} userMessage
 * @property {number} lastAt  where in the run's `events` its last event is (-1: none);
 *   `eventsOf` walks back from it
 * @property {number} eventCount  how many events are on its path
 * @property {ModelCall[]} models
 * @property {ToolCall[]} tools
 * @property {any} directResult
 * @property {boolean} hasDirectResult
 * @property {boolean} cancelTold  a cancel.propagated named it while running
 * @property {boolean} lostRights  a cancel.grace_expired closed it
 * @property {{runId: string, seq: number | null, tokens: number} | null} reused  restored
 *   from the ledger by a resumed turn (branch.reused): where it ran, what it spent there
 * @property {string | null} rerun  why a resumed turn ran it again although the ledger
 *   held it (its request changed: branch.started's `rerun`)
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
 * @property {Invocation[]} invocations  the invocations its requests announced, in
 *   request order: what a count over every branch of a wide fork reads, without a lookup
 *   by path per branch
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
 * @property {AppliedIndex | null} applied  what the join's publication record
 *   applied, by every invocation path (at or below this barrier's branches) it came from;
 *   null until first asked for (`appliedOf`): a join of every branch of a wide fork indexes
 *   hundreds of thousands of inputs, which the page needs only for the branches it shows
 */
/**
 * What a join's publication record applied, by invocation path: `get` gives the fields
 * `path` or its descendants brought (undefined: none), in the record's order; `has` whether
 * there are any; `hasBranch` the same for the branch of a request index (its own path).
 * @typedef {{has: (path: string) => boolean, hasBranch: (index: number) => boolean,
 *   get: (path: string) => Applied[] | undefined}} AppliedIndex
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
    /** @type {number[]} for each of `events`, where the one before it on its path is (-1:
     * none): an invocation's events without a list of its own for each branch */
    pathPrev: [],
    startedAt: /** @type {string | number | null} */ (null),
    /** @type {string | null} the run this one resumes (turn.started's resumes) */
    resumes: null,
    /** branches restored from the ledger (branch.reused): the header counts them only then */
    reusedBranches: 0,
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
    /** @type {State} the canonical state as of the last session.loaded or session.saved: what the session store holds */
    saved: {},
    /** @type {{step: string, field: string, value: any, deleted: boolean}[]} of a stopped turn: what was published in memory but never saved */
    unsaved: [],
    branchCount: 0,
    /** @type {import("./concurrent.js").ConcurrentGroup[]} a coordinator's concurrent_steps() calls */
    concurrent: [],
    /** bumped by every applied event (renderers compare it) */
    version: 0,
  };
}

/** @typedef {ReturnType<typeof createRun>} Run */

/**
 * The list an invocation's barriers, drafts, model calls and tool calls start as: one,
 * shared and frozen, until its first item (`ownList`). Most branches of a wide fork never
 * open a barrier or call a tool: empty lists of their own would be hundreds of thousands
 * of objects for the collector to move, in a page that keeps every invocation.
 * @type {any[]}
 */
export const NO_ITEMS = /** @type {any[]} */ (/** @type {unknown} */ (Object.freeze([])));

/**
 * The invocation's own list `name` (its first item comes next): made in place of the
 * shared empty one, which the scrubber puts back.
 * @template {"barriers" | "drafts" | "models" | "tools"} K
 * @param {Invocation} inv @param {K} name @returns {Invocation[K]}
 */
export function ownList(inv, name) {
  if (inv[name] === NO_ITEMS) {
    keep(inv, name);
    inv[name] = [];
  }
  return inv[name];
}

/**
 * @param {string} path @param {string} step @param {string} key @param {number} index
 * @param {string | null} barrier @param {string} status
 * @returns {Invocation}
 */
export function newInvocation(path, step, key, index, barrier, status = "queued") {
  return {
    path, step, key, index, barrier,
    depth: pathDepth(path),
    status, interrupted: false, cancelled: false, output: null, error: null,
    started: null, finished: null, startedSeq: null, finishedSeq: null,
    barriers: NO_ITEMS, changes: [], drafts: NO_ITEMS, tokens: 0,
    params: null, userMessage: null, lastAt: -1, eventCount: 0, models: NO_ITEMS, tools: NO_ITEMS,
    directResult: null, hasDirectResult: false, cancelTold: false, lostRights: false,
    reused: null, rerun: null,
  };
}

/**
 * The event of `run` with sequence number `seq`, or null. Events are kept in seq order,
 * from the first one folded and gap-free unless some never came (the fold notes the gap):
 * an index first, then a bisection.
 * @param {Run} run @param {number} seq
 */
export function eventBySeq(run, seq) {
  const { events } = run;
  if (!events.length) return null;
  const guess = events[seq - events[0].seq];
  if (guess && guess.seq === seq) return guess;
  let lo = 0;
  let hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (events[mid].seq < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo < events.length && events[lo].seq === seq ? events[lo] : null;
}

/**
 * The events on `inv`'s path, in order: the last `limit` of them when given.
 * @param {Run} run @param {Invocation} inv @param {number} [limit]
 * @returns {any[]}
 */
export function eventsOf(run, inv, limit = Infinity) {
  const out = [];
  for (let at = inv.lastAt; at >= 0 && out.length < limit; at = run.pathPrev[at]) out.push(run.events[at]);
  return out.reverse();
}

/** @param {string} path  "" is 0, "3" is 1, "3.1" is 2 */
export function pathDepth(path) {
  if (path === "") return 0;
  let depth = 1;
  for (let i = path.indexOf("."); i >= 0; i = path.indexOf(".", i + 1)) depth += 1;
  return depth;
}

/**
 * @param {State} state @param {string} step @param {string} name @param {any} value
 * @param {boolean} deleted
 */
export function setField(state, step, name, value, deleted) {
  const fields = { ...(state[step] || {}) };
  if (deleted) delete fields[name];
  else fields[name] = value;
  state[step] = fields;
}

/** @param {State} state @returns {State} */
export function snapshot(state) {
  return { ...state };
}

/** @param {string} step @param {string} field */
export function undoKey(step, field) {
  return JSON.stringify([step, field]);
}

/** @param {string} key @returns {[string, string]} */
export function splitUndoKey(key) {
  return JSON.parse(key);
}

/** @param {State} state @returns {State} */
export function copyState(state) {
  /** @type {State} */
  const out = {};
  for (const [step, fields] of Object.entries(state)) out[step] = { ...fields };
  return out;
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
export function mustGet(map, key, what) {
  const value = map.get(key);
  if (value === undefined) throw new Error(`unknown ${what} ${JSON.stringify(key)}`);
  return value;
}

/**
 * What the fold does with one event type: change `run` for `event`, whose invocation
 * (`event.path`, "" for the turn) is `inv` when the run knows it. Each family module
 * exports a table of them (`HANDLERS`); `apply.js` dispatches on `event.type`.
 * @typedef {(run: Run, event: any, inv: Invocation | undefined) => void} Handler
 */

/**
 * Record that `event` could not be placed (it is applied as far as it can be).
 * @param {Run} run @param {any} event @param {string} message
 */
export function anomaly(run, event, message) {
  run.anomalies.push({ seq: event.seq, message });
}

/**
 * The barrier `event` names, or an anomaly when the run has none of that id.
 * @param {Run} run @param {any} event @returns {Barrier | undefined}
 */
export function barrierOf(run, event) {
  const barrier = run.barriers.get(event.barrier);
  if (!barrier) anomaly(run, event, `${event.type} for unknown barrier ${event.barrier}`);
  return barrier;
}
