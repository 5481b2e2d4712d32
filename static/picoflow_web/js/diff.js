// @ts-check
/**
 * State diffs: what changed between two canonical states (step -> field -> value), field by
 * field, with nested JSON diffed structurally so a changed budget inside a 40-key object
 * reads as one line, not as two walls of JSON. Pure (no DOM): node imports it for the tests.
 *
 * A string holding a JSON object or array (flows often keep a structured answer as its
 * JSON text, e.g. HotelFlow's `ExploreStep.json`) is diffed as the value it encodes when
 * both sides parse; otherwise it is compared as text.
 */

/**
 * One difference. `path` is where inside the field's value it is ([] for the field
 * itself); `before`/`after` are undefined on the side where it does not exist.
 * @typedef {{step: string, field: string, path: (string | number)[],
 *   kind: "added" | "removed" | "changed", before: any, after: any}} Difference
 */

/** Past this many differences in one field the rest are summed up as one change. */
export const FIELD_LIMIT = 200;

const own = (/** @type {object} */ o, /** @type {string} */ k) => Object.prototype.hasOwnProperty.call(o, k);
const isObject = (/** @type {any} */ v) => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * The value a string encodes when it is JSON text of an object or array, else undefined.
 * @param {any} value
 */
export function structured(value) {
  if (typeof value !== "string") return undefined;
  const text = value.trim();
  if (!(text.startsWith("{") || text.startsWith("["))) return undefined;
  try {
    const parsed = JSON.parse(text);
    return parsed !== null && typeof parsed === "object" ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Differences inside one value, as [path, kind, before, after] leaves.
 * @param {any} a @param {any} b @param {(string | number)[]} path
 * @param {{path: (string | number)[], kind: "added" | "removed" | "changed", before: any, after: any}[]} out
 */
export function diffValue(a, b, path = [], out = []) {
  if (out.length >= FIELD_LIMIT) return out;
  if (Object.is(a, b)) return out;
  const sa = structured(a);
  const sb = structured(b);
  if (sa !== undefined && sb !== undefined) return diffValue(sa, sb, path, out);
  if (Array.isArray(a) && Array.isArray(b)) {
    const n = Math.max(a.length, b.length);
    for (let i = 0; i < n; i += 1) {
      if (i >= a.length) out.push({ path: [...path, i], kind: "added", before: undefined, after: b[i] });
      else if (i >= b.length) out.push({ path: [...path, i], kind: "removed", before: a[i], after: undefined });
      else diffValue(a[i], b[i], [...path, i], out);
    }
    return out;
  }
  if (isObject(a) && isObject(b)) {
    for (const k of Object.keys(a)) {
      if (!own(b, k)) out.push({ path: [...path, k], kind: "removed", before: a[k], after: undefined });
      else diffValue(a[k], b[k], [...path, k], out);
    }
    for (const k of Object.keys(b)) {
      if (!own(a, k)) out.push({ path: [...path, k], kind: "added", before: undefined, after: b[k] });
    }
    return out;
  }
  out.push({ path, kind: "changed", before: a, after: b });
  return out;
}

/**
 * Every difference between two states, in step then field order of `after` (steps and
 * fields only in `before` last). A step or field present on one side only is one
 * added/removed difference with path [].
 * @param {Record<string, Record<string, any>> | null | undefined} before
 * @param {Record<string, Record<string, any>> | null | undefined} after
 * @returns {Difference[]}
 */
export function diffState(before, after) {
  const a = before || {};
  const b = after || {};
  /** @type {Difference[]} */
  const out = [];
  const steps = [...Object.keys(b), ...Object.keys(a).filter((s) => !own(b, s))];
  for (const step of steps) {
    const fa = own(a, step) ? a[step] || {} : {};
    const fb = own(b, step) ? b[step] || {} : {};
    const fields = [...Object.keys(fb), ...Object.keys(fa).filter((f) => !own(fb, f))];
    for (const field of fields) {
      const inA = own(fa, field);
      const inB = own(fb, field);
      if (!inA) out.push({ step, field, path: [], kind: "added", before: undefined, after: fb[field] });
      else if (!inB) out.push({ step, field, path: [], kind: "removed", before: fa[field], after: undefined });
      else for (const d of diffValue(fa[field], fb[field])) out.push({ step, field, ...d });
    }
  }
  return out;
}

/**
 * How a difference's place reads: `ExploreStep.json › maxBudget`, `… › roomType[0]`.
 * @param {Difference} d
 */
export function differencePlace(d) {
  let text = `${d.step}.${d.field}`;
  let first = true;
  for (const part of d.path) {
    if (typeof part === "number") text += `[${part}]`;
    else {
      text += `${first ? " › " : "."}${part}`;
      first = false;
    }
  }
  return text;
}

/**
 * Counts by kind, for a summary line.
 * @param {Difference[]} diffs
 */
export function diffCounts(diffs) {
  const counts = { added: 0, removed: 0, changed: 0 };
  for (const d of diffs) counts[d.kind] += 1;
  return counts;
}
