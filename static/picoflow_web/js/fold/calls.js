// @ts-check
/**
 * An invocation's model and tool calls: `model.started`, `model.finished` (its tokens
 * counted for the run and the invocation), `model.failed`, `tool.started`,
 * `tool.finished`. Mirrors `runtime/events/fold/calls.py`, which folds only the tokens;
 * the rest is what the page draws. A call event on a path the run does not know is
 * ignored (its tokens still count for the run).
 */

import { keep, keepLength } from "./log.js";

/** @typedef {import("./model.js").Invocation} Invocation */
/** @typedef {import("./model.js").Handler} Handler */

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
    keepLength(inv.models);
    inv.models.push({
      call: event.call, attempt: event.attempt, step: event.step, seq: event.seq,
      offset: event.offset, model: event.model, messages: event.messages || [], tools: event.tools || [],
      finished: null, failed: null,
    });
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
    keepLength(inv.tools);
    inv.tools.push({ callId: event.call_id, name: event.name, step: event.step, args: event.args, seq: event.seq, finished: null });
  },

  "tool.finished"(run, event, inv) {
    if (!inv) return;
    const call = findLast(inv.tools, (t) => t.callId === event.call_id && !t.finished);
    keepLength(inv.tools);
    if (call) {
      keep(call, "finished");
      call.finished = event;
    } else inv.tools.push({ callId: event.call_id, name: event.name, step: event.step, args: null, seq: event.seq, finished: event });
  },
};
