// @ts-check
/**
 * An invocation's model and tool calls: `model.started`, `model.delta` (what the model
 * has written of the attempt so far: `text` and `toolCalls` of its record), `model.finished`
 * (its tokens counted for the run and the invocation), `model.failed`, `tool.started`,
 * `tool.finished`. Mirrors `runtime/events/fold/calls.py`, which folds only the tokens
 * and the open attempt's streamed text; the rest is what the page draws. A call event on
 * a path the run does not know is ignored (its tokens still count for the run).
 *
 * The streamed text stays on the attempt's record after it ends: once finished the page
 * shows the whole reply instead; once failed, what the attempt wrote before it failed.
 */

import { keep, keepAll, keepLength } from "./log.js";
import { ownList } from "./model.js";

/** @typedef {import("./model.js").Invocation} Invocation */
/** @typedef {import("./model.js").Handler} Handler */

/** What a `model.delta` changes on its attempt's record. */
const DELTA_KEYS = ["text", "toolCalls", "deltas"];

/**
 * `calls` (by `index`) with a delta's tool-call chunks appended, as a new array: the
 * arguments' text grows, an `id` or `name` is set once known. As `merge_tool_chunks` in
 * `runtime/events/fold/calls.py`.
 * @param {any[]} calls @param {any[]} chunks @returns {any[]}
 */
export function mergeToolChunks(calls, chunks) {
  /** @type {Map<number, any>} */
  const merged = new Map(calls.map((c) => [c.index, { ...c }]));
  for (const chunk of chunks) {
    const index = Number.isInteger(chunk.index) ? chunk.index : 0;
    let call = merged.get(index);
    if (!call) merged.set(index, (call = { index, arguments: "" }));
    for (const key of ["id", "name"]) if (chunk[key]) call[key] = chunk[key];
    call.arguments += typeof chunk.arguments === "string" ? chunk.arguments : "";
  }
  return [...merged.values()].sort((a, b) => a.index - b.index);
}

/** @param {Invocation} inv @param {any} event */
function findModelCall(inv, event) {
  return findLast(inv.models, (m) => m.call === event.call && m.attempt === event.attempt);
}

/**
 * @template T @param {T[]} items @param {(item: T) => boolean} test @returns {T | undefined}
 */
function findLast(items, test) {
  for (let i = items.length - 1; i >= 0; i -= 1) if (test(items[i])) return items[i];
  return undefined;
}

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "model.started"(run, event, inv) {
    if (!inv) return;
    const models = ownList(inv, "models");
    keepLength(models);
    models.push({
      call: event.call, attempt: event.attempt, step: event.step, seq: event.seq,
      offset: event.offset, model: event.model, messages: event.messages || [], tools: event.tools || [],
      finished: null, failed: null, text: "", toolCalls: [], deltas: 0,
    });
  },

  "model.delta"(run, event, inv) {
    if (!inv) return;
    const call = findModelCall(inv, event);
    if (!call || call.finished || call.failed) return;
    keepAll(call, DELTA_KEYS);
    call.text += typeof event.text === "string" ? event.text : "";
    if (Array.isArray(event.tool_calls) && event.tool_calls.length) call.toolCalls = mergeToolChunks(call.toolCalls, event.tool_calls);
    call.deltas += 1;
  },

  "model.finished"(run, event, inv) {
    keep(run, "tokens");
    run.tokens = {
      input_tokens: (run.tokens.input_tokens || 0) + event.input_tokens,
      output_tokens: (run.tokens.output_tokens || 0) + event.output_tokens,
      total_tokens: (run.tokens.total_tokens || 0) + event.total_tokens,
    };
    if (!inv) return;
    keep(inv, "tokens");
    inv.tokens += event.total_tokens;
    const call = findModelCall(inv, event);
    if (call) {
      keep(call, "finished");
      call.finished = event;
    }
  },

  "model.failed"(run, event, inv) {
    if (!inv) return;
    const call = findModelCall(inv, event);
    if (call) {
      keep(call, "failed");
      call.failed = event;
    }
  },

  "tool.started"(run, event, inv) {
    if (!inv) return;
    const tools = ownList(inv, "tools");
    keepLength(tools);
    tools.push({ callId: event.call_id, name: event.name, step: event.step, args: event.args, seq: event.seq, finished: null });
  },

  "tool.finished"(run, event, inv) {
    if (!inv) return;
    const call = findLast(inv.tools, (t) => t.callId === event.call_id && !t.finished);
    if (call) {
      keep(call, "finished");
      call.finished = event;
    } else {
      const tools = ownList(inv, "tools");
      keepLength(tools);
      tools.push({ callId: event.call_id, name: event.name, step: event.step, args: null, seq: event.seq, finished: event });
    }
  },
};
