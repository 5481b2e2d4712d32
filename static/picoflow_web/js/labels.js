// @ts-check
/**
 * Invocation paths and barrier ids as people read them: the branch keys (or step names) of
 * the invocation and its callers, `Planner › news` for `0.1`, and `Planner › barrier 1`
 * for `0/b0`. Pure (no DOM). The page still shows the path or id beside or under the
 * label, since that is what the events and the API say.
 */

/** @typedef {import("./fold.js").Run} Run */

export const SEPARATOR = " › ";

/**
 * The label of invocation `path` in `run`: the turn is "turn"; a branch is its callers'
 * and its own branch key (its step's name where it has no key), outermost first. A part
 * of the path the run does not know (yet) reads as its path segment.
 * @param {Run} run @param {string} path @returns {string}
 */
export function labelOf(run, path) {
  if (path === "") return "turn";
  const parts = path.split(".");
  const names = [];
  for (let n = 1; n <= parts.length; n += 1) {
    const inv = run.invocations.get(parts.slice(0, n).join("."));
    names.push(inv ? inv.key || inv.step || parts[n - 1] : parts[n - 1]);
  }
  return names.join(SEPARATOR);
}

/**
 * The label of barrier `id`: who forked it, and which of its caller's barriers it is,
 * counted from 1. A root barrier names the step that called it (the turn itself is no
 * step); an unknown id reads as itself.
 * @param {Run} run @param {string} id @returns {string}
 */
export function barrierLabelOf(run, id) {
  const barrier = run.barriers.get(id);
  if (!barrier) return id;
  const caller = run.invocations.get(barrier.caller);
  const who = barrier.caller === "" ? barrier.callerStep || "turn" : labelOf(run, barrier.caller);
  const place = caller ? caller.barriers.indexOf(id) : -1;
  return `${who}${SEPARATOR}barrier ${place >= 0 ? place + 1 : id}`;
}
