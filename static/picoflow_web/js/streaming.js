// @ts-check
/**
 * What a model is writing: an invocation's open model attempt and the text its
 * `model.delta` events brought so far, as the lane and the inspector show it. Pure (no
 * DOM): it reads the fold, so a replay stopped inside an attempt shows what was written
 * up to that event.
 *
 * An attempt's record keeps its streamed text once it ends (`fold/calls.js`): a finished
 * attempt is shown by its reply, a failed one by what it wrote before it failed.
 */

/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").ModelCall} ModelCall */
/** @typedef {import("./fold.js").Run} Run */

/** How many characters of the text being written a lane shows (its end). */
export const LANE_TAIL = 60;

/**
 * The attempt `inv` has open that has written something, or null.
 * @param {Invocation} inv @returns {ModelCall | null}
 */
export function openStream(inv) {
  const call = inv.models.length ? inv.models[inv.models.length - 1] : null;
  if (!call || call.finished || call.failed) return null;
  return call.text || call.toolCalls.length ? call : null;
}

/**
 * The open attempts that have written something, by invocation path, in the shape of
 * `tests/golden/export_fold.py`'s `streams`.
 * @param {Run} run
 */
export function openStreams(run) {
  /** @type {Record<string, {step: string, call: number, attempt: number, text: string, tool_calls: any[]}>} */
  const out = {};
  for (const [path, inv] of run.invocations) {
    const call = openStream(inv);
    if (call) out[path] = { step: call.step, call: call.call, attempt: call.attempt, text: call.text, tool_calls: call.toolCalls };
  }
  return out;
}

/**
 * Everything an attempt wrote, as one text: its text, then each tool call being written
 * as `name(arguments` (the arguments' JSON so far).
 * @param {{text: string, toolCalls: any[]}} call
 */
export function writtenText(call) {
  const calls = call.toolCalls.map((c) => `${c.name || "tool"}(${c.arguments}`);
  return [call.text, ...calls].filter(Boolean).join(" ");
}

/**
 * The end of `text` on one line: whitespace runs become one space, and only the last `n`
 * characters are kept, after an ellipsis.
 * @param {string} text @param {number} [n]
 */
export function tail(text, n = LANE_TAIL) {
  // Only the end is read: a long answer costs no more per frame than a short one.
  const window = 8 * n;
  const cut = text.length > window;
  const end = cut ? text.slice(text.length - window).replace(/^[\uDC00-\uDFFF]/, "") : text;
  const line = end.replace(/\s+/g, " ").trimStart();
  const chars = Array.from(line); // by code point: a cut never splits a surrogate pair
  if (chars.length > n) return `…${chars.slice(chars.length - n).join("")}`;
  return cut ? `…${line}` : line;
}

/**
 * What an invocation's lane shows while its model writes: the end of the text and when
 * the attempt started (where the label sits), or null when nothing is being written.
 * @param {Invocation} inv
 * @returns {{text: string, offset: number, call: number, attempt: number} | null}
 */
export function laneStream(inv) {
  const call = openStream(inv);
  if (!call) return null;
  return { text: tail(writtenText(call)), offset: call.offset, call: call.call, attempt: call.attempt };
}

/**
 * How the inspector shows an attempt's streamed text: `writing` while it is open,
 * `failed` for what a failed attempt wrote, null when there is nothing to show (nothing
 * streamed, or it finished: its reply is the whole text).
 * @param {ModelCall} call @returns {{state: "writing" | "failed", text: string} | null}
 */
export function streamedView(call) {
  if (call.finished || !(call.text || call.toolCalls.length)) return null;
  return { state: call.failed ? "failed" : "writing", text: writtenText(call) };
}
