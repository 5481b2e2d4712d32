// @ts-check
/**
 * A barrier's join and its checkpoint: `join.reduced` (one field's contributions reduced),
 * `join.published` (the join's publication record, applied to the canonical state or
 * into its caller's scope), `join.invalidated`, `checkpoint.saved`, and `checkpoint.failed`
 * (the canonical join rolled back); `list.continued` appends the next page of a paged
 * event's list (a join's, or a cancellation's) to what that event recorded. Mirrors
 * `runtime/events/fold/join.py`.
 */

import { keep, keepAll, keepEntry, keepField, keepLength } from "./log.js";
import { anomaly, barrierOf, setField, splitUndoKey, undoKey } from "./model.js";

/** @typedef {import("./model.js").Handler} Handler */

/** What the events below change of a barrier, for the undo log (made once, not per event). */
const PUBLISHED_KEYS = ["outcome", "joinedAt", "joinedSeq", "target", "published", "discarded", "applied", "discardedAt"];
const INVALIDATED_KEYS = ["outcome", "joinedAt", "joinedSeq", "error", "provenance"];
const CHECKPOINT_FAILED_KEYS = ["outcome", "error", "checkpointFailed"];

/** @param {any} f */
function publishedField(f) {
  return {
    step: f.step, field: f.field, value: f.value ?? null,
    deleted: !!f.deleted, writer: f.writer ?? null,
  };
}

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "join.reduced"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keepLength(barrier.reductions);
    barrier.reductions.push({
      step: event.step, field: event.field, channel: event.channel,
      // A paged reduction's lists grow with its list.continued events: its own arrays.
      inputs: event.counts ? [...event.inputs] : event.inputs,
      completion_order: event.counts ? [...event.completion_order] : event.completion_order,
      result: event.result,
      initial: event.initial, seq: event.seq,
    });
  },

  "join.published"(run, event, inv) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keepAll(barrier, PUBLISHED_KEYS);
    barrier.outcome = "published";
    barrier.joinedAt = event.offset;
    barrier.joinedSeq = event.seq;
    barrier.target = event.target;
    barrier.published = (event.fields || []).map(publishedField);
    barrier.discarded = [...(event.discarded || [])];
    barrier.applied = null; // indexed when first asked for: appliedOf
    barrier.discardedAt = new Map(barrier.discarded.map((d) => [d.index, d]));
    for (const item of barrier.published) {
      if (event.target === "canonical") {
        const fields = run.state[item.step] || {};
        const key = undoKey(item.step, item.field);
        keepEntry(barrier.undo, key);
        barrier.undo.set(key, [
          Object.prototype.hasOwnProperty.call(fields, item.field), fields[item.field] ?? null]);
        keepField(run.state, item.step);
        setField(run.state, item.step, item.field, item.value, item.deleted);
      } else if (inv) {
        if (inv.drafts === inv.changes) { // its drafts were all its changes: no longer
          keep(inv, "drafts");
          inv.drafts = inv.changes.slice();
        }
        keepLength(inv.changes);
        inv.changes.push({
          seq: event.seq, step: item.step, field: item.field, value: item.value,
          deleted: item.deleted, kind: "join", barrier: barrier.id,
        });
      }
    }
  },

  "join.invalidated"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keepAll(barrier, INVALIDATED_KEYS);
    barrier.outcome = "invalidated";
    barrier.joinedAt = event.offset;
    barrier.joinedSeq = event.seq;
    barrier.error = event.error;
    barrier.provenance = [...(event.provenance || [])];
    keepLength(run.conflicts);
    run.conflicts.push(event.barrier);
  },

  "list.continued"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    const { of, name } = event;
    const items = event.items || [];
    /** @type {any[] | null} */
    let held = null;
    if (of === "join.reduced" && barrier.reductions.length && (name === "inputs" || name === "completion_order")) {
      held = barrier.reductions[barrier.reductions.length - 1][name];
    } else if (of === "join.published" && name === "discarded") {
      held = barrier.discarded;
      for (const d of items) {
        keepEntry(barrier.discardedAt, d.index);
        barrier.discardedAt.set(d.index, d);
      }
    } else if (of === "join.invalidated" && name === "provenance") {
      held = barrier.provenance;
    } else if ((of === "cancel.propagated" && (name === "running" || name === "queued"))
               || (of === "cancel.grace_expired" && name === "closed")) {
      held = barrier.cancel ? barrier.cancel[name] : null;
      const flag = name === "running" ? "cancelTold" : name === "closed" ? "lostRights" : null;
      if (flag) {
        for (const p of items) {
          const marked = run.invocations.get(p);
          if (marked) {
            keep(marked, flag);
            marked[flag] = true;
          }
        }
      }
    }
    if (!held) {
      anomaly(run, event, `barrier ${event.barrier}: no ${of} ${name} to continue`);
      return;
    }
    if (event.first !== held.length) anomaly(run, event, `barrier ${event.barrier}: ${of} ${name} continues from ${event.first}, not ${held.length}`);
    keepLength(held);
    for (const item of items) held.push(item);
  },

  "checkpoint.saved"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    keep(barrier, "checkpointRevision");
    barrier.checkpointRevision = event.revision;
  },

  "checkpoint.failed"(run, event) {
    const barrier = barrierOf(run, event);
    if (!barrier) return;
    for (const [key, [present, value]] of barrier.undo) {
      const [step, name] = splitUndoKey(key);
      keepField(run.state, step);
      setField(run.state, step, name, value, !present);
    }
    keepAll(barrier, CHECKPOINT_FAILED_KEYS);
    barrier.outcome = "invalidated";
    barrier.error = event.error;
    barrier.checkpointFailed = true;
    keepLength(run.conflicts);
    run.conflicts.push(event.barrier);
  },
};
