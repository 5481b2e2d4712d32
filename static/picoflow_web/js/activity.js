// @ts-check
/**
 * Sequential work of one invocation, in event order: steps entered, model calls (tokens,
 * latency, retries), tool calls (arguments, result or error, the transition they made)
 * and cursor moves. A sequential turn has no barrier, so without these rows its tree and
 * lanes would be empty; with them a 14-turn booking chat reads like a fan-out does.
 * Pure (no DOM): node imports it for the tests. Everything comes from the fold's
 * per-invocation `models` / `tools`, the run's `trail` and the recorded events.
 */

import { eventBySeq, eventsOf } from "./fold.js";
import { preview } from "./format.js";

/**
 * @typedef {object} Activity
 * @property {"step" | "model" | "tool" | "cursor"} kind
 * @property {string} path  the invocation it belongs to
 * @property {number} seq  the event that started it (clicking it pins the scrubber there)
 * @property {number} t0
 * @property {number | null} t1  null while it runs, or for a point (cursor move)
 * @property {string} label  short, for the tree cell
 * @property {string} detail  secondary text (tokens and latency, result, how entered)
 * @property {string} title  everything, for the tooltip
 * @property {"ok" | "running" | "error" | "retried"} state
 */

/** @param {number | null | undefined} seconds */
function ms(seconds) {
  if (typeof seconds !== "number") return "";
  return seconds < 1 ? `${Math.round(seconds * 1000)}ms` : `${seconds.toFixed(2)}s`;
}

/**
 * The activity of the invocation at `path`, in seq order.
 * @param {import("./fold.js").Run} run @param {string} path @returns {Activity[]}
 */
export function activityOf(run, path) {
  const inv = run.invocations.get(path);
  if (!inv) return [];
  /** @type {Activity[]} */
  const out = [];
  for (const entry of run.trail) {
    if (entry.path !== path) continue;
    const e = eventBySeq(run, entry.seq);
    out.push({
      kind: "step", path, seq: entry.seq, t0: e ? e.offset : 0, t1: null,
      label: entry.step, detail: entry.how, title: `entered ${entry.step} (${entry.how}, level ${entry.level}) at #${entry.seq}`,
      state: "ok",
    });
  }
  for (const call of inv.models) {
    const end = call.finished || call.failed;
    const tokens = call.finished ? `${call.finished.total_tokens} tok` : "";
    const retried = call.failed && call.failed.retrying;
    const name = call.model && call.model.name ? call.model.name : "model";
    const attempt = call.attempt > 1 ? ` · attempt ${call.attempt}` : "";
    const latency = end ? ms(end.latency) : "";
    const failure = call.failed ? `failed: ${preview(call.failed.error && (call.failed.error.message || call.failed.error.type), 60, true)}${retried ? " (retrying)" : ""}` : "";
    const detail = [tokens, latency, failure].filter(Boolean).join(" · ");
    out.push({
      kind: "model", path, seq: call.seq, t0: call.offset, t1: end ? end.offset : null,
      label: `${name} call ${call.call}${attempt}`, detail,
      title: `model call ${call.call}, attempt ${call.attempt} in ${call.step} (${name})${call.finished ? `: ${call.finished.input_tokens} in + ${call.finished.output_tokens} out = ${call.finished.total_tokens} tokens` : ""}${latency ? `, ${latency}` : ""}${failure ? `; ${failure}` : ""}`,
      state: call.failed ? (retried ? "retried" : "error") : end ? "ok" : "running",
    });
  }
  for (const call of inv.tools) {
    const started = eventBySeq(run, call.seq);
    const end = call.finished;
    const args = call.args === null || call.args === undefined ? "" : preview(call.args, 60, true);
    const transition = end && end.transition ? ` → ${end.transition.kind}${end.transition.target ? ` ${end.transition.target}` : ""}` : "";
    const result = end ? `${end.status === "success" ? "" : "error: "}${preview(end.result, 60, true)}${transition}` : "";
    out.push({
      kind: "tool", path, seq: call.seq, t0: started ? started.offset : end ? end.offset : 0, t1: end ? end.offset : null,
      label: `${call.name}(${args})`, detail: result,
      title: `tool ${call.name} in ${call.step}\nargs: ${preview(call.args, 400)}${end ? `\n${end.status}: ${preview(end.result, 400)}${transition}\noutcome: ${end.outcome}` : "\nrunning"}`,
      state: end ? (end.status === "success" ? "ok" : "error") : "running",
    });
  }
  for (const e of eventsOf(run, inv)) {
    if (e.type !== "cursor.moved") continue;
    const seq = e.seq;
    out.push({
      kind: "cursor", path, seq, t0: e.offset, t1: null,
      label: `cursor → ${e.to_step}`, detail: e.from_step ? `from ${e.from_step}` : "",
      title: `the durable cursor moved from ${e.from_step ?? "nowhere"} to ${e.to_step} at #${seq}`, state: "ok",
    });
  }
  out.sort((a, b) => a.seq - b.seq);
  // A step lasts until the next step of the same invocation is entered (or its end).
  let lastStep = null;
  for (const item of out) {
    if (item.kind !== "step") continue;
    if (lastStep) lastStep.t1 = item.t0;
    lastStep = item;
  }
  if (lastStep) lastStep.t1 = inv.finished ?? (path === "" && run.status !== "running" ? run.endOffset : null);
  return out;
}
