// @ts-check
/**
 * The critical path of a join (pure): the chain of branches that decided when it could run.
 *
 * A join runs once its last branch has finished, so that branch is what it waited on; if
 * that branch opened barriers of its own, the one it joined last held it up in the same way,
 * and so on down. Only recorded events are read: a branch's finish is the offset of its
 * `branch.fulfilled` / `branch.rejected`, a join's time that of its `join.published` /
 * `join.invalidated`. A join that has not run (or a branch that never reported an end) stops
 * the chain, and `decided` says so, so the page never claims a wait the events do not show.
 *
 * Ties on the offset (clocks are coarse on some machines) go to the later seq: of two
 * branches whose end events carry the same time, the one reported second finished last.
 */

import { barrierNameOf } from "./labels.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./fold.js").Invocation} Invocation */

/**
 * @typedef {object} CriticalStep
 * @property {string} barrier  the barrier whose join waited
 * @property {string} path  the branch it waited on (finished last)
 * @property {string} label  "1:1 (west)"
 * @property {string} status
 * @property {number} finished  offset of its end event
 * @property {number} joinedAt  offset of that barrier's join
 */

/**
 * @typedef {object} CriticalPath
 * @property {string} barrier
 * @property {boolean} decided  every join on the chain ran (false: the chain stops early)
 * @property {CriticalStep[]} steps  outermost first
 * @property {string[]} paths  the branches of `steps`, in order
 * @property {string} sentence
 */

/**
 * @param {Run} run @param {string} barrierId @returns {CriticalPath | null}
 */
export function criticalPath(run, barrierId) {
  const first = run.barriers.get(barrierId);
  if (!first) return null;
  /** @type {CriticalStep[]} */
  const steps = [];
  let decided = true;
  /** @type {Barrier | undefined} */
  let barrier = first;
  const seen = new Set();
  while (barrier && !seen.has(barrier.id)) {
    seen.add(barrier.id);
    if (barrier.joinedAt === null) {
      decided = false;
      break;
    }
    const last = lastFinished(run, barrier);
    if (!last) {
      decided = false;
      break;
    }
    steps.push({
      barrier: barrier.id, path: last.path, label: label(last), status: last.status,
      finished: /** @type {number} */ (last.finished), joinedAt: barrier.joinedAt,
    });
    barrier = lastJoined(run, last);
  }
  return { barrier: barrierId, decided, steps, paths: steps.map((s) => s.path), sentence: sentence(run, first, steps, decided) };
}

/**
 * The branch of `barrier` whose end event came last (null if none reported an end).
 * @param {Run} run @param {Barrier} barrier @returns {Invocation | null}
 */
function lastFinished(run, barrier) {
  /** @type {Invocation | null} */
  let best = null;
  for (const path of barrier.branches) {
    const inv = run.invocations.get(path);
    if (!inv || inv.finished === null) continue;
    if (best === null || inv.finished > /** @type {number} */ (best.finished)
      || (inv.finished === best.finished && (inv.finishedSeq ?? -1) > (best.finishedSeq ?? -1))) best = inv;
  }
  return best;
}

/**
 * Of the barriers `inv` opened, the one whose join ran last before it finished.
 * @param {Run} run @param {Invocation} inv @returns {Barrier | undefined}
 */
function lastJoined(run, inv) {
  /** @type {Barrier | undefined} */
  let best;
  for (const id of inv.barriers) {
    const b = run.barriers.get(id);
    if (!b || b.joinedSeq === null) continue;
    if (inv.finishedSeq !== null && b.joinedSeq > inv.finishedSeq) continue;
    if (!best || /** @type {number} */ (b.joinedSeq) > /** @type {number} */ (best.joinedSeq)) best = b;
  }
  return best;
}

/** @param {Invocation} inv */
function label(inv) {
  return `${inv.path} (${inv.key || inv.step})`;
}

/**
 * @param {Run} run @param {Barrier} barrier @param {CriticalStep[]} steps @param {boolean} decided
 */
function sentence(run, barrier, steps, decided) {
  const name = barrierNameOf(run, barrier.id);
  if (!steps.length) {
    if (barrier.joinedAt === null) return `The join of ${name} has not run yet.`;
    return `The join of ${name} waited on no branch: none reported an end.`;
  }
  let text = `The join of ${name} waited on ${steps[0].label}`;
  for (const step of steps.slice(1)) text += `, which waited on ${step.label}`;
  if (!decided) text += "; the join below it has not run yet";
  return `${text}.`;
}
