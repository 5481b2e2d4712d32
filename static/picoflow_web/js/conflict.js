// @ts-check
/**
 * Why a join refused to publish, as data (no DOM; node tests import it): from a run model
 * and an invalidated barrier, the field and its owning step, every write the barrier's
 * branches made to it (or the refused write to shared state), each with its proposed
 * value, its base at the fork and the seq of the event that recorded it, a plain reason
 * and the fix that usually applies. The DOM modules render this and derive nothing.
 *
 * Everything comes from recorded events: the `join.invalidated` error and provenance, the
 * branches' draft events (`state.replaced` carries the writer's base), and the fold's
 * fork-time bases (`baseAt`) where an event carries none.
 */

import { diffValue } from "./diff.js";
import { baseAt, eventBySeq } from "./fold.js";
import { fieldLabelOf } from "./labels.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Barrier} Barrier */

/**
 * One write in the story. `part` says whether it is part of the problem; a compatible
 * contribution beside a conflict is listed with `part: false`, because the join discarded
 * it too and people look for it. `seq` is null when no event records it.
 * @typedef {object} Writer
 * @property {string} path
 * @property {string} key
 * @property {string} step  the step that owns the field written
 * @property {string} field
 * @property {"replacement" | "removal" | "contribution" | "mutation" | "output" | "write"} kind
 * @property {boolean} part
 * @property {any} value
 * @property {boolean} hasValue
 * @property {any} base  the field's value as the writer saw it at its fork
 * @property {boolean} hasBase  the field existed in the writer's fork-time view
 * @property {number | null} seq
 * @property {string | null} event  the type of the event at `seq`
 * @property {ReturnType<typeof diffValue>} changes  base → value, structurally
 * @property {any} [result]  a contribution's field value in the writer's own view after it
 * @property {string} [what]  a refused write to shared state, in the runtime's words
 */

/**
 * @typedef {object} Conflict
 * @property {string} barrier
 * @property {"conflict" | "mutation" | "reducer" | "output" | "configuration" | "checkpoint" | "other"} kind
 * @property {string} code
 * @property {string} title
 * @property {string | null} field  `Step.field`, when one field is at stake
 * @property {string | null} step  the step that owns that field
 * @property {string} reason
 * @property {string} fix
 * @property {string} message  the runtime's own message
 * @property {number | null} joinSeq
 * @property {Writer[]} writers  the problem's writes first, in request-path order
 * @property {{a: number, b: number, changes: ReturnType<typeof diffValue>}[]} between
 *   structural differences between the proposed values of the problem's writers (each
 *   against the first)
 * @property {any} initial  a failed reducer's starting value (undefined otherwise)
 */

const own = (/** @type {object} */ o, /** @type {string} */ k) => o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k);

/** The word each provenance kind reads as. */
const KINDS = /** @type {const} */ ({ replace: "replacement", remove: "removal", contribute: "contribution", mutation: "mutation", output: "output" });

/** @param {string} path @param {string} root */
const within = (path, root) => path === root || path.startsWith(`${root}.`);

/**
 * Draft events of the barrier's branches and their descendants, in seq order.
 * @param {Run} run @param {Barrier} barrier
 */
function draftEvents(run, barrier) {
  const out = [];
  for (const e of run.events) {
    if (e.seq < barrier.forkedSeq || (barrier.joinedSeq !== null && e.seq > barrier.joinedSeq)) continue;
    if (!e.draft || (e.type !== "state.replaced" && e.type !== "state.removed" && e.type !== "state.contributed")) continue;
    const path = String(e.path ?? "");
    if (barrier.branches.some((b) => within(path, b))) out.push(e);
  }
  return out;
}

/** @param {string} type @returns {Writer["kind"]} */
function kindOfEvent(type) {
  return type === "state.contributed" ? "contribution" : type === "state.removed" ? "removal" : "replacement";
}

/**
 * What a field looked like to `path` at its fork.
 * @param {Run} run @param {string} path @param {string} step @param {string} field
 */
function forkBase(run, path, step, field) {
  if (!run.invocations.has(path)) return { base: null, hasBase: false };
  const base = baseAt(run, path);
  const fields = base[step] || {};
  return own(fields, field) ? { base: fields[field], hasBase: true } : { base: null, hasBase: false };
}

/** @param {Run} run @param {string} path @param {any} fallback */
function keyOf(run, path, fallback) {
  return String(fallback ?? run.invocations.get(path)?.key ?? path);
}

/**
 * The seq of the event where a refused write to shared state surfaced: no draft is ever
 * recorded for it, so it is the writer's own rejection (or the first model or tool event
 * that reported the error), else null.
 * @param {Run} run @param {string} path @param {string} type  the error's type
 */
function surfacedAt(run, path, type) {
  for (const e of run.events) {
    if (String(e.path ?? "") !== path) continue;
    if (e.type === "branch.rejected" && e.error?.type === type) return e.seq;
    if (e.type === "tool.finished" && typeof e.result === "string" && e.result.includes(type)) return e.seq;
  }
  const inv = run.invocations.get(path);
  return inv ? inv.finishedSeq : null;
}

/**
 * The writes a problem names, matched to the events that recorded them: the n-th
 * provenance entry of a path and field is its n-th draft event of that kind.
 * @param {Run} run @param {Barrier} barrier @param {any[]} provenance @param {any[]} drafts
 * @returns {Writer[]}
 */
function problemWriters(run, barrier, provenance, drafts) {
  /** @type {Map<string, number>} */
  const used = new Map();
  return provenance.map((p) => {
    const path = String(p.path ?? "");
    const key = keyOf(run, path, p.key);
    if (p.kind === "mutation") {
      const fields = Array.isArray(p.fields) ? p.fields.map(String) : [];
      const step = String(p.target_step ?? p.step ?? "");
      const one = fields.length === 1 ? fields[0] : null;
      const value = one !== null && own(p.value, one) ? p.value[one] : p.value;
      const base = one !== null && own(p.base, one) ? p.base[one] : p.base;
      const seq = surfacedAt(run, path, String(barrier.error?.type ?? "ParallelMutationError"));
      return writer({ path, key, step, field: one ?? fields.join(", "), kind: "mutation", part: true,
        value, hasValue: own(p, "value"), base, hasBase: one !== null ? own(p.base, one) : own(p, "base"),
        seq, event: seq === null ? null : eventBySeq(run, seq)?.type ?? null, what: p.what });
    }
    const kind = KINDS[/** @type {keyof typeof KINDS} */ (p.kind)] ?? "write";
    const step = String(p.step ?? "");
    const field = p.field === undefined ? "" : String(p.field);
    const type = kind === "contribution" ? "state.contributed" : kind === "removal" ? "state.removed" : "state.replaced";
    const n = used.get(`${path}\u0000${field}\u0000${type}`) ?? 0;
    used.set(`${path}\u0000${field}\u0000${type}`, n + 1);
    const matching = drafts.filter((e) => String(e.path) === path && e.step === step && e.field === field && e.type === type);
    // A replacement's draft holds its last write; a contribution is one event each.
    const e = kind === "contribution" ? matching[n] : matching[matching.length - 1];
    const fork = forkBase(run, path, step, field);
    const eventBase = e && e.type !== "state.contributed" && own(e, "base");
    const seq = e ? e.seq : kind === "output" ? run.invocations.get(path)?.finishedSeq ?? null : null;
    return writer({
      path, key, step: step || (run.invocations.get(path)?.step ?? ""), field, kind, part: true,
      value: kind === "output" ? run.invocations.get(path)?.output : e && e.type === "state.replaced" ? e.value : e && e.type === "state.contributed" ? e.value : p.value,
      hasValue: kind !== "removal" && (own(p, "value") || kind === "output" || !!e),
      // The writer's event says what it saw; a fork-time base answers where none does.
      base: eventBase ? e.base : own(p, "base") ? p.base : fork.base,
      hasBase: fork.hasBase || (eventBase ? e.base !== null : false),
      seq, event: seq === null ? null : eventBySeq(run, seq)?.type ?? null,
      ...(e && e.type === "state.contributed" ? { result: contributedResult(run, e) } : {}),
    });
  });
}

/**
 * A contribution's value in its writer's own view: the event's `result`, or, for one the
 * fold reduced itself (its event names the channel), the value the fold recorded.
 * @param {Run} run @param {any} e
 */
function contributedResult(run, e) {
  if (!e.channel) return e.result;
  const change = run.invocations.get(String(e.path))?.changes.find((c) => c.seq === e.seq);
  return change ? change.value : undefined;
}

/** @param {Omit<Writer, "changes"> & {what?: string}} w @returns {Writer} */
function writer(w) {
  const changes = w.hasValue && w.kind !== "contribution" ? diffValue(w.hasBase ? w.base : undefined, w.value) : [];
  return { ...w, changes };
}

/**
 * Writes of the barrier's branches that are not part of the problem (e.g. a compatible
 * contribution to another field): each draft event no problem entry claimed, so people
 * see that the join discarded them too, for another write's reason.
 * @param {Run} run @param {any[]} drafts @param {Writer[]} problem
 * @returns {Writer[]}
 */
function bystanders(run, drafts, problem) {
  const claimed = new Set(problem.map((w) => w.seq));
  const out = [];
  for (const e of drafts) {
    const path = String(e.path);
    if (claimed.has(e.seq)) continue;
    if (out.length >= BYSTANDER_LIMIT) break;
    const kind = kindOfEvent(e.type);
    // A branch's later replacement of the same field supersedes its earlier one.
    if (kind !== "contribution" && drafts.some((x) => x.seq > e.seq && String(x.path) === path && x.step === e.step && x.field === e.field && x.type !== "state.contributed")) continue;
    const fork = forkBase(run, path, e.step, e.field);
    out.push(writer({
      path, key: keyOf(run, path, null), step: e.step, field: e.field, kind, part: false,
      value: e.type === "state.removed" ? null : e.value, hasValue: e.type !== "state.removed",
      base: e.type === "state.contributed" ? fork.base : e.base, hasBase: fork.hasBase,
      seq: e.seq, event: e.type,
      ...(e.type === "state.contributed" ? { result: contributedResult(run, e) } : {}),
    }));
  }
  return out;
}

/** Past this many, the other writes of a big fan-out are not listed one by one. */
export const BYSTANDER_LIMIT = 50;

/** @param {string[]} items */
function listed(items) {
  if (items.length <= 1) return items.join("");
  return `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

/**
 * The story of invalidated barrier `id` (null when it is not invalidated in `run`).
 * @param {Run} run @param {string} id @returns {Conflict | null}
 */
export function conflictOf(run, id) {
  const barrier = run.barriers.get(id);
  if (!barrier || barrier.outcome !== "invalidated") return null;
  const error = barrier.error || {};
  const code = String(error.code || (barrier.checkpointFailed ? "checkpoint" : "invalidated"));
  const message = String(error.message || "");
  const base = { barrier: id, code, message, joinSeq: barrier.joinedSeq, initial: undefined };
  if (barrier.checkpointFailed) {
    return { ...base, kind: "checkpoint", title: "Checkpoint failed: join rolled back", field: null, step: null, writers: [], between: [],
      reason: "The join published, but the root-join checkpoint could not save the session right after it, so the publication was rolled back.",
      fix: "Look at the session store's error; nothing of the barrier is in the session, so the turn can be run again." };
  }
  const drafts = draftEvents(run, barrier);
  const provenance = Array.isArray(barrier.provenance) ? barrier.provenance : [];
  const problem = problemWriters(run, barrier, provenance, drafts);
  const writers = [...problem, ...bystanders(run, drafts, problem)];
  const between = [];
  const proposals = problem.filter((w) => w.hasValue && w.kind === "replacement");
  for (let i = 1; i < proposals.length; i += 1) {
    between.push({ a: 0, b: problem.indexOf(proposals[i]), changes: diffValue(proposals[0].value, proposals[i].value) });
  }
  const first = problem[0];
  const step = String(error.extra?.step ?? first?.step ?? "");
  const name = String(error.extra?.field ?? first?.field ?? "");
  // A LangGraph run's state is its channels (labels.js): "channel winner", not "state.winner".
  const field = step && name ? fieldLabelOf(run, step, name) : null;
  const who = (/** @type {Writer[]} */ ws) => listed([...new Set(ws.map((w) => `${w.key} (${w.path})`))]);
  switch (code) {
    case "parallel_state_conflict": {
      const replacers = problem.filter((w) => w.kind === "replacement" || w.kind === "removal");
      const contributors = problem.filter((w) => w.kind === "contribution");
      let reason;
      let fix;
      if (replacers.length > 1) {
        reason = `${replacers.length === 2 ? "Two" : replacers.length} branches, ${who(replacers)}, replaced ${field}. A join cannot choose between replacements (a reducer does not merge them), so it published nothing.`;
        fix = `Give ${field} a reducer channel (declare it in ${step}.parallel_state_channels() and write it with contribute_state()), or let one branch own the field.`;
      } else if (replacers.length && contributors.length) {
        reason = `${who(replacers)} replaced ${field} while ${who(contributors)} contributed to it; a replacement and contributions to one field cannot be combined, so the join published nothing.`;
        fix = `Write ${field} one way: contribute_state() from every branch, or save_state() from one branch only.`;
      } else {
        reason = `${field} is a single-writer channel and ${who(contributors)} all contributed to it, so the join published nothing.`;
        fix = `Let one branch write ${field}, or declare a channel that combines values (append, keyed_by_branch, sum, …).`;
      }
      // A trace of another runtime (LangGraph) says its own fix in its own words.
      if (typeof error.extra?.fix === "string" && error.extra.fix) fix = error.extra.fix;
      return { ...base, kind: "conflict", title: `Conflict on ${field}`, field, step, reason, fix, writers, between };
    }
    case "parallel_mutation": {
      const mutations = problem.filter((w) => w.kind === "mutation");
      const m = mutations[0];
      const target = m && m.field && m.step ? `${m.step}.${m.field}` : m?.step || null;
      const whatText = m ? String(/** @type {any} */ (provenance[problem.indexOf(m)])?.what ?? "write shared state") : "write shared state";
      const ownStep = m ? run.invocations.get(m.path)?.step ?? "" : "";
      const reason = `${who(mutations)} tried to ${whatText} from inside a branch. Branches write only their own step's state (${ownStep}); any other write invalidates the whole barrier, even when the branch catches the error.`;
      const fix = m && m.step
        ? `Return the value as the branch's output (or contribute it on ${ownStep}'s own channel) and let ${barrier.callerStep} save ${target} after the join.`
        : `Return what the branch wants changed as its output, and let ${barrier.callerStep} make the change after the join.`;
      return { ...base, kind: "mutation", title: `Invalid shared mutation${target ? ` of ${target}` : ""}`, field: target, step: m?.step || null, reason, fix, writers, between };
    }
    case "parallel_reducer": {
      const initial = error.extra?.initial;
      const contributors = problem.filter((w) => w.kind === "contribution");
      const detail = message.replace(/^The '[^']*' reducer of \S+ failed: /, "");
      const channel = /^The '([^']*)' reducer/.exec(message)?.[1] ?? "channel";
      const start = initial !== undefined ? `, starting from ${JSON.stringify(initial)}` : "";
      const reason = `The '${channel}' reducer of ${field} raised while combining ${contributors.length} contribution${contributors.length === 1 ? "" : "s"} from ${who(contributors)} in request-path order${start}: ${detail}. Each branch's own view held only its own contribution, so only the join saw them together.`;
      const fix = `Make ${field}'s reducer accept every combination of contributions it can be given (or check each value in its branch before contributing it), so the join can always reduce.`;
      return { ...base, kind: "reducer", title: `Reducer failed on ${field}`, field, step, reason, fix, writers, between, initial };
    }
    case "parallel_output":
      return { ...base, kind: "output", title: "A branch's output is not JSON", field: null, step: first?.step ?? null, writers, between,
        reason: `${who(problem)} returned a value that is not plain JSON, which a join cannot record.`,
        fix: "Return plain JSON from the branch (objects, lists, strings, numbers, booleans, null)." };
    case "parallel_configuration":
      return { ...base, kind: "configuration", title: `Undeclared channel${field ? ` ${field}` : ""}`, field, step, writers, between,
        reason: `${who(problem)} called contribute_state() on a field its step declares no channel for.`,
        fix: `Declare the channel in ${step || "the step"}.parallel_state_channels(), or use save_state() for a plain replacement.` };
    default:
      return { ...base, kind: "other", title: "Join refused to publish", field, step, writers, between,
        reason: message || "The join was invalidated.", fix: "See the error below." };
  }
}

/**
 * The paths of the problem's writers (what the tree and lanes highlight), with their kind.
 * @param {Conflict | null} conflict @returns {Map<string, string>}
 */
export function writerPaths(conflict) {
  const out = new Map();
  for (const w of conflict ? conflict.writers : []) if (w.part && !out.has(w.path)) out.set(w.path, w.kind);
  return out;
}

/**
 * The short word for each kind of invalidated join, for badges: only two siblings'
 * replacements of one field are a "conflict".
 */
export const PROBLEM_WORDS = Object.freeze({
  conflict: "conflict", mutation: "invalid write", reducer: "reducer failed", output: "invalid output",
  configuration: "invalid configuration", checkpoint: "checkpoint failed", other: "join invalidated",
});

/**
 * The badge word for a run's invalidated joins: the one kind's word when they are all of a
 * kind, else "join invalidated". Null when there is none.
 * @param {(Conflict | null)[]} conflicts
 * @returns {string | null}
 */
export function problemWord(conflicts) {
  const kinds = new Set(conflicts.map((c) => (c ? c.kind : "other")));
  if (!kinds.size) return null;
  return kinds.size === 1 ? PROBLEM_WORDS[/** @type {Conflict["kind"]} */ ([...kinds][0])] : PROBLEM_WORDS.other;
}

/**
 * A conflict card's one line: the field at stake and its problem's writers (each once, in
 * request-path order), then how many more there are beyond `limit`.
 * @param {Conflict} conflict @param {number} [limit]
 * @returns {{field: string | null, writers: {path: string, key: string}[], more: number}}
 */
export function conflictLine(conflict, limit = 4) {
  /** @type {{path: string, key: string}[]} */
  const writers = [];
  const seen = new Set();
  for (const w of conflict.writers) {
    if (!w.part || seen.has(w.path)) continue;
    seen.add(w.path);
    writers.push({ path: w.path, key: w.key || w.path });
  }
  return { field: conflict.field, writers: writers.slice(0, limit), more: Math.max(0, writers.length - limit) };
}

/**
 * What one of an invocation's own changes was, from the event that recorded it:
 * replacement, removal, contribution, or a publication of an inner join.
 * @param {Run} run @param {{seq: number, kind: string}} change
 * @returns {"replacement" | "removal" | "contribution" | "join"}
 */
export function changeKind(run, change) {
  if (change.kind === "join") return "join";
  const e = eventBySeq(run, change.seq);
  return e ? /** @type {any} */ (kindOfEvent(e.type)) : "replacement";
}
