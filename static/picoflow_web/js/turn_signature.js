// @ts-check
/**
 * When the turn's own inspector panel needs drawing again, as a string that changes when
 * what it shows does. Pure (no DOM): node imports it for the tests.
 */

/** A number for each object it is asked about, the same while the object lives. */
const stamps = new WeakMap();
let stamped = 0;
/** @param {object} value */
function stamp(value) {
  let n = stamps.get(value);
  if (n === undefined) stamps.set(value, n = ++stamped);
  return n;
}

/**
 * What the turn's inspector (`rootInspector`) shows: its facts, the canonical state, its
 * calls and its events. Not the run's version: most events of a wide fork are its
 * branches', which that panel does not show, and rebuilding it for each of them is most
 * of what the page would build and throw away while such a run streams. A step's fields
 * are a new object whenever one of them is written (`setField`), so the state is keyed
 * by identity, not read through.
 * @param {import("./fold.js").Run} view
 */
export function turnSignature(view) {
  const root = view.invocations.get("");
  const t = view.tokens;
  let state = "";
  for (const step of Object.keys(view.state)) state += `${step}:${stamp(view.state[step])},`;
  return [view.status, view.conflicts.length, view.cursor, t.total_tokens, t.input_tokens, t.output_tokens,
    view.barriers.size, view.branchCount, view.reply ? 1 : 0, view.error ? 1 : 0, view.interruption?.seq,
    view.cancellation?.seq, view.unsaved.length, view.trail.length, view.anomalies.length, view.overflows.length,
    root ? root.eventCount : -1, state].join("|");
}
