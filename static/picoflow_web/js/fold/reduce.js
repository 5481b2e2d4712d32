// @ts-check
/**
 * The built-in reducers as the fold applies them, one `state.contributed` at a time.
 *
 * A contribution whose event names its `channel` ("sum", "append", "keyed_by_branch",
 * "merge_record") does not carry the field's reduced value: the fold reduces the
 * contribution onto the value the contributor's view held just before. The same rules as
 * `runtime/events/channels.py`, applied as `runtime/events/fold/reduce.py` applies them
 * (the goldens check both folds against the runtime). Pure.
 */

import { anomaly } from "./model.js";
import { fieldBefore } from "./views.js";

/** @typedef {import("./model.js").Run} Run */
/** @typedef {import("./model.js").Invocation} Invocation */

/** @type {Record<string, () => any>} */
const EMPTY = { sum: () => 0, append: () => [], keyed_by_branch: () => ({}), merge_record: () => ({}) };

/** Whether `value` is the marker an event carries for a value too large to carry. @param {any} value */
export function isTruncated(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) && value.truncated === true && "preview" in value;
}

/** @param {any} value */
const isNumber = (value) => typeof value === "number" && Number.isFinite(value);

/** @param {any} value */
const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

/**
 * The field after one contribution `value` of the branch keyed `key`, reduced by the
 * built-in `channel` onto `before` (the channel's empty value when absent). A field only
 * ever carried truncated stays that marker. Throws for a value the reducer refuses.
 * @param {string} channel @param {boolean} present @param {any} before @param {any} value @param {string} key
 */
export function reduceOne(channel, present, before, value, key) {
  const empty = EMPTY[channel];
  if (!empty) throw new Error(`no fold for channel ${JSON.stringify(channel)}`);
  const acc = present ? before : empty();
  if (isTruncated(acc)) return acc;
  switch (channel) {
    case "sum":
      if (!isNumber(acc) || !isNumber(value)) throw new Error("sum() channel needs numbers");
      return acc + value;
    case "append":
      if (!Array.isArray(acc)) throw new Error("append() channel needs a list");
      return [...acc, value];
    case "keyed_by_branch":
      if (!isObject(acc)) throw new Error("keyed_by_branch() channel needs an object");
      return { ...acc, [key]: value };
    default:
      if (!isObject(acc) || !isObject(value)) throw new Error("merge_record() channel merges objects only");
      return { ...acc, ...value };
  }
}

/**
 * Draft changes whose value is the first `length` items of `items`, a list the same
 * branch's later appends extend in place.
 * @type {WeakMap<object, {items: any[], length: number}>}
 */
const GROWN = new WeakMap();

/**
 * A branch's draft change of an `append` field holding its first `length` items of
 * `items`. The branch's next contribution to the field pushes onto `items` instead of
 * copying it (see `appendTip`): k contributions keep one list, not k growing copies, so
 * folding them costs O(k) time and memory, not O(k²). Its value is made when first read
 * (and kept), so a view reads only the changes it shows.
 * @param {number} seq @param {string} step @param {string} field @param {any[]} items
 * @param {number} length
 */
export function grownChange(seq, step, field, items, length) {
  /** @type {any[] | null} */
  let value = null;
  const change = {
    seq, step, field,
    get value() { return (value ??= items.slice(0, length)); },
    deleted: false, kind: /** @type {"draft"} */ ("draft"), barrier: null,
  };
  GROWN.set(change, { items, length });
  return change;
}

/**
 * The list a branch's next append to `step.field` may push onto: the one its last change
 * of the field holds, when that change is a `grownChange` and still ends the list (after
 * an undo it may not: the list then holds items of changes undone).
 * @param {{step: string, field: string}[]} changes the branch's own changes
 * @param {string} step @param {string} field
 */
export function appendTip(changes, step, field) {
  for (let i = changes.length - 1; i >= 0; i -= 1) {
    const c = changes[i];
    if (c.step !== step || c.field !== field) continue;
    const grown = GROWN.get(c);
    return grown && grown.items.length === grown.length ? grown.items : null;
  }
  return null;
}

/**
 * A contribution's value in its view: what the event carries, or, when it names its
 * built-in channel, the contribution reduced onto the view's value just before.
 * @param {Run} run @param {Invocation | undefined} inv @param {any} event
 */
export function contributed(run, inv, event) {
  if (!event.channel || !event.draft || !inv) return event.result;
  const before = fieldBefore(run, inv.path, event.step, event.field, event.seq);
  try {
    return reduceOne(event.channel, before.present, before.value, event.value, inv.key);
  } catch (error) {
    anomaly(run, event, `contribution to ${event.step}.${event.field}: ${/** @type {Error} */ (error).message}`);
    return null;
  }
}
