// @ts-check
/**
 * Pure layout: run model -> the rows the page draws, the window of them that is visible,
 * and the time axis their lanes sit on. No DOM: node imports it for the tests.
 *
 * Rows are the barrier tree in request order: the turn (root), each barrier a caller
 * opened, its branches in request order, and under each branch the barriers it opened.
 * Sibling groups are collapsible and capped: past `shown` branches (default
 * `GROUP_LIMIT`) one "more" row stands for the rest with their status counts, so a
 * barrier with 10,000 branches costs 50 rows until someone asks for more. Whatever is
 * expanded, only the rows in the scroll window get DOM nodes (`windowRange`).
 *
 * Lanes share the rows: one lane per row, with x from event offsets mapped to [0, 1] by
 * `timeScale` (Jaeger's viewed-bounds idea). A branch lane shows queued (fork -> start),
 * running (start -> finish, or -> now while live) and waiting-at-the-join (finish ->
 * join), so overlap and idling at a barrier are both visible.
 */

import { activityOf } from "./activity.js";
import { eventBySeq, publicationOf } from "./fold.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */

export const ROW_HEIGHT = 26;
export const GROUP_LIMIT = 50;
/** How many more branches one click on a "more" row shows. */
export const GROUP_STEP = 500;

/**
 * @typedef {object} TreeOptions
 * @property {Set<string>} [collapsed]  barrier ids whose branches are hidden
 * @property {Map<string, number>} [shown]  barrier id -> how many branches to show
 * @property {number} [groupLimit]  default cap of shown branches per barrier
 * @property {string} [query]  show branches whose key, step or path contains this
 * @property {string} [status]  show branches with this status only
 * @property {boolean} [activity]  also a row per step entered, model call, tool call and
 *   cursor move of each shown invocation, interleaved with its barriers in seq order
 */

/**
 * @typedef {{kind: "root", rowKey: string, depth: number, path: string, step: string,
 *   status: string, flow: string}
 *  | {kind: "barrier", rowKey: string, depth: number, id: string, barrier: Barrier,
 *   collapsed: boolean, matched: number}
 *  | {kind: "branch", rowKey: string, depth: number, path: string, inv: Invocation,
 *   hasChildren: boolean}
 *  | {kind: "more", rowKey: string, depth: number, id: string, hidden: number,
 *   counts: Record<string, number>}
 *  | {kind: "activity", rowKey: string, depth: number, path: string,
 *   item: import("./activity.js").Activity}} Row
 */

/**
 * The tree rows of `run`, in request order.
 * @param {Run} run @param {TreeOptions} [options] @returns {Row[]}
 */
export function treeRows(run, options = {}) {
  const collapsed = options.collapsed || new Set();
  const shown = options.shown || new Map();
  const limit = options.groupLimit ?? GROUP_LIMIT;
  const keep = filterSet(run, options);
  /** @type {Row[]} */
  const rows = [];
  const root = run.invocations.get("");
  rows.push({
    kind: "root", rowKey: "root", depth: 0, path: "", flow: run.flow,
    step: (root && root.step) || run.cursor || "", status: run.status,
  });
  /** @param {Invocation} caller @param {number} depth */
  const visit = (caller, depth) => {
    // Activity rows only without a filter: a filter asks for branches, not their calls.
    const items = options.activity && !keep ? activityOf(run, caller.path) : [];
    let next = 0;
    /** @param {number} before */
    const activityUntil = (before) => {
      for (; next < items.length && items[next].seq < before; next += 1) {
        const item = items[next];
        rows.push({ kind: "activity", rowKey: `a:${item.seq}`, depth, path: caller.path, item });
      }
    };
    for (const id of caller.barriers) {
      const barrier = run.barriers.get(id);
      if (!barrier) continue;
      activityUntil(barrier.forkedSeq);
      const branches = keep ? barrier.branches.filter((p) => keep.has(p)) : barrier.branches;
      if (keep && branches.length === 0) continue;
      const isCollapsed = collapsed.has(id);
      rows.push({ kind: "barrier", rowKey: `b:${id}`, depth, id, barrier, collapsed: isCollapsed, matched: branches.length });
      if (isCollapsed) continue;
      const cap = Math.max(0, shown.get(id) ?? limit);
      const visible = Math.min(cap, branches.length);
      for (let i = 0; i < visible; i += 1) {
        const inv = run.invocations.get(branches[i]);
        if (!inv) continue;
        rows.push({ kind: "branch", rowKey: `p:${inv.path}`, depth: depth + 1, path: inv.path, inv, hasChildren: inv.barriers.length > 0 });
        visit(inv, depth + 2);
      }
      if (visible < branches.length) {
        rows.push({
          kind: "more", rowKey: `m:${id}`, depth: depth + 1, id,
          hidden: branches.length - visible,
          counts: hiddenCounts(run, barrier, branches, visible, !!keep),
        });
      }
    }
    activityUntil(Infinity);
  };
  if (root) visit(root, 1);
  return rows;
}

/**
 * Status counts of the branches past `visible` (from the barrier's running counts when
 * unfiltered, so a 10,000-branch group costs only its shown rows).
 * @param {Run} run @param {Barrier} barrier @param {string[]} branches
 * @param {number} visible @param {boolean} filtered
 */
function hiddenCounts(run, barrier, branches, visible, filtered) {
  /** @type {Record<string, number>} */
  const counts = { queued: 0, running: 0, fulfilled: 0, rejected: 0 };
  if (filtered || visible > branches.length / 2) {
    for (let i = visible; i < branches.length; i += 1) {
      const inv = run.invocations.get(branches[i]);
      if (inv) counts[inv.status] += 1;
    }
    return counts;
  }
  Object.assign(counts, barrier.counts);
  for (let i = 0; i < visible; i += 1) {
    const inv = run.invocations.get(branches[i]);
    if (inv) counts[inv.status] -= 1;
  }
  return counts;
}

/**
 * Paths to keep when filtering (matches and their ancestors), or null for no filter.
 * @param {Run} run @param {TreeOptions} options @returns {Set<string> | null}
 */
function filterSet(run, options) {
  const query = (options.query || "").trim().toLowerCase();
  const status = options.status || "";
  if (!query && !status) return null;
  const keep = new Set();
  for (const inv of run.invocations.values()) {
    if (inv.path === "") continue;
    if (status && inv.status !== status) continue;
    if (query && !(inv.key.toLowerCase().includes(query) || inv.step.toLowerCase().includes(query) || inv.path === query)) continue;
    let p = inv.path;
    while (p && !keep.has(p)) {
      keep.add(p);
      const dot = p.lastIndexOf(".");
      p = dot < 0 ? "" : p.slice(0, dot);
    }
  }
  return keep;
}

/**
 * Options under which the branch at `path` is a row: its ancestors' barriers expanded
 * and shown far enough. Returns new collections (the inputs are not changed).
 * @param {Run} run @param {TreeOptions} options @param {string} path
 * @returns {{collapsed: Set<string>, shown: Map<string, number>}}
 */
export function revealPath(run, options, path) {
  const collapsed = new Set(options.collapsed || []);
  const shown = new Map(options.shown || []);
  const limit = options.groupLimit ?? GROUP_LIMIT;
  let p = path;
  while (p) {
    const inv = run.invocations.get(p);
    if (!inv || inv.barrier === null) break;
    collapsed.delete(inv.barrier);
    const barrier = run.barriers.get(inv.barrier);
    if (barrier) {
      const position = barrier.branches.indexOf(p);
      const cap = shown.get(inv.barrier) ?? limit;
      if (position >= cap) shown.set(inv.barrier, position + 1);
    }
    const dot = p.lastIndexOf(".");
    p = dot < 0 ? "" : p.slice(0, dot);
  }
  return { collapsed, shown };
}

/**
 * The rows to materialise for a scroll position: `[start, end)` plus `overscan` rows on
 * each side, and the full height of the virtual list.
 * @param {number} total @param {number} scrollTop @param {number} viewport
 * @param {number} [rowHeight] @param {number} [overscan]
 */
export function windowRange(total, scrollTop, viewport, rowHeight = ROW_HEIGHT, overscan = 8) {
  const first = Math.floor(Math.max(0, scrollTop) / rowHeight);
  const count = Math.ceil(Math.max(0, viewport) / rowHeight) + 1;
  const start = Math.max(0, Math.min(total, first - overscan));
  const end = Math.max(start, Math.min(total, first + count + overscan));
  return { start, end, height: total * rowHeight };
}

/**
 * The scrollTop that brings row `index` into view (unchanged if it already is).
 * @param {number} index @param {number} scrollTop @param {number} viewport
 * @param {number} [rowHeight]
 */
export function scrollToRow(index, scrollTop, viewport, rowHeight = ROW_HEIGHT) {
  const top = index * rowHeight;
  if (top < scrollTop) return top;
  if (top + rowHeight > scrollTop + viewport) return Math.max(0, top + rowHeight - viewport);
  return scrollTop;
}

// -- time axis -----------------------------------------------------------------------------

/**
 * The time span the lanes cover: from the run's start to its last event, or to `now`
 * (seconds since the start) while it runs.
 * @param {Run} run @param {number | null} [now]
 */
export function timeBounds(run, now = null) {
  const end = Math.max(run.endOffset, now ?? 0);
  return { start: 0, end: end > 0 ? end : 1e-3 };
}

/** The narrowest window the time axis zooms to (seconds): individual branches of a
 * fan-out start microseconds apart, so a tenth of a millisecond still separates them. */
export const MIN_SPAN = 1e-4;

/**
 * The window `view` zoomed by `factor` (below 1 zooms in) around time `focus`, which keeps
 * its place on the axis; kept inside `full` and no narrower than `MIN_SPAN`. Zooming out to
 * the whole span or beyond gives null (no zoom).
 * @param {{start: number, end: number}} full @param {{start: number, end: number}} view
 * @param {number} focus @param {number} factor
 * @returns {{start: number, end: number} | null}
 */
export function zoomWindow(full, view, focus, factor) {
  const fullSpan = full.end - full.start;
  const span = Math.max(MIN_SPAN, (view.end - view.start) * factor);
  if (span >= fullSpan) return null;
  const f = Math.min(view.end, Math.max(view.start, focus));
  const at = (f - view.start) / (view.end - view.start || 1);
  return panWindow(full, { start: f - at * span, end: f - at * span + span }, 0);
}

/**
 * The window moved by `delta` seconds, kept inside `full` (same span).
 * @param {{start: number, end: number}} full @param {{start: number, end: number}} view
 * @param {number} delta
 */
export function panWindow(full, view, delta) {
  const span = view.end - view.start;
  const start = Math.min(full.end - span, Math.max(full.start, view.start + delta));
  return { start, end: start + span };
}

/**
 * Where barriers forked, joined and were asked to cancel, for the axis: each with its
 * barrier, time and kind (`fork`, `join`, `cancel`), those inside `bounds` only.
 * @param {Run} run @param {{start: number, end: number}} bounds
 */
export function axisMarkers(run, bounds) {
  /** @type {{kind: "fork" | "join" | "cancel", barrier: string, t: number, x: number}[]} */
  const out = [];
  const x = timeScale(bounds);
  /** @param {"fork" | "join" | "cancel"} kind @param {string} barrier @param {number | null | undefined} t */
  const add = (kind, barrier, t) => {
    if (typeof t === "number" && t >= bounds.start && t <= bounds.end) out.push({ kind, barrier, t, x: x(t) });
  };
  for (const b of run.barriers.values()) {
    add("fork", b.id, b.forkedAt);
    add("join", b.id, b.joinedAt);
    if (b.cancel) {
      add("cancel", b.id, eventBySeq(run, b.cancel.seq)?.offset);
    }
  }
  return out;
}

/**
 * Maps a time offset to [0, 1] within `bounds`.
 * @param {{start: number, end: number}} bounds @returns {(t: number) => number}
 */
export function timeScale(bounds) {
  const span = bounds.end - bounds.start || 1;
  return (t) => Math.min(1, Math.max(0, (t - bounds.start) / span));
}

/**
 * Round tick marks for the axis: about `count` of them, at 1, 2 or 5 x 10^k seconds.
 * @param {{start: number, end: number}} bounds @param {number} [count]
 */
export function ticks(bounds, count = 6) {
  const span = bounds.end - bounds.start;
  if (!(span > 0)) return [{ t: bounds.start, x: 0, label: formatSeconds(bounds.start) }];
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
  const out = [];
  const x = timeScale(bounds);
  for (let t = Math.ceil(bounds.start / step) * step; t <= bounds.end + step * 1e-9; t += step) {
    out.push({ t, x: x(t), label: formatSeconds(t, step) });
  }
  return out;
}

/**
 * A duration for people: "0s", "250ms", "1.5s", "2m 05s".
 * @param {number} seconds @param {number} [step]  tick step, to choose the precision
 */
export function formatSeconds(seconds, step) {
  const s = Math.abs(seconds) < 1e-9 ? 0 : seconds;
  if (s === 0) return "0s";
  if (Math.abs(s) < 1) {
    const ms = s * 1000;
    return `${Number(ms.toFixed(step !== undefined && step * 1000 < 1 ? 2 : ms < 10 ? 1 : 0))}ms`;
  }
  if (Math.abs(s) < 60) {
    // A zoomed axis ticks every 0.01 ms far into a run: its labels need those digits.
    const digits = step !== undefined && step < 1 ? Math.min(6, Math.ceil(-Math.log10(step) - 1e-9)) : s < 10 ? 2 : 1;
    return `${Number(s.toFixed(digits))}s`;
  }
  const minutes = Math.floor(s / 60);
  return `${minutes}m ${String(Math.round(s - minutes * 60)).padStart(2, "0")}s`;
}

/**
 * @typedef {{kind: string, x0: number, x1: number, t0: number, t1: number}} Segment
 */

/**
 * The lane of one row: segments in [0, 1] (`queued`, `running`, `waiting`, `model`,
 * `span`) and point marks: `join`, or `discard` on a branch whose join (or an enclosing one)
 * discarded its writes, so a lane never ends in a plain join mark for dropped work.
 * @param {Row} row @param {Run} run @param {{start: number, end: number}} bounds
 * @param {number | null} now  seconds since the start while live, else null
 */
export function lane(row, run, bounds, now) {
  const x = timeScale(bounds);
  const live = now !== null && run.status === "running";
  const until = live ? Math.max(now, run.endOffset) : run.endOffset;
  /** @type {Segment[]} */
  const segments = [];
  /** @type {{kind: string, x: number, t: number}[]} */
  const marks = [];
  /** @param {string} kind @param {number} t0 @param {number} t1 */
  const seg = (kind, t0, t1) => {
    // Outside a zoomed window a segment would be a sliver pinned to the edge.
    if (t1 < bounds.start || t0 > bounds.end) return;
    // Zero-length queued/waiting/model spans are left out; a branch that ran shows even
    // when it took no measurable time.
    if (t1 > t0 || (t1 === t0 && (kind === "running" || kind === "span" || kind === "tool" || kind === "step"))) {
      segments.push({ kind, t0, t1, x0: x(t0), x1: x(t1) });
    }
  };
  if (row.kind === "root") {
    seg("span", 0, until);
    const root = run.invocations.get("");
    for (const call of root ? root.models : []) {
      const ended = call.finished ? call.finished.offset : call.failed ? call.failed.offset : until;
      seg("model", call.offset, ended);
    }
  } else if (row.kind === "activity") {
    const item = row.item;
    const end = item.t1 ?? until;
    if (item.kind === "cursor") marks.push({ kind: "cursor", t: item.t0, x: x(item.t0) });
    else seg(item.kind === "step" ? "step" : item.kind, item.t0, Math.max(item.t0, end));
    if (item.kind === "tool" || item.kind === "model") {
      if (item.state === "error" || item.state === "retried") marks.push({ kind: "error", t: end, x: x(end) });
    }
  } else if (row.kind === "barrier") {
    const b = row.barrier;
    seg("span", b.forkedAt, b.joinedAt ?? until);
    if (b.joinedAt !== null) marks.push({ kind: "join", t: b.joinedAt, x: x(b.joinedAt) });
  } else if (row.kind === "branch") {
    const inv = row.inv;
    const barrier = inv.barrier === null ? undefined : run.barriers.get(inv.barrier);
    const forkedAt = barrier ? barrier.forkedAt : 0;
    const joinedAt = barrier ? barrier.joinedAt : null;
    if (inv.started === null) {
      seg("queued", forkedAt, inv.finished ?? joinedAt ?? until);
    } else {
      seg("queued", forkedAt, inv.started);
      seg("running", inv.started, inv.finished ?? joinedAt ?? until);
      for (const call of inv.models) {
        const ended = call.finished ? call.finished.offset : call.failed ? call.failed.offset : (inv.finished ?? until);
        seg("model", call.offset, ended);
      }
    }
    if (inv.finished !== null) {
      const joined = joinedAt ?? (barrier && barrier.outcome === "open" ? until : inv.finished);
      if (joined > inv.finished) seg("waiting", inv.finished, joined);
    }
    if (joinedAt !== null) {
      const publication = publicationOf(run, inv.path);
      const kind = publication && publication.state === "discarded" ? "discard" : "join";
      marks.push({ kind, t: joinedAt, x: x(joinedAt) });
    }
  }
  return { segments, marks: marks.filter((m) => m.t >= bounds.start && m.t <= bounds.end) };
}

/**
 * Who a join waited for: each branch's finish time and how long it then idled until the
 * join; the last to finish is the straggler.
 * @param {Run} run @param {string} barrierId
 */
export function joinWaits(run, barrierId) {
  const barrier = run.barriers.get(barrierId);
  if (!barrier) return null;
  /** @type {{path: string, key: string, status: string, finished: number | null, idle: number | null}[]} */
  const items = [];
  let straggler = null;
  for (const path of barrier.branches) {
    const inv = run.invocations.get(path);
    if (!inv) continue;
    const idle = inv.finished !== null && barrier.joinedAt !== null ? Math.max(0, barrier.joinedAt - inv.finished) : null;
    items.push({ path, key: inv.key, status: inv.status, finished: inv.finished, idle });
    if (inv.finished !== null && (straggler === null || inv.finished > straggler.finished)) {
      straggler = { path, key: inv.key, finished: inv.finished };
    }
  }
  return { joinedAt: barrier.joinedAt, straggler, branches: items };
}
