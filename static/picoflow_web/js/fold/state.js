// @ts-check
/**
 * Writes to the session state (`state.replaced`, `state.removed`, `state.contributed`).
 * Mirrors `runtime/events/fold/state.py`.
 *
 * A write that is not a draft changes the canonical state. A draft is a branch's own: it
 * joins the invocation's changes (what its view overlays on its fork-time base) and its
 * drafts (what its siblings could not see). A contribution's event carries the resulting
 * value, unless it names its built-in channel: then the fold reduces it (`reduce.js`).
 */

import { keep, keepField, keepLength } from "./log.js";
import { NO_ITEMS, anomaly, ownList, setField } from "./model.js";
import { appendTip, contributed, grownChange } from "./reduce.js";

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Invocation} Invocation */
/** @typedef {import("./model.js").Change} Change */
/** @typedef {import("./model.js").Handler} Handler */

/**
 * A write to the canonical state.
 * @param {Run} run @param {any} event @param {any} value @param {boolean} deleted
 */
function canonical(run, event, value, deleted) {
  keepField(run.state, event.step);
  setField(run.state, event.step, event.field, value, deleted);
}

/**
 * A draft of invocation `inv`: its own change, which its siblings cannot see. Its drafts
 * are its changes until a join publishes into its scope (`join.js` parts them then): one
 * list, not two with the same items, for each branch of a wide fork.
 * @param {Invocation} inv @param {Change} change
 */
function draft(inv, change) {
  if (inv.drafts === NO_ITEMS && inv.changes.length === 0) {
    keep(inv, "drafts");
    inv.drafts = inv.changes;
  }
  keepLength(inv.changes);
  inv.changes.push(change);
  if (inv.drafts === inv.changes) return;
  const drafts = ownList(inv, "drafts");
  keepLength(drafts);
  drafts.push(change);
}

/** A draft the run cannot place. @param {Run} run @param {any} event */
function unknownDraft(run, event) {
  anomaly(run, event, `draft on unknown invocation ${event.path || ""}`);
}

/**
 * A plain draft change of `event`'s field.
 * @param {any} event @param {any} value @param {boolean} deleted @returns {Change}
 */
function draftChange(event, value, deleted) {
  return { seq: event.seq, step: event.step, field: event.field, value, deleted, kind: "draft", barrier: null };
}

/**
 * A branch's draft change for a contribution it made (the event is a draft of `inv`).
 * An `append` the fold reduces becomes a `grownChange`: pushed onto the list of the
 * branch's previous append to the field when that one ends its list, else onto a copy
 * of the value before (made once; the next appends push onto it).
 * @param {Run} run @param {Invocation} inv @param {any} event @returns {Change}
 */
function contributionChange(run, inv, event) {
  if (event.channel === "append") {
    const tip = appendTip(inv.changes, event.step, event.field);
    if (tip) {
      tip.push(event.value);
      return grownChange(event.seq, event.step, event.field, tip, tip.length);
    }
  }
  const value = contributed(run, inv, event);
  if (event.channel === "append" && Array.isArray(value)) {
    return grownChange(event.seq, event.step, event.field, value, value.length);
  }
  return draftChange(event, value, false);
}

/** @type {Record<string, Handler>} */
export const HANDLERS = {
  "state.replaced"(run, event, inv) {
    if (!event.draft) canonical(run, event, event.value, false);
    else if (inv) draft(inv, draftChange(event, event.value, false));
    else unknownDraft(run, event);
  },

  "state.removed"(run, event, inv) {
    if (!event.draft) canonical(run, event, null, true);
    else if (inv) draft(inv, draftChange(event, null, true));
    else unknownDraft(run, event);
  },

  "state.contributed"(run, event, inv) {
    if (!event.draft) canonical(run, event, contributed(run, inv, event), false);
    else if (inv) draft(inv, contributionChange(run, inv, event));
    else unknownDraft(run, event);
  },
};
