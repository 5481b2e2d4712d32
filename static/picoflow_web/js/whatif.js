// @ts-check
/**
 * The "What if" view's data (pure): the schedules of `GET /api/runs/<id>/whatif` (or the two
 * recorded schedules of a compare) turned into one lane set per schedule on one shared time
 * axis, the waits placed and named, and the sentences that state the difference.
 *
 * A lane is a branch (invocation path) or the turn's own work (path ""); a schedule may list
 * several operations of one path (a leaf branch is scheduled per model/tool call), which
 * share its lane. Every schedule gets the same lanes in the same order (tree order: a
 * caller, then its branches, indented by depth), so a branch sits at the same height in
 * each. A run with more lanes than `limit` shows the `limit` whose timing differs most
 * between the schedules, and says how many it hides.
 */

/**
 * @typedef {object} Operation
 * @property {string} [id]
 * @property {string} path
 * @property {string | null} [key]
 * @property {string | null} [step]
 * @property {string} [kind]  "branch" | "work"
 * @property {string} [parent]
 * @property {number} [depth]
 * @property {number} start
 * @property {number} end
 * @property {number} [busy]
 * @property {number} [idle]
 * @property {number | null} [superstep]
 * @property {string[]} [waited_for]
 * @property {number[][]} [parts]
 */

/**
 * @typedef {object} Wait
 * @property {string} path
 * @property {string | null} [key]
 * @property {number} wait
 * @property {string[]} [for]
 * @property {(string | null)[]} [for_keys]
 * @property {string} at  "superstep" | "join" | "slot" | "unexplained"
 * @property {number | null} [superstep]
 * @property {string | null} [barrier]
 */

/**
 * @typedef {object} Schedule
 * @property {number} total
 * @property {number} [supersteps]
 * @property {Operation[]} operations
 * @property {Wait[]} [waits]
 * @property {string[]} [critical_path]
 */

/**
 * @typedef {object} Gap  a wait drawn on a lane
 * @property {number} from
 * @property {number} to
 * @property {string} at
 * @property {string} label  "waits 9.0 s for B1 (superstep 2)"
 */

/**
 * @typedef {object} LaneSlot  one lane in one schedule
 * @property {number} start
 * @property {number} end
 * @property {number[][]} parts  intervals it ran, sorted
 * @property {number | null} superstep
 * @property {number} idle
 * @property {boolean} critical
 * @property {Gap[]} gaps
 * @property {number | null} shift  its start minus the base schedule's (null: no base or the base lacks it)
 */

/**
 * @typedef {object} Lane
 * @property {string} id  its path, or path and key when lanes are keyed
 * @property {string} path
 * @property {string} label  key, else path ("turn" for the top level's own work)
 * @property {string} step
 * @property {string} kind
 * @property {number} depth
 * @property {number} score  how much its timing differs between the schedules
 * @property {Record<string, LaneSlot | null>} slots  by schedule name
 */

/**
 * @typedef {object} LaneModel
 * @property {string[]} names  the schedules drawn, in order
 * @property {Lane[]} lanes  the lanes shown, in tree order
 * @property {number} total  lanes in all
 * @property {number} hidden  lanes left out (`total - lanes.length`)
 * @property {{start: number, end: number}} bounds  the shared time axis
 */

/** The schedules of a what-if answer, in the order the page draws them. */
export const SCHEDULES = ["recorded", "supersteps", "local_barriers"];

/** @type {Record<string, string>} */
export const SCHEDULE_TITLES = {
  recorded: "Recorded",
  supersteps: "Graph-wide supersteps",
  local_barriers: "Local barriers",
};

/** @type {Record<string, string>} */
export const SCHEDULE_RULES = {
  recorded: "as it happened",
  supersteps: "every ready operation starts at the next superstep; a superstep ends when all of its operations end",
  local_barriers: "each coordinator continues as soon as its own join completes",
};

/** Lanes a lane set shows at most (per schedule; the same lanes in each). */
export const LANE_LIMIT = 60;

/**
 * A start that moves by less than this share of the axis has not moved: the schedules leave
 * out coordination and the recording's own scheduling delays (a few ms), which shift every
 * later branch a little, and that is no difference worth a word. The same share as the
 * server's sentences ("about the same", runtime/whatif/text.py), so the two agree.
 */
export const SHIFT_SHARE = 0.025;

/**
 * Whether `delta` (seconds) is a move on an axis `span` long.
 * @param {number} delta @param {number} span
 */
export function moved(delta, span) {
  return Math.abs(delta) >= Math.max(5e-7, span * SHIFT_SHARE);
}

/** How a keyed list of names is cut in a sentence. */
const NAMES_SHOWN = 3;

/**
 * A duration for sentences, as the server's sentences (runtime/whatif/text.py) write one:
 * "11.0 s", "450 ms", "0.8 ms", "0 s".
 * @param {number} value @param {string} [unit]
 */
export function amount(value, unit = "s") {
  const v = Math.abs(value) < 5e-7 ? 0 : value;
  if (v === 0) return `0 ${unit}`;
  if (unit !== "s" || Math.abs(v) >= 1) return `${v.toFixed(1)} ${unit}`;
  const ms = v * 1000;
  return Math.abs(v) >= 0.01 ? `${ms.toFixed(0)} ms` : `${ms.toFixed(1)} ms`;
}

/** @param {string[]} names */
function listNames(names) {
  if (names.length <= NAMES_SHOWN) {
    return names.length <= 1 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
  }
  return `${names.slice(0, NAMES_SHOWN).join(", ")} and ${names.length - NAMES_SHOWN} more`;
}

/** The names a wait waited for: their keys, else their paths. @param {Wait} w */
export function waitedNames(w) {
  const paths = w.for ?? [];
  const keys = w.for_keys ?? [];
  const names = paths.map((p, i) => keys[i] ?? (p === "" ? "the turn" : p));
  for (let i = paths.length; i < keys.length; i += 1) names.push(keys[i] ?? "?");
  return names;
}

/**
 * A wait in words, as its lane says it: "waits 9.0 s for B1 (superstep 2)".
 * @param {Wait} w @param {string} [unit]
 */
export function waitLabel(w, unit = "s") {
  const long = amount(w.wait, unit);
  const names = listNames(waitedNames(w));
  if (w.at === "superstep") {
    return `waits ${long}${names ? ` for ${names}` : ""}${w.superstep != null ? ` (superstep ${w.superstep})` : ""}`;
  }
  if (w.at === "join") return `waits ${long} at its join${names ? ` for ${names}` : ""}`;
  if (w.at === "slot") return `waits ${long} for a free slot${names ? ` (held by ${names})` : ""}`;
  return `idle ${long}: the events do not say why`;
}

/** A lane's name. @param {Operation} op */
function labelOf(op) {
  if (op.kind === "work" || op.path === "") return "turn (own work)";
  return op.key != null && op.key !== "" ? String(op.key) : op.path;
}

/**
 * A lane's id: its path ("" for the top level's own work); with `keyed`, its path and key
 * (two runs' branches match by both).
 * @param {Operation} op @param {boolean} keyed
 */
function laneId(op, keyed) {
  if (op.kind === "work") return "";
  return keyed ? `${op.path}\u0000${op.key ?? ""}` : op.path;
}

/**
 * Operations of a schedule by lane, merged: one slot per lane; and each path's lane.
 * @param {Schedule} schedule @param {boolean} keyed
 */
function slotsOf(schedule, keyed) {
  /** @type {Map<string, {slot: LaneSlot, ops: Operation[]}>} */
  const byPath = new Map();
  /** @type {Map<string, string>} */
  const idOfPath = new Map();
  for (const op of schedule.operations ?? []) {
    const path = laneId(op, keyed);
    if (!idOfPath.has(op.path)) idOfPath.set(op.path, path);
    const parts = op.parts && op.parts.length ? op.parts.map((p) => [p[0], p[1]]) : [[op.start, op.end]];
    const found = byPath.get(path);
    if (!found) {
      byPath.set(path, {
        slot: { start: op.start, end: op.end, parts, superstep: op.superstep ?? null, idle: op.idle ?? 0, critical: false, gaps: [], shift: null },
        ops: [op],
      });
      continue;
    }
    const s = found.slot;
    s.start = Math.min(s.start, op.start);
    s.end = Math.max(s.end, op.end);
    s.parts.push(...parts);
    if (op.superstep != null && (s.superstep === null || op.superstep < s.superstep)) s.superstep = op.superstep;
    s.idle += op.idle ?? 0;
    found.ops.push(op);
  }
  for (const { slot } of byPath.values()) slot.parts.sort((a, b) => a[0] - b[0]);
  return { byId: byPath, idOfPath };
}

/**
 * Where a wait sits on its lane: before the operation it delayed, or after the branch's
 * end for a join.
 * @param {Wait} w @param {{slot: LaneSlot, ops: Operation[]}} found
 * @returns {{from: number, to: number}}
 */
function gapSpan(w, found) {
  if (w.at === "join") return { from: found.slot.end, to: found.slot.end + w.wait };
  let op = null;
  if (w.superstep != null) op = found.ops.find((o) => o.superstep === w.superstep) ?? null;
  if (!op) {
    // The operation the wait can have delayed: the earliest that starts after it.
    op = found.ops.filter((o) => o.start >= w.wait - 1e-9).sort((a, b) => a.start - b.start)[0] ?? found.ops[0];
  }
  return { from: Math.max(0, op.start - w.wait), to: op.start };
}

/**
 * Lanes in tree order: each lane's branches right after it, in the order the schedules
 * list them (the top level's own work first).
 * @param {Map<string, {op: Operation, parent: string | null}>} first  the first operation
 *   seen of each lane, and its caller's lane
 */
function treeOrder(first) {
  /** @type {Map<string, string[]>} */
  const children = new Map();
  /** @type {string[]} */
  const roots = [];
  for (const [path, { parent }] of first) {
    // The top level's own work is a lane beside its branches, not above them.
    if (path !== "" && parent !== null && parent !== "" && first.has(parent) && parent !== path) {
      const list = children.get(parent) ?? [];
      list.push(path);
      children.set(parent, list);
    } else roots.push(path);
  }
  if (roots.includes("")) {
    roots.splice(roots.indexOf(""), 1);
    roots.unshift("");
  }
  /** @type {string[]} */
  const out = [];
  const seen = new Set();
  // An explicit stack, not recursion: a deep nesting must not overflow it.
  const stack = [...roots].reverse();
  while (stack.length) {
    const path = /** @type {string} */ (stack.pop());
    if (seen.has(path)) continue;
    seen.add(path);
    out.push(path);
    const kids = children.get(path);
    if (kids) for (let i = kids.length - 1; i >= 0; i -= 1) stack.push(kids[i]);
  }
  return out;
}

/**
 * The lane sets of `schedules` (named `names`, drawn in that order) on one axis; `base`
 * is the schedule the others are measured against (its lanes carry no shift).
 * @param {Record<string, Schedule | null | undefined>} schedules
 * @param {{names?: string[], base?: string, limit?: number, unit?: string, keyed?: boolean}} [options]
 *   `keyed`: a lane is a path and key (two runs' branches), not a path alone
 * @returns {LaneModel}
 */
export function laneModel(schedules, options = {}) {
  const names = (options.names ?? SCHEDULES).filter((n) => schedules[n]);
  const base = options.base ?? names[0];
  const limit = options.limit ?? LANE_LIMIT;
  const unit = options.unit ?? "s";
  /** @type {Map<string, Map<string, {slot: LaneSlot, ops: Operation[]}>>} */
  const bySchedule = new Map();
  const keyed = options.keyed ?? false;
  /** @type {Map<string, {op: Operation, parent: string | null}>} */
  const first = new Map();
  let end = 0;
  for (const name of names) {
    const schedule = /** @type {Schedule} */ (schedules[name]);
    const { byId: slots, idOfPath } = slotsOf(schedule, keyed);
    bySchedule.set(name, slots);
    for (const [id, { ops }] of slots) {
      if (!first.has(id)) first.set(id, { op: ops[0], parent: idOfPath.get(ops[0].parent ?? "") ?? null });
    }
    end = Math.max(end, Number(schedule.total) || 0);
    for (const { slot } of slots.values()) end = Math.max(end, slot.end);
    for (const path of schedule.critical_path ?? []) {
      const found = slots.get(idOfPath.get(path) ?? "\u0000");
      if (found) found.slot.critical = true;
    }
    for (const w of schedule.waits ?? []) {
      const found = slots.get(idOfPath.get(w.path) ?? "\u0000");
      if (!found || !(w.wait > 0)) continue;
      const span = gapSpan(w, found);
      found.slot.gaps.push({ ...span, at: w.at, label: waitLabel(w, unit) });
      end = Math.max(end, span.to);
    }
  }
  const baseSlots = bySchedule.get(base);
  /** @type {Lane[]} */
  const all = [];
  for (const id of treeOrder(first)) {
    const op = /** @type {{op: Operation}} */ (first.get(id)).op;
    const path = op.kind === "work" ? "" : op.path;
    /** @type {Record<string, LaneSlot | null>} */
    const slots = {};
    const baseSlot = baseSlots?.get(id)?.slot ?? null;
    let score = 0;
    for (const name of names) {
      const slot = bySchedule.get(name)?.get(id)?.slot ?? null;
      slots[name] = slot;
      if (!slot || !baseSlot) {
        if (slot !== baseSlot) score = Infinity; // in one schedule only: a difference in itself
        continue;
      }
      if (name !== base) {
        slot.shift = slot.start - baseSlot.start;
        score = Math.max(score, Math.abs(slot.shift) + Math.abs(slot.end - baseSlot.end));
      }
    }
    all.push({
      id, path, label: labelOf(op), step: op.step ?? "", kind: op.kind ?? "branch",
      depth: op.depth ?? (path === "" ? 0 : path.split(".").length), score, slots,
    });
  }
  let lanes = all;
  if (all.length > limit) {
    const order = all.map((_, i) => i).sort((a, b) => (all[b].score - all[a].score) || (a - b));
    const keep = new Set(order.slice(0, limit));
    lanes = all.filter((_, i) => keep.has(i));
  }
  return { names, lanes, total: all.length, hidden: all.length - lanes.length, bounds: { start: 0, end: end > 0 ? end : 1 } };
}

/**
 * Where `t` sits on the axis, 0..1.
 * @param {{start: number, end: number}} bounds @param {number} t
 */
export function axisX(bounds, t) {
  const span = bounds.end - bounds.start || 1;
  return Math.min(1, Math.max(0, (t - bounds.start) / span));
}

/**
 * The branch whose start moves most from `base` to `other`, with the wait that moved it
 * (`keyed`: branches match by path and key, as two runs' do).
 * @param {Schedule} base @param {Schedule} other @param {boolean} [keyed]
 */
export function biggestShift(base, other, keyed = false) {
  const span = Math.max(Number(base.total) || 0, Number(other.total) || 0);
  /** @type {Map<string, number>} */
  const starts = new Map();
  for (const op of base.operations ?? []) {
    if (op.kind === "work") continue;
    const id = laneId(op, keyed);
    const known = starts.get(id);
    if (known === undefined || op.start < known) starts.set(id, op.start);
  }
  /** @type {Map<string, Operation>} */
  const later = new Map();
  for (const op of other.operations ?? []) {
    const id = laneId(op, keyed);
    if (op.kind === "work" || !starts.has(id)) continue;
    const known = later.get(id);
    if (!known || op.start < known.start) later.set(id, op);
  }
  /** @type {{path: string, key: string, from: number, to: number, wait: Wait | null} | null} */
  let best = null;
  let count = 0;
  for (const [id, op] of later) {
    const from = /** @type {number} */ (starts.get(id));
    const delta = op.start - from;
    if (!moved(delta, span)) continue;
    count += 1;
    if (best === null || Math.abs(delta) > Math.abs(best.to - best.from)) {
      best = { path: op.path, key: labelOf(op), from, to: op.start, wait: null };
    }
  }
  if (best) {
    const path = best.path;
    const waits = (other.waits ?? []).filter((w) => w.path === path && w.at !== "join");
    best.wait = waits.sort((a, b) => b.wait - a.wait)[0] ?? null;
  }
  return { best, count };
}

/**
 * A wait as the end of a sentence: "it waits 9.0 s for B1 at superstep 2".
 * @param {Wait} w @param {string} unit
 */
function waitClause(w, unit) {
  const names = listNames(waitedNames(w));
  const long = amount(w.wait, unit);
  if (w.at === "superstep") return `it waits ${long}${names ? ` for ${names}` : ""}${w.superstep != null ? ` at superstep ${w.superstep}` : ""}`;
  if (w.at === "slot") return `it waits ${long} for a free slot${names ? ` (held by ${names})` : ""}`;
  return `it is idle ${long}`;
}

/**
 * The sentence a schedule's lane set starts with: its total against the base and the branch
 * it moves most. "Under graph-wide supersteps this run would take 11.0 s (same as
 * recorded); A2 would start at 10.0 s instead of 1.0 s: it waits 9.0 s for B1 at superstep 2."
 * @param {Record<string, Schedule>} schedules @param {string} name @param {string} [unit]
 */
export function scheduleSentence(schedules, name, unit = "s") {
  const s = schedules[name];
  const recorded = schedules.recorded;
  if (!s) return "";
  if (name === "recorded" || !recorded) {
    const top = (s.waits ?? [])[0];
    const longest = top ? ` The longest wait: ${top.key ?? top.path} ${waitLabel(top, unit)}.` : "";
    return `As recorded this run took ${amount(s.total, unit)}.${longest}`;
  }
  const title = name === "supersteps" ? "graph-wide supersteps" : name === "local_barriers" ? "local barriers" : name;
  const total = amount(s.total, unit);
  const base = amount(recorded.total, unit);
  const diff = s.total - recorded.total;
  const change = `${amount(Math.abs(diff), unit)} ${diff > 0 ? "longer" : "shorter"}`;
  const versus = total === base ? "same as recorded"
    : !moved(diff, Math.max(s.total, recorded.total)) ? `about the same as recorded: ${change}`
      : `${change} than the recorded ${base}`;
  const steps = name === "supersteps" && typeof s.supersteps === "number" ? ` in ${s.supersteps} superstep${s.supersteps === 1 ? "" : "s"}` : "";
  let text = `Under ${title} this run would take ${total}${steps} (${versus})`;
  const { best, count } = biggestShift(recorded, s);
  if (!best) return `${text}; every branch would start when it did.`;
  text += `; ${best.key} would start at ${amount(best.to, unit)} instead of ${amount(best.from, unit)}`;
  if (best.wait) text += `: ${waitClause(best.wait, unit)}`;
  text += ".";
  if (count > 1) text += ` ${count - 1} other branch${count === 2 ? "" : "es"} would start at another time too.`;
  return text;
}

/**
 * A lane's shift in words, for its label: "+9.0 s", "−0.5 s", "" when it starts as in the
 * base (or moves too little to count on an axis `span` long).
 * @param {number | null} shift @param {string} [unit] @param {number} [span]
 */
export function shiftLabel(shift, unit = "s", span = 0) {
  if (shift === null || !moved(shift, span) || amount(Math.abs(shift), unit) === amount(0, unit)) return "";
  return `${shift > 0 ? "+" : "−"}${amount(Math.abs(shift), unit)}`;
}

/**
 * The view named by a run page's hash: "whatif" for `#view=whatif` (or a bare `#whatif`),
 * else null (the lanes).
 * @param {string} hash
 */
export function viewOfHash(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  if (params.get("view") === "whatif" || params.has("whatif")) return "whatif";
  return null;
}

/**
 * `hash` (a run page's deep link, "" or "#...") naming `view` too.
 * @param {string} hash @param {string | null} view
 */
export function hashWithView(hash, view) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  params.delete("view");
  params.delete("whatif");
  if (view) params.set("view", view);
  const text = params.toString();
  return text ? `#${text}` : "";
}
