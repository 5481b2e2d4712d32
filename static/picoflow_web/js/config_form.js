// @ts-check
/**
 * A flow's config JSON Schema (as pydantic writes it: `properties`, `required`, `$defs` and
 * `$ref`, `anyOf` with `null` for optional fields, `enum`/`const`, numeric and string
 * bounds) turned into start-form field descriptions, and the form's raw values read back
 * into a config object with one message per bad field. Data only: no DOM.
 *
 * Kinds: "integer", "number", "string" (a `format: "date"` string is a date input),
 * "boolean", "enum" (the options keep their JSON types), and "json" for anything else
 * (objects, arrays: typed as JSON text).
 */

/**
 * @typedef {{
 *   name: string, label: string, description: string,
 *   kind: "integer" | "number" | "string" | "boolean" | "enum" | "json",
 *   required: boolean, nullable: boolean, hasDefault: boolean, default: any,
 *   options: any[], format: string,
 *   minimum?: number, maximum?: number, exclusiveMinimum?: number, exclusiveMaximum?: number,
 *   minLength?: number, maxLength?: number, pattern?: string,
 * }} FieldSpec
 */

/** @param {any} node @param {Record<string, any>} defs @returns {any} */
function resolve(node, defs, depth = 0) {
  if (!node || typeof node !== "object" || depth > 20) return node || {};
  const { $ref, ...rest } = node;
  if (typeof $ref === "string") {
    const target = defs[$ref.replace(/^#\/\$defs\//, "")];
    return resolve({ ...(target || {}), ...rest }, defs, depth + 1);
  }
  return node;
}

/**
 * The fields of a config schema, in property order.
 * @param {any} schema  JSON Schema of an object (null: no fields)
 * @returns {FieldSpec[]}
 */
export function fieldsFromSchema(schema) {
  if (!schema || typeof schema !== "object") return [];
  const defs = schema.$defs || schema.definitions || {};
  const top = resolve(schema, defs);
  const required = new Set(Array.isArray(top.required) ? top.required : []);
  const properties = top.properties && typeof top.properties === "object" ? top.properties : {};
  return Object.entries(properties).map(([name, raw]) => describeField(name, raw, required.has(name), defs));
}

/**
 * @param {string} name @param {any} raw @param {boolean} required
 * @param {Record<string, any>} defs @returns {FieldSpec}
 */
function describeField(name, raw, required, defs) {
  let node = resolve(raw, defs);
  let nullable = false;
  const union = node.anyOf || node.oneOf;
  if (Array.isArray(union)) {
    const kept = union.filter((/** @type {any} */ u) => resolve(u, defs).type !== "null");
    nullable = kept.length < union.length;
    if (kept.length === 1) {
      const { anyOf, oneOf, ...outer } = node;
      void anyOf; void oneOf;
      node = { ...resolve(kept[0], defs), ...outer };
    }
  }
  if (Array.isArray(node.allOf) && node.allOf.length === 1) node = { ...resolve(node.allOf[0], defs), ...node };
  if (Array.isArray(node.type)) {
    nullable = nullable || node.type.includes("null");
    const types = node.type.filter((/** @type {string} */ t) => t !== "null");
    node = { ...node, type: types.length === 1 ? types[0] : undefined };
  }
  /** @type {FieldSpec["kind"]} */
  let kind = "json";
  /** @type {any[]} */
  let options = [];
  if (Array.isArray(node.enum)) {
    kind = "enum";
    options = node.enum.filter((/** @type {any} */ v) => v !== null);
    nullable = nullable || node.enum.includes(null);
  } else if ("const" in node) {
    kind = "enum";
    options = [node.const];
  } else if (["integer", "number", "string", "boolean"].includes(node.type)) {
    kind = node.type;
  }
  const hasDefault = "default" in node || "default" in raw;
  /** @type {FieldSpec} */
  const field = {
    name, label: String(node.title || raw.title || name), description: String(node.description || raw.description || ""),
    kind, required, nullable, hasDefault, default: "default" in raw ? raw.default : node.default,
    options, format: typeof node.format === "string" ? node.format : "",
  };
  for (const key of /** @type {const} */ (["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength"])) {
    if (typeof node[key] === "number") field[key] = node[key];
  }
  if (typeof node.pattern === "string") field.pattern = node.pattern;
  return field;
}

/**
 * What a field's input shows before the user types: its default, as text (a checkbox's
 * checked state for booleans, the option's JSON for an enum).
 * @param {FieldSpec} field @returns {string | boolean}
 */
export function initialValue(field) {
  const value = field.default;
  if (field.kind === "boolean") return value === true;
  if (value === undefined || value === null) return "";
  if (field.kind === "enum") return JSON.stringify(value);
  if (field.kind === "json") return JSON.stringify(value);
  return String(value);
}

/** Whether a blank input may be left out of the config. @param {FieldSpec} field */
const optional = (field) => !field.required || field.hasDefault || field.nullable;

/** @param {number} n */
const show = (n) => (Number.isInteger(n) ? n.toLocaleString("en-US") : String(n));

/**
 * One field's value from its raw input: `{value}`, `{omit: true}` (blank and optional:
 * the flow's default applies) or `{error}` (what is wrong, to show by the field).
 * @param {FieldSpec} field @param {string | boolean} raw
 * @returns {{value?: any, omit?: boolean, error?: string}}
 */
export function parseField(field, raw) {
  if (field.kind === "boolean") return { value: raw === true || raw === "true" || raw === "on" };
  const text = typeof raw === "string" ? raw : String(raw ?? "");
  if (text.trim() === "") {
    return optional(field) ? { omit: true } : { error: "Required." };
  }
  if (field.kind === "enum") {
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      value = text;
    }
    if (!field.options.some((o) => o === value)) return { error: `Choose one of: ${field.options.map(String).join(", ")}.` };
    return { value };
  }
  if (field.kind === "integer" || field.kind === "number") {
    const trimmed = text.trim();
    const number = Number(trimmed);
    if (field.kind === "integer" && !/^[+-]?\d+$/.test(trimmed)) return { error: "Must be a whole number." };
    if (!Number.isFinite(number)) return { error: "Must be a number." };
    if (field.minimum !== undefined && number < field.minimum) return { error: `Must be at least ${show(field.minimum)}.` };
    if (field.maximum !== undefined && number > field.maximum) return { error: `Must be at most ${show(field.maximum)}.` };
    if (field.exclusiveMinimum !== undefined && number <= field.exclusiveMinimum) return { error: `Must be more than ${show(field.exclusiveMinimum)}.` };
    if (field.exclusiveMaximum !== undefined && number >= field.exclusiveMaximum) return { error: `Must be less than ${show(field.exclusiveMaximum)}.` };
    return { value: number };
  }
  if (field.kind === "string") {
    const length = [...text].length;
    if (field.minLength !== undefined && length < field.minLength) return { error: `Must be at least ${field.minLength} character${field.minLength === 1 ? "" : "s"}.` };
    if (field.maxLength !== undefined && length > field.maxLength) return { error: `Must be at most ${field.maxLength} characters.` };
    if (field.format === "date" && !/^\d{4}-\d{2}-\d{2}$/.test(text)) return { error: "Must be a date (YYYY-MM-DD)." };
    if (field.pattern !== undefined) {
      let re = null;
      try {
        re = new RegExp(field.pattern, "u");
      } catch {
        re = null; // a pattern JavaScript cannot read: the server checks it
      }
      if (re && !re.test(text)) return { error: `Must match ${field.pattern}.` };
    }
    return { value: text };
  }
  try {
    return { value: JSON.parse(text) };
  } catch {
    return { error: "Must be JSON." };
  }
}

/**
 * The config the raw inputs make, and one message per bad field (empty when all are good).
 * @param {FieldSpec[]} fields @param {Record<string, string | boolean>} raws
 * @returns {{config: Record<string, any>, errors: Record<string, string>}}
 */
export function readConfig(fields, raws) {
  /** @type {Record<string, any>} */
  const config = {};
  /** @type {Record<string, string>} */
  const errors = {};
  for (const field of fields) {
    const parsed = parseField(field, raws[field.name] ?? "");
    if (parsed.error) errors[field.name] = parsed.error;
    else if (!parsed.omit) config[field.name] = parsed.value;
  }
  return { config, errors };
}
