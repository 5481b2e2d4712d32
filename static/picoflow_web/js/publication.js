// @ts-check
/**
 * How the page marks publication, as data (no DOM; node tests import it): the badge, dot
 * and counts of a branch or barrier row, and the inspector's words, all from
 * `publicationOf` / `barrierPublicationOf` in fold.js. The DOM modules draw these and
 * decide nothing about publication themselves, so the property tests over these functions
 * cover every green mark the page can show.
 */

import { barrierPublicationOf, publicationOf } from "./fold.js";
import { errorLabel } from "./format.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Publication} Publication */

/** Badge words per publication state (a discarded one says why instead, see `REASONS`). */
export const STATE_LABELS = {
  pending: "join pending",
  scoped: "in caller's scope",
  published: "published",
  nothing: "nothing published",
  discarded: "discarded",
};

/** Short words for why a branch or barrier was discarded, for chips and badges. */
export const REASONS = {
  rejected: "it failed",
  cancelled: "cancelled",
  late: "past the grace period",
  atomic: "atomic batch failed",
  invalidated: "join invalidated",
  rollback: "checkpoint rolled back",
  caller: "caller discarded",
  "not-joined": "never joined",
  discarded: "discarded",
};

/** Discard reasons that are the branch's own failure, not something done to it. */
const OWN_FAILURE = new Set(["rejected", "cancelled", "late"]);

/**
 * The one CSS kind that says "published" (green); nothing else may use it.
 */
export const PUBLISHED_KIND = "published";

/**
 * @param {Publication} p
 * @returns {{kind: string, label: string, title: string}}
 */
function mark(p) {
  if (p.state === "discarded") {
    const reason = /** @type {keyof typeof REASONS} */ (p.reason || "discarded");
    return { kind: "discarded", label: `discarded: ${REASONS[reason] || REASONS.discarded}`, title: p.text };
  }
  return { kind: p.state === "published" ? PUBLISHED_KIND : p.state, label: STATE_LABELS[p.state], title: p.text };
}

/**
 * What a branch row shows about its publication: `state` and `reason` for its data
 * attributes, `dot` (its status dot's kind), and a `chip` (null while there is nothing to
 * say: the join is pending, or its writes were published).
 * @param {Run} run @param {string} path
 */
export function branchMarks(run, path) {
  const inv = run.invocations.get(path);
  const p = publicationOf(run, path);
  if (!inv || !p) return null;
  let m = mark(p);
  // A branch the join dropped because it raised: the join did not reject it, it failed.
  if (p.reason === "rejected" && inv.error) m = { ...m, label: `discarded: it raised ${errorLabel(inv.error)}` };
  const dot = inv.interrupted ? "interrupted"
    : inv.status === "fulfilled" && p.state === "discarded" ? "discarded" : inv.status;
  let chip = p.state === "discarded" || p.state === "nothing" || p.state === "scoped" ? m : null;
  // Its own failure already has a chip (the error, or how the stop caught it): the row
  // only needs to add that its writes went with it; the why stays in the tooltip.
  if (chip && OWN_FAILURE.has(p.reason || "")) chip = { ...m, label: "discarded" };
  return { state: p.state, reason: p.reason, dot, chip, badge: m, text: p.text, fields: p.fields };
}

/**
 * A barrier row's publication badge (`kind` is the badge class suffix) and its counts.
 * Before the join the counts are branch statuses; after it, how many branches published,
 * stayed in the caller's scope, published nothing or were discarded, so a green count
 * never stands for a branch whose writes were dropped.
 * @param {Run} run @param {string} id
 */
export function barrierMarks(run, id) {
  const barrier = run.barriers.get(id);
  const p = barrierPublicationOf(run, id);
  if (!barrier || !p) return null;
  let badge = mark(p);
  if (p.state === "pending") badge = { kind: "open", label: "open", title: p.text };
  else if (p.reason === "invalidated") badge = { kind: "conflict", label: "invalidated", title: p.text };
  else if (p.reason === "rollback") badge = { kind: "conflict", label: "rolled back", title: p.text };
  else if (p.reason === "not-joined") {
    badge = run.status === "interrupted" ? { kind: "interrupted", label: "interrupted", title: p.text }
      : { kind: "cancelled", label: "not joined", title: p.text };
  }
  /** @type {{kind: string, symbol: string, n: number, title: string}[]} */
  const counts = [];
  const c = barrier.counts;
  /** @param {string} kind @param {string} symbol @param {number} n @param {string} title */
  const add = (kind, symbol, n, title) => { if (n) counts.push({ kind, symbol, n, title }); };
  if (p.state === "pending") {
    add("fulfilled", "✓", c.fulfilled, `${c.fulfilled} fulfilled, waiting for the join`);
    add("rejected", "✗", c.rejected, `${c.rejected} rejected`);
    add("running", "●", c.running, `${c.running} running`);
    add("queued", "○", c.queued, `${c.queued} queued`);
  } else {
    const n = p.counts;
    add(PUBLISHED_KIND, "✓", n.published, `${n.published} published into the canonical state`);
    add("scoped", "◐", n.scoped, `${n.scoped} published into the caller's scope, waiting for its join`);
    add("nothing", "–", n.nothing, `${n.nothing} kept, with nothing to publish`);
    add("discarded", "⊘", n.discarded, `${n.discarded} discarded (${c.rejected} rejected)`);
    add("running", "●", c.running, `${c.running} still running`);
  }
  return { state: p.state, reason: p.reason, badge, counts, text: p.text, fields: p.fields };
}

/**
 * A barrier row's counts on a run read from spans, which publishes nothing: its branches
 * by status (a span ended OK, in error, or not yet), in the same shape as `barrierMarks`.
 * @param {Run} run @param {string} id
 * @returns {{kind: string, symbol: string, n: number, title: string}[]}
 */
export function spanCounts(run, id) {
  const barrier = run.barriers.get(id);
  if (!barrier) return [];
  const c = barrier.counts;
  return [
    { kind: "fulfilled", symbol: "✓", n: c.fulfilled, title: `${c.fulfilled} spans ended OK` },
    { kind: "rejected", symbol: "✗", n: c.rejected, title: `${c.rejected} spans ended in error` },
    { kind: "running", symbol: "●", n: c.running + c.queued, title: `${c.running + c.queued} spans not ended yet` },
  ].filter((n) => n.n);
}
