// @ts-check
/**
 * A barrier's branches at a glance, as data (no DOM; node tests import it): counts by
 * step and status and by publication, a histogram of how long they ran, the slowest and
 * the failed ones, and the orders the inspector pages its per-branch tables in.
 *
 * Everything comes from the fold: status and `started` / `finished` offsets of the
 * branch events, publication from `publicationOf`. A barrier of 100,000 branches is one
 * pass over its branches (plus one sort for an ordering someone asks for), cached per run
 * version, so drawing the same version again costs a lookup.
 */

import { STATUSES, publicationOf } from "./fold.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */

export const PUBLICATION_STATES = ["pending", "scoped", "published", "nothing", "discarded"];
export const SLOWEST = 5;
export const FAILED = 20;
export const BINS = 24;

/**
 * @typedef {{path: string, key: string, step: string, status: string, duration: number}} Ranked
 * @typedef {{step: string, total: number, status: Record<string, number>,
 *   publication: Record<string, number>}} Group
 * @typedef {{t0: number, t1: number, count: number}} Bin
 * @typedef {object} Overview
 * @property {string} barrier
 * @property {number} total
 * @property {Group[]} groups  one per step, in the order the steps were first requested
 * @property {Record<string, number>} status  all branches by status
 * @property {Record<string, number>} publication  all branches by publication state
 * @property {{bins: Bin[], min: number, max: number, measured: number, scale: "linear" | "log"}} histogram
 *   durations (finished - started) of the branches that ended after starting
 * @property {Ranked[]} slowest  longest durations first (ties: request order)
 * @property {Ranked[]} failed  rejected branches in request order, the first `FAILED`
 * @property {number} failedTotal
 */

/** @returns {Record<string, number>} */
const zeros = (/** @type {string[]} */ names) => Object.fromEntries(names.map((n) => [n, 0]));

/**
 * How long a branch ran, or null while it has not both started and ended.
 * @param {Invocation} inv
 */
export function durationOf(inv) {
  return inv.started !== null && inv.finished !== null ? Math.max(0, inv.finished - inv.started) : null;
}

/** @type {WeakMap<Run, {version: number, overviews: Map<string, Overview | null>, orders: Map<string, string[]>}>} */
const CACHE = new WeakMap();

/** @param {Run} run */
function cacheOf(run) {
  let cache = CACHE.get(run);
  if (!cache || cache.version !== run.version) {
    cache = { version: run.version, overviews: new Map(), orders: new Map() };
    CACHE.set(run, cache);
  }
  return cache;
}

/**
 * The overview of barrier `id` (null for an unknown barrier).
 * @param {Run} run @param {string} id @param {{slowest?: number, failed?: number, bins?: number}} [options]
 * @returns {Overview | null}
 */
export function barrierOverview(run, id, options = {}) {
  const cache = cacheOf(run);
  const key = `${id}|${options.slowest ?? SLOWEST}|${options.failed ?? FAILED}|${options.bins ?? BINS}`;
  if (!cache.overviews.has(key)) cache.overviews.set(key, deriveOverview(run, id, options));
  return /** @type {Overview | null} */ (cache.overviews.get(key));
}

/**
 * What a barrier's branch events add up to so far, kept up to date by reading only the
 * events the fold applied since the last look (`scanned` is an index into `run.events`):
 * a live 100,000-branch barrier costs its new events per frame, not 100,000 branches.
 * @typedef {object} Tally
 * @property {number} scanned
 * @property {Uint8Array} statusOf  by request index: 1 + the index in STATUSES of the
 *   status it was counted under (0: not counted yet); typed arrays, not maps, because a
 *   first look at 100,000 branches pays every per-branch hash lookup 100,000 times
 * @property {Uint8Array} measured  by request index: 1 once its duration is in `durations`
 * @property {Map<string, Record<string, number>>} byStep  status counts per step
 * @property {Record<string, number>} status
 * @property {number[]} durations
 * @property {number} min
 * @property {number} max
 * @property {Ranked[]} slowest  kept sorted, longest first
 * @property {Invocation[]} failed  the first rejected ones in request order
 * @property {number} failedTotal
 * @property {{measured: number, bins: number, histogram: Overview["histogram"]} | null} binned
 */

/** @type {Record<string, number>} */
const STATUS_CODE = Object.fromEntries(STATUSES.map((s, i) => [s, i + 1]));

/** @type {WeakMap<Run, Map<string, Tally>>} */
const TALLIES = new WeakMap();

/**
 * @param {Run} run @param {import("./fold.js").Barrier} barrier @param {number} keepSlowest
 * @param {number} keepFailed @returns {Tally}
 */
function tallyOf(run, barrier, keepSlowest, keepFailed) {
  let tallies = TALLIES.get(run);
  if (!tallies) {
    tallies = new Map();
    TALLIES.set(run, tallies);
  }
  const key = `${barrier.id}|${keepSlowest}|${keepFailed}`;
  let tally = tallies.get(key);
  if (!tally) {
    tally = {
      scanned: run.events.length, statusOf: new Uint8Array(barrier.branches.length),
      measured: new Uint8Array(barrier.branches.length), byStep: new Map(),
      status: zeros(STATUSES), durations: [], min: Infinity, max: -Infinity, slowest: [],
      failed: [], failedTotal: 0, binned: null,
    };
    tallies.set(key, tally);
    for (const path of barrier.branches) {
      const inv = run.invocations.get(path);
      if (inv) count(tally, inv, keepSlowest, keepFailed);
    }
    return tally;
  }
  const known = tally.statusOf.length;
  if (barrier.branches.length > known) {
    // A wide fork's later pages of requests (barrier.requested) arrived since the last look.
    tally.statusOf = grown(tally.statusOf, barrier.branches.length);
    tally.measured = grown(tally.measured, barrier.branches.length);
    for (let i = known; i < barrier.branches.length; i += 1) {
      const inv = run.invocations.get(barrier.branches[i]);
      if (inv) count(tally, inv, keepSlowest, keepFailed);
    }
  }
  const branches = new Set();
  for (let i = tally.scanned; i < run.events.length; i += 1) {
    const event = run.events[i];
    if (event.barrier === barrier.id && typeof event.type === "string" && event.type.startsWith("branch.")) branches.add(event.path || "");
  }
  tally.scanned = run.events.length;
  for (const path of branches) {
    const inv = run.invocations.get(path);
    if (inv && inv.barrier === barrier.id) count(tally, inv, keepSlowest, keepFailed);
  }
  return tally;
}

/** `items` copied into a longer array of `length`. @param {Uint8Array} items @param {number} length */
function grown(items, length) {
  const out = new Uint8Array(length);
  out.set(items);
  return out;
}

/**
 * Count `inv` as it is now (moving it out of the status it was counted under before).
 * @param {Tally} tally @param {Invocation} inv @param {number} keepSlowest @param {number} keepFailed
 */
function count(tally, inv, keepSlowest, keepFailed) {
  let step = tally.byStep.get(inv.step);
  if (!step) {
    step = zeros(STATUSES);
    tally.byStep.set(inv.step, step);
  }
  const i = inv.index;
  if (!(i >= 0 && i < tally.statusOf.length)) return;
  const code = STATUS_CODE[inv.status] ?? 0;
  const before = tally.statusOf[i];
  if (before !== code) {
    if (before) {
      step[STATUSES[before - 1]] -= 1;
      tally.status[STATUSES[before - 1]] -= 1;
    }
    step[inv.status] += 1;
    tally.status[inv.status] += 1;
    tally.statusOf[i] = code;
    if (inv.status === "rejected") {
      tally.failedTotal += 1;
      const failed = tally.failed;
      if (failed.length < keepFailed || (failed.length && inv.index < failed[failed.length - 1].index)) {
        let i = failed.length;
        while (i > 0 && failed[i - 1].index > inv.index) i -= 1;
        failed.splice(i, 0, inv);
        if (failed.length > keepFailed) failed.pop();
      }
    }
  }
  const d = durationOf(inv);
  if (d === null || tally.measured[i]) return;
  tally.measured[i] = 1;
  tally.durations.push(d);
  if (d < tally.min) tally.min = d;
  if (d > tally.max) tally.max = d;
  const slowest = tally.slowest;
  const last = slowest[slowest.length - 1];
  if (keepSlowest && (slowest.length < keepSlowest || d > last.duration || (d === last.duration && inv.index < indexOfPath(last.path)))) {
    // A handful kept in order: cheaper than sorting every branch for five of them.
    let i = slowest.length;
    while (i > 0 && (slowest[i - 1].duration < d || (slowest[i - 1].duration === d && indexOfPath(slowest[i - 1].path) > inv.index))) i -= 1;
    slowest.splice(i, 0, ranked(inv, d));
    if (slowest.length > keepSlowest) slowest.pop();
  }
}

/** The request index a path ends in. @param {string} path */
function indexOfPath(path) {
  return Number(path.slice(path.lastIndexOf(".") + 1));
}

/**
 * @param {Run} run @param {string} id @param {{slowest?: number, failed?: number, bins?: number}} options
 * @returns {Overview | null}
 */
function deriveOverview(run, id, options) {
  const barrier = run.barriers.get(id);
  if (!barrier) return null;
  const keepSlowest = Math.max(0, options.slowest ?? SLOWEST);
  const keepFailed = Math.max(0, options.failed ?? FAILED);
  const binCount = Math.max(1, options.bins ?? BINS);
  const tally = tallyOf(run, barrier, keepSlowest, keepFailed);
  /** @type {Map<string, Group>} */
  const groups = new Map();
  for (const [step, status] of tally.byStep) {
    let total = 0;
    for (const s of STATUSES) total += status[s];
    groups.set(step, { step, total, status: { ...status }, publication: zeros(PUBLICATION_STATES) });
  }
  const publication = zeros(PUBLICATION_STATES);
  // While the join has not run in a live run every branch is pending; after it, what each
  // branch's writes became depends on joins above it too, so it is asked per branch.
  if (barrier.outcome === "open" && run.status === "running") {
    for (const g of groups.values()) g.publication.pending = g.total;
    publication.pending = barrier.branches.length;
  } else {
    for (const path of barrier.branches) {
      const inv = run.invocations.get(path);
      if (!inv) continue;
      const state = publicationOf(run, path)?.state ?? "pending";
      /** @type {Group} */ (groups.get(inv.step)).publication[state] += 1;
      publication[state] += 1;
    }
  }
  if (!tally.binned || tally.binned.measured !== tally.durations.length || tally.binned.bins !== binCount) {
    tally.binned = { measured: tally.durations.length, bins: binCount, histogram: histogram(tally.durations, tally.min, tally.max, binCount) };
  }
  return {
    barrier: id,
    total: barrier.branches.length,
    groups: [...groups.values()],
    status: { ...tally.status },
    publication,
    histogram: tally.binned.histogram,
    slowest: tally.slowest.map((r) => ({ ...r, status: run.invocations.get(r.path)?.status ?? r.status })),
    failed: tally.failed.map((inv) => ranked(inv, durationOf(inv))),
    failedTotal: tally.failedTotal,
  };
}

/** @param {Invocation} inv @param {number | null} duration @returns {Ranked} */
function ranked(inv, duration) {
  return { path: inv.path, key: inv.key, step: inv.step, status: inv.status, duration: duration ?? 0 };
}

/**
 * Bins from the shortest to the longest duration: equal widths, or, when the longest is
 * 20 times the shortest or more, equal ratios (`scale: "log"`): fan-out durations are
 * skewed, and equal widths would put nearly every branch in the first bin. A duration
 * of 0 goes in the first bin.
 * @param {number[]} durations @param {number} min @param {number} max @param {number} count
 * @returns {{bins: Bin[], min: number, max: number, measured: number, scale: "linear" | "log"}}
 */
function histogram(durations, min, max, count) {
  if (!durations.length) return { bins: [], min: 0, max: 0, measured: 0, scale: "linear" };
  let lo = Infinity;
  for (const d of durations) if (d > 0 && d < lo) lo = d;
  const log = lo < Infinity && max / lo >= 20;
  const span = max - min;
  const n = span > 0 ? count : 1;
  /** @type {number[]} lower edges */
  const edges = [];
  for (let i = 0; i < n; i += 1) {
    edges.push(i === 0 ? min : log ? lo * (max / lo) ** (i / n) : min + (span * i) / n);
  }
  /** @type {Bin[]} */
  const bins = edges.map((t0, i) => ({ t0, t1: i === n - 1 ? max : edges[i + 1], count: 0 }));
  const ratio = log ? Math.log(max / lo) : 0;
  for (const d of durations) {
    let i = n === 1 ? 0 : log ? (d > 0 ? Math.floor((Math.log(d / lo) / ratio) * n) : 0) : Math.floor(((d - min) / span) * n);
    i = Math.min(n - 1, Math.max(0, i));
    // The edges are what a bin says it holds; rounding must not put a duration beside them.
    while (i > 0 && d < edges[i]) i -= 1;
    while (i < n - 1 && d >= edges[i + 1]) i += 1;
    bins[i].count += 1;
  }
  return { bins, min, max, measured: durations.length, scale: log ? "log" : "linear" };
}

/**
 * The orders a barrier's per-branch tables can be read in.
 * - `slowest`: longest duration first; branches still running or never started after
 *   every measured one, in request order;
 * - `finished`: last to finish first (who the join waited for); unfinished last;
 * - `request`: request order.
 */
export const ORDERS = {
  slowest: "slowest first",
  finished: "last to finish first",
  request: "request order",
};

/**
 * The branch paths of barrier `id` in `order` (a fresh sort only once per run version).
 * @param {Run} run @param {string} id @param {keyof typeof ORDERS} order
 * @returns {string[]}
 */
export function orderedBranches(run, id, order) {
  const barrier = run.barriers.get(id);
  if (!barrier) return [];
  if (order === "request") return barrier.branches;
  const cache = cacheOf(run);
  const key = `${id}|${order}`;
  const found = cache.orders.get(key);
  if (found) return found;
  const n = barrier.branches.length;
  const values = new Float64Array(n);
  const index = new Uint32Array(n);
  for (let i = 0; i < n; i += 1) {
    const inv = run.invocations.get(barrier.branches[i]);
    const v = !inv ? null : order === "slowest" ? durationOf(inv) : inv.finished;
    values[i] = v === null ? -Infinity : v;
    index[i] = i;
  }
  // Typed arrays sort numbers without boxing; ties keep request order.
  index.sort((a, b) => (values[b] - values[a]) || (a - b));
  const paths = Array.from(index, (i) => barrier.branches[i]);
  cache.orders.set(key, paths);
  return paths;
}

/**
 * Rows `[start, start + size)` of a list of `count`, clamped: the page a pager shows.
 * @param {number} count @param {number} page  0-based, clamped into range
 * @param {number} size
 */
export function pageOf(count, page, size) {
  const pages = Math.max(1, Math.ceil(count / size));
  const p = Math.min(pages - 1, Math.max(0, Math.floor(page)));
  return { page: p, pages, start: p * size, end: Math.min(count, (p + 1) * size) };
}
