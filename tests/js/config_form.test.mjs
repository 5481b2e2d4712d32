// The start form's data module: a flow's config JSON Schema (as pydantic writes it) becomes
// field descriptions, and raw inputs become a config or one message per bad field.
import assert from "node:assert/strict";
import { test } from "node:test";

import { fieldsFromSchema, initialValue, parseField, readConfig } from "../../static/picoflow_web/js/config_form.js";

// FanOutFlow's schema, as GET /api/flows serves it.
const FANOUT = {
  description: "How wide the barrier is.", title: "FanOutConfig", type: "object",
  properties: {
    branches: { default: 1000, description: "Branches to fork.", maximum: 100000, minimum: 1, title: "Branches", type: "integer" },
    rate: { default: 0, maximum: 1000000, minimum: 0, title: "Rate", type: "number" },
    concurrency: { anyOf: [{ maximum: 100000, minimum: 1, type: "integer" }, { type: "null" }], default: null, title: "Concurrency" },
  },
};

// Enums through $defs, a Literal, a required string with bounds, a boolean, a date, a list.
const MIXED = {
  $defs: { Tone: { enum: ["warm", "formal"], title: "Tone", type: "string" } },
  type: "object", required: ["name"],
  properties: {
    name: { maxLength: 5, minLength: 2, title: "Name", type: "string" },
    tone: { $ref: "#/$defs/Tone", default: "warm" },
    size: { enum: [1, 2, 3], type: "integer", default: 2 },
    mode: { const: "fast", title: "Mode", type: "string" },
    shout: { default: false, title: "Shout", type: "boolean" },
    day: { anyOf: [{ format: "date", type: "string" }, { type: "null" }], default: null },
    tags: { items: { type: "string" }, type: "array", default: ["a"] },
    code: { pattern: "^[A-Z]{3}$", type: "string", default: "ABC" },
  },
};

test("no schema, no fields", () => {
  assert.deepEqual(fieldsFromSchema(null), []);
  assert.deepEqual(fieldsFromSchema({ type: "object" }), []);
});

test("FanOutFlow's schema: two numbers and an optional integer, with bounds and defaults", () => {
  const fields = fieldsFromSchema(FANOUT);
  assert.deepEqual(fields.map((f) => [f.name, f.kind, f.label, f.nullable, f.default]), [
    ["branches", "integer", "Branches", false, 1000],
    ["rate", "number", "Rate", false, 0],
    ["concurrency", "integer", "Concurrency", true, null],
  ]);
  assert.equal(fields[0].maximum, 100000);
  assert.equal(fields[0].description, "Branches to fork.");
  assert.equal(fields[2].minimum, 1);
  assert.deepEqual(fields.map(initialValue), ["1000", "0", ""]);
});

test("10,000 branches read back as a number; blank optional fields are left out", () => {
  const fields = fieldsFromSchema(FANOUT);
  assert.deepEqual(readConfig(fields, { branches: "10000", rate: "250", concurrency: "" }),
    { config: { branches: 10000, rate: 250 }, errors: {} });
});

test("out-of-range and malformed numbers get a message each", () => {
  const fields = fieldsFromSchema(FANOUT);
  const { errors } = readConfig(fields, { branches: "100001", rate: "-1", concurrency: "2.5" });
  assert.deepEqual(errors, {
    branches: "Must be at most 100,000.",
    rate: "Must be at least 0.",
    concurrency: "Must be a whole number.",
  });
  assert.equal(parseField(fields[1], "fast").error, "Must be a number.");
  assert.equal(parseField(fields[0], "0").error, "Must be at least 1.");
});

test("enums (from $defs, inline, const), booleans, dates, strings and JSON", () => {
  const fields = fieldsFromSchema(MIXED);
  const byName = Object.fromEntries(fields.map((f) => [f.name, f]));
  assert.deepEqual(fields.map((f) => f.kind), ["string", "enum", "enum", "enum", "boolean", "string", "json", "string"]);
  assert.deepEqual(byName.tone.options, ["warm", "formal"]);
  assert.equal(byName.tone.label, "Tone");
  assert.deepEqual(byName.size.options, [1, 2, 3]);
  assert.deepEqual(byName.mode.options, ["fast"]);
  assert.equal(byName.day.format, "date");
  assert.equal(byName.name.required, true);
  assert.equal(initialValue(byName.shout), false);
  assert.equal(initialValue(byName.size), "2");
  assert.equal(initialValue(byName.tags), '["a"]');

  const good = readConfig(fields, { name: "Ada", tone: '"formal"', size: "3", mode: '"fast"', shout: true,
    day: "2027-08-01", tags: '["x", "y"]', code: "XYZ" });
  assert.deepEqual(good, { config: { name: "Ada", tone: "formal", size: 3, mode: "fast", shout: true,
    day: "2027-08-01", tags: ["x", "y"], code: "XYZ" }, errors: {} });

  const bad = readConfig(fields, { name: "", tone: '"loud"', size: "9", mode: '"fast"', shout: false,
    day: "next week", tags: "[oops", code: "abc" });
  assert.deepEqual(bad.errors, {
    name: "Required.",
    tone: "Choose one of: warm, formal.",
    size: "Choose one of: 1, 2, 3.",
    day: "Must be a date (YYYY-MM-DD).",
    tags: "Must be JSON.",
    code: "Must match ^[A-Z]{3}$.",
  });
  assert.equal(parseField(byName.name, "Adalbert").error, "Must be at most 5 characters.");
  assert.equal(parseField(byName.name, "A").error, "Must be at least 2 characters.");
});

test("hostile text stays a plain string value", () => {
  const [name] = fieldsFromSchema({ type: "object", properties: { name: { type: "string" } } });
  const hostile = "<img src=x onerror=alert(1)>";
  assert.deepEqual(readConfig([name], { name: hostile }).config, { name: hostile });
});
