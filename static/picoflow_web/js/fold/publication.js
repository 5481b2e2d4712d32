// @ts-check
/**
 * What became of each invocation's and barrier's writes, derived from the joins'
 * publication records of a folded run (the Python fold's `publication_of`). Pure (no DOM);
 * `../fold.js` re-exports it, `../publication.js` turns it into badges.
 */

import { pathDepth, undoKey } from "./model.js";

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Invocation} Invocation */
/** @typedef {import("./model.js").Barrier} Barrier */
/** @typedef {import("./model.js").Applied} Applied */
/** @typedef {import("./model.js").AppliedIndex} AppliedIndex */

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
 * The words for a publication into the canonical state: a stopped turn never saved what it
 * published after its last save (`run.unsaved`). Mirrors `_canonical` in the Python fold.
 * @param {Run} run @param {Applied[]} fields
 */
function canonicalText(run, fields) {
  if (run.unsaved.length) {
    const unsaved = new Set(run.unsaved.map((u) => JSON.stringify([u.step, u.field])));
    if (fields.some((f) => unsaved.has(JSON.stringify([f.step, f.field])))) return "Published in memory, not saved: the turn was stopped.";
  }
  return "Published into the canonical session state.";
}

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
  const applied = appliedOf(barrier).get(path) || [];
  if (barrier.target === "caller-scope") {
    const caller = publicationOf(run, barrier.caller);
    const callerInv = run.invocations.get(barrier.caller);
    const who = callerName(run, barrier.caller);
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
    const reached = root ? appliedOf(root).get(path) || [] : [];
    if (!reached.length) {
      return pub("discarded", "caller", `Discarded: its caller's join published none of it.`, [], barrier.caller);
    }
    return pub("published", null, canonicalText(run, reached), reached, barrier.caller);
  }
  if (!applied.length) return pub("nothing", null, "Its join kept it, but it wrote nothing that was published.");
  return pub("published", null, canonicalText(run, applied), applied);
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
  else if (barrier.target === "canonical") countCanonical(run, barrier, counts);
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
      return { ...pub("discarded", "caller", `Published into the scope of ${callerName(run, barrier.caller)}, then discarded with it: ${unprefixed(caller.text)}`, [], barrier.caller), counts };
    }
    if (!caller || caller.state === "pending" || caller.state === "scoped") {
      return { ...pub("scoped", null, `Published into the scope of ${callerName(run, barrier.caller)}; its join has not run yet.`, fields, barrier.caller), counts };
    }
    if (caller.state === "nothing") {
      return { ...pub("discarded", "caller", `Published into the scope of ${callerName(run, barrier.caller)}, whose join published none of it.`, [], barrier.caller), counts };
    }
    return { ...pub("published", null, `Published into the scope of ${callerName(run, barrier.caller)}, and from there into the canonical state.`, fields, barrier.caller), counts };
  }
  return { ...pub("published", null, canonicalText(run, fields), fields), counts };
}

/**
 * The branch counts of a join that published into the canonical state, as
 * `publicationOf` each branch would give them, without making each one's publication:
 * a wide join's header is counted once per change, and most of its branches are shown
 * never. A branch is discarded when the join says so or it did not end fulfilled, else it
 * published when the join applied something of it. Read by request index, off the
 * barrier's own invocations and the applied index's: a lookup by path per branch is most
 * of the first frame after a wide join.
 * @param {Run} run @param {Barrier} barrier @param {Record<Publication["state"], number>} counts
 */
function countCanonical(run, barrier, counts) {
  const { invocations, discardedAt } = barrier;
  const own = joinVerdict(run, barrier);
  if (own) {
    counts[own.state] += invocations.length;
    return;
  }
  const applied = appliedOf(barrier);
  for (let index = 0; index < invocations.length; index += 1) {
    const inv = invocations[index];
    if (inv.status !== "fulfilled" || discardedAt.has(inv.index)) counts.discarded += 1;
    else if (applied.hasBranch(index)) counts.published += 1;
    else counts.nothing += 1;
  }
}

/**
 * A caller as sentences name it: its branch key (or step) and its path, "news (0.1)".
 * @param {Run} run @param {string} path
 */
function callerName(run, path) {
  const inv = run.invocations.get(path);
  return inv ? `${inv.key || inv.step} (${path})` : path;
}

/**
 * Who each applied field of a join's publication record came from, indexed under every
 * path from the branch down to the writer, so "did anything of `path` publish" is one
 * lookup for a branch and for any of its descendants. Contributions count only when the
 * record lists their field: a reduction alone publishes nothing. Made on the first call
 * after the join (the fold leaves it null), then kept with the barrier.
 * @param {Barrier} barrier @returns {AppliedIndex}
 */
export function appliedOf(barrier) {
  if (barrier.applied === null) barrier.applied = appliedIndex(barrier);
  return barrier.applied;
}

/**
 * @param {Barrier} barrier @returns {AppliedIndex}
 */
function appliedIndex(barrier) {
  // A join's inputs are every branch of a wide fork: the index keeps each applied field's
  // parts in flat arrays and chains them by path, and makes the `Applied` records of a path
  // only when that path is asked for (the page shows a few of its branches at a time). A
  // branch's own path is found by its request index, read off the path, and its sources
  // kept in typed arrays: hashing every input's path into a map, or keeping each one's text,
  // costs most of a wide join's first frame.
  /** @type {{step: string, field: string, kind: Applied["kind"]}[]} what each source applied */
  const groups = [];
  let sources = barrier.published.length;
  for (const r of barrier.reductions) sources += r.inputs ? r.inputs.length : 0;
  const groupOf = new Int32Array(sources);
  /** Each source's origin: a branch's request index when it is that branch's own path,
   * else -1 - its place in `named`. */
  const originOf = new Int32Array(sources);
  /** @type {string[]} the origins that are not a branch's own path */ const named = [];
  let count = 0;
  // One node per source and path it is indexed under: one each, unless it came from
  // below a branch (grown then).
  let nodeSource = new Int32Array(sources);
  let nodeNext = new Int32Array(sources);
  let nodes = 0;
  /** @param {number} next @param {number} source @returns {number} the new node */
  const node = (next, source) => {
    if (nodes === nodeSource.length) {
      const grown = Math.max(16, nodes * 2);
      const bigger = new Int32Array(grown);
      bigger.set(nodeSource);
      nodeSource = bigger;
      const chained = new Int32Array(grown);
      chained.set(nodeNext);
      nodeNext = chained;
    }
    nodeSource[nodes] = source;
    nodeNext[nodes] = next;
    return nodes++;
  };
  /** @type {Map<string, number>} the last node of each path below the branches */
  const heads = new Map();
  const branches = barrier.branches;
  /** the last node of each branch's own path, by request index (-1: none) */
  const branchHeads = new Int32Array(branches.length).fill(-1);
  const first = branches[0];
  const depth = pathDepth(barrier.caller) + 1;
  // Every branch path is the fork's head and the request index: "0" ends the first one. A
  // foreign record's paths may have more parts than the barrier is deep: indexed by name,
  // as `add` cuts them.
  const head = typeof first === "string" && first.endsWith("0") && pathDepth(first) === depth
    ? first.slice(0, -1) : null;
  /** where a branch path's request index begins */
  const digits = head === null ? 0 : head.length;
  /** The request index of the branch whose own path is `path` up to `end`, or -1.
   * @param {string} path @param {number} end */
  const branchAt = (path, end) => {
    if (head === null || end <= digits || (digits > 0 && !path.startsWith(head))) return -1;
    let index = 0;
    for (let k = digits; k < end; k += 1) {
      const digit = path.charCodeAt(k) - 48;
      if (digit < 0 || digit > 9) return -1;
      index = index * 10 + digit;
    }
    const own = branches[index];
    if (own === undefined || own.length !== end) return -1;
    return (end === path.length ? own === path : path.startsWith(own)) ? index : -1;
  };
  /** A new source of `group`, from the branch of request `index` (its own path) or from
   * `origin`. @param {number} group @param {number} index @param {string} origin */
  const source = (group, index, origin) => {
    groupOf[count] = group;
    if (index >= 0) originOf[count] = index;
    else originOf[count] = -1 - (named.push(origin) - 1);
    return count++;
  };
  /** Index `from` under the prefix of `origin` that ends at `end`.
   * @param {string} origin @param {number} end @param {boolean} branch @param {number} from */
  const link = (origin, end, branch, from) => {
    const index = branch ? branchAt(origin, end) : -1;
    if (index >= 0) {
      branchHeads[index] = node(branchHeads[index], from);
      return;
    }
    const key = end < origin.length ? origin.slice(0, end) : origin;
    heads.set(key, node(heads.get(key) ?? -1, from));
  };
  /** @param {number} group @param {string} origin */
  const add = (group, origin) => {
    const from = source(group, -1, origin);
    // Under each prefix of its origin of `depth` parts or more, cut out of the path as it
    // is: the one of `depth` parts is a branch's own path.
    for (let n = 1, dot = origin.indexOf("."); ; n += 1) {
      if (n >= depth) link(origin, dot < 0 ? origin.length : dot, n === depth, from);
      if (dot < 0) return;
      dot = origin.indexOf(".", dot + 1);
    }
  };
  /** @param {string} step @param {string} field @param {Applied["kind"]} kind */
  const group = (step, field, kind) => groups.push({ step, field, kind }) - 1;
  const listed = new Set();
  for (const f of barrier.published) {
    listed.add(undoKey(f.step, f.field));
    if (f.writer !== null && f.writer !== "") {
      add(group(f.step, f.field, f.deleted ? "removal" : "replacement"), String(f.writer));
    }
  }
  for (const r of barrier.reductions) {
    if (!listed.has(undoKey(r.step, r.field))) continue;
    const of = group(r.step, r.field, "contribution");
    const inputs = r.inputs || [];
    for (let k = 0; k < inputs.length; k += 1) {
      const path = inputs[k]?.path;
      if (typeof path !== "string") continue; // a foreign record without a path names nobody
      // Most inputs are a branch's own contribution: indexed under its path alone, as
      // `add` would, without cutting the path into prefixes or keeping it twice.
      const index = branchAt(path, path.length);
      if (index < 0) add(of, path);
      else branchHeads[index] = node(branchHeads[index], source(of, index, path));
    }
  }
  /** @param {string} path */
  const headOf = (path) => {
    const index = branchAt(path, path.length);
    const last = index < 0 ? heads.get(path) : branchHeads[index];
    return last === undefined || last < 0 ? -1 : last;
  };
  return {
    has: (/** @type {string} */ path) => headOf(path) >= 0,
    // A branch's own path is under its request index unless `branchAt` could not read it
    // off the path; only then is it a key of `heads`.
    hasBranch: (/** @type {number} */ index) => branchHeads[index] >= 0
      || (heads.size > 0 && heads.has(branches[index])),
    get(/** @type {string} */ path) {
      const last = headOf(path);
      if (last < 0) return undefined;
      /** @type {Applied[]} */
      const out = [];
      for (let n = last; n >= 0; n = nodeNext[n]) {
        const at = nodeSource[n];
        const origin = originOf[at];
        out.push({ ...groups[groupOf[at]], origin: origin >= 0 ? branches[origin] : named[-1 - origin] });
      }
      return out.reverse(); // in the order the record lists them
    },
  };
}
