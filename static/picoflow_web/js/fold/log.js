// @ts-check
/**
 * The undo log the fold writes to while the replay cursor (`undo.js`) folds: how to
 * put back, newest first, what each applied event changed. Null outside the cursor, so a
 * live fold pays one null check per change.
 *
 * Flat, one record per change with its kind last (`undo.js` reads it from its end),
 * so a log of many events stays a few arrays, not millions of small objects. Every handler
 * that changes the run model calls these before it does.
 */

/** Kinds of undo records: what `undoTo` in `undo.js` restores. */
export const UNDO = { PROP: 1, LENGTH: 2, ENTRY: 3, FIELD: 4, RUN: 5 };

/** @type {any[] | null} */
let log = null;

/**
 * Run `fn` with changes logged onto `undo`.
 * @template T @param {any[]} undo @param {() => T} fn @returns {T}
 */
export function logging(undo, fn) {
  log = undo;
  try {
    return fn();
  } finally {
    log = null;
  }
}

/** Before `obj[key]` changes. @param {any} obj @param {string} key */
export function keep(obj, key) {
  if (log) log.push(obj, key, obj[key], UNDO.PROP);
}

/** Before several properties of `obj` change. @param {any} obj @param {readonly string[]} keys */
export function keepAll(obj, keys) {
  if (!log) return;
  for (const key of keys) log.push(obj, key, obj[key], UNDO.PROP);
}

/** Before `items` grows (the fold's arrays only ever grow). @param {any[]} items */
export function keepLength(items) {
  if (log) log.push(items, items.length, UNDO.LENGTH);
}

/** Before `map.set(key, ...)`. @param {Map<any, any>} map @param {any} key */
export function keepEntry(map, key) {
  if (log) log.push(map, key, map.has(key), map.get(key), UNDO.ENTRY);
}

/** Before own property `key` of `obj` is set or deleted. @param {any} obj @param {string} key */
export function keepField(obj, key) {
  if (log) log.push(obj, key, Object.prototype.hasOwnProperty.call(obj, key), obj[key], UNDO.FIELD);
}

/**
 * Before an event is applied: what every applied event may change in the run (its
 * events, seq, version, end offset and anomalies), in one record.
 * @param {{endOffset: number, anomalies: any[]}} run
 */
export function keepRun(run) {
  if (log) log.push(run, run.endOffset, run.anomalies.length, UNDO.RUN);
}
