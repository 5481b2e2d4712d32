// @ts-check
/**
 * What an invocation could read and what its join published from it, read off a folded
 * run: the fork-time base, the view at any seq, and whether its writes reached the
 * canonical state. Pure (no DOM); `../fold.js` re-exports it.
 */

import { copyState, mustGet, setField } from "./model.js";

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Barrier} Barrier */
/** @typedef {import("./model.js").State} State */

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
 * `view_at` in `runtime/events/fold/views.py`: `{state, own, invisible}` - the visible state, the
 * changes that came from the invocation itself or its inner joins (`kind` says which),
 * and the changes its siblings had by then, their drafts and their inner joins'
 * publications (`kind` again), which it could not see.
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
  // Each field takes its last change: the values of the others are not read (a change's
  // value may be made on first read, see reduce.js's grownChange).
  const last = new Map();
  for (const c of own) last.set(`${c.step}\u0000${c.field}`, c);
  for (const c of last.values()) setField(state, c.step, c.field, c.value, c.deleted);
  const invisible = [];
  for (const other of barrier.branches) {
    if (other === path) continue;
    const sibling = run.invocations.get(other);
    if (!sibling) continue;
    // Its own drafts and what its inner joins published into its scope: neither reaches a
    // sibling before the sibling's own join.
    for (const d of sibling.changes) {
      if (d.seq <= limit) {
        invisible.push({ path: other, key: sibling.key, seq: d.seq, step: d.step, field: d.field, get value() { return d.value; }, deleted: d.deleted, kind: d.kind });
      }
    }
  }
  return {
    state,
    // Values read through: a list shows only the rows it draws.
    own: own.map((c) => ({ seq: c.seq, step: c.step, field: c.field, get value() { return c.value; }, deleted: c.deleted, kind: c.kind, barrier: c.barrier })),
    invisible,
  };
}

/**
 * `{present, value}` of one field in invocation `path`'s view before `limit` (a seq): its
 * last own change or received publication, else its fork-time base (the canonical state
 * then, or its caller's view then); like its namesake in `runtime/events/fold/views.py`.
 * @param {Run} run @param {string} path @param {string} step @param {string} field
 * @param {number} limit @param {Set<string>} [seen]
 * @returns {{present: boolean, value: any}}
 */
export function fieldBefore(run, path, step, field, limit, seen = new Set()) {
  const inv = run.invocations.get(path);
  if (!inv) return { present: false, value: null };
  for (let i = inv.changes.length - 1; i >= 0; i -= 1) {
    const c = inv.changes[i];
    if (c.seq < limit && c.step === step && c.field === field) return { present: !c.deleted, value: c.deleted ? null : c.value };
  }
  const barrier = inv.barrier === null ? undefined : run.barriers.get(inv.barrier);
  if (!barrier) return { present: false, value: null };
  if (barrier.base === "canonical") {
    const fields = (barrier.baseState || {})[step] || {};
    return Object.prototype.hasOwnProperty.call(fields, field) ? { present: true, value: fields[field] } : { present: false, value: null };
  }
  // A base the events do not tell (an unknown caller, or a cycle) reads as empty.
  if (seen.has(barrier.base) || !run.invocations.has(barrier.base)) return { present: false, value: null };
  return fieldBefore(run, barrier.base, step, field, barrier.forkedSeq, new Set([...seen, path]));
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
        if (typeof input?.path === "string" && mine(input.path)) {
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
