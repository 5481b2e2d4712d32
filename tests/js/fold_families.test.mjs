// The browser's fold package mirrors the Python one (runtime/events/fold/): the same
// module names, and each event family's module handles at least the event types its
// Python namesake handles (the browser's fold keeps more for the page: calls, the trail).
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { fold } from "../../static/picoflow_web/js/fold.js";
import { EVENT_TYPES } from "../../static/picoflow_web/js/fold/apply.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const JS_FOLD = join(ROOT, "static", "picoflow_web", "js", "fold");
const PY_FOLD = join(ROOT, "runtime", "events", "fold");
/** The browser's own: the replay cursor and its undo log. */
const JS_ONLY = ["log", "undo"];

const names = (dir, ext) => readdirSync(dir).filter((f) => f.endsWith(ext) && !f.startsWith("__")).map((f) => f.slice(0, -ext.length)).sort();

/** The event types of a Python module's `HANDLERS = {...}` table (none without one). */
function pythonTypes(name) {
  const source = readFileSync(join(PY_FOLD, `${name}.py`), "utf8");
  const table = source.match(/^HANDLERS\b[^=\n]*=\s*\{([\s\S]*?)^\}/m);
  return table ? [...table[1].matchAll(/"([a-z_]+\.[a-z_]+)"\s*:/g)].map((m) => m[1]) : null;
}

test("the fold modules have the Python fold's names", () => {
  assert.deepEqual(names(JS_FOLD, ".js"), [...names(PY_FOLD, ".py"), ...JS_ONLY].sort());
});

for (const name of names(PY_FOLD, ".py")) {
  const types = pythonTypes(name);
  if (types === null) continue;
  test(`fold/${name}.js handles what fold/${name}.py does`, async () => {
    const { HANDLERS } = await import(pathToFileURL(join(JS_FOLD, `${name}.js`)).href);
    assert.ok(HANDLERS, `fold/${name}.js has no HANDLERS`);
    const missing = types.filter((type) => !Object.hasOwn(HANDLERS, type));
    assert.deepEqual(missing, [], `fold/${name}.js does not handle ${missing.join(", ")}`);
  });
}

test("the fold handles every event type of the schema, and only those", () => {
  // The events that change nothing the page draws (they still take their seq).
  const notFolded = ["step.exited"];
  const schema = readFileSync(join(ROOT, "static", "picoflow_web", "schema", "events.schema.json"), "utf8");
  const types = [...new Set([...schema.matchAll(/"const":\s*"([a-z_]+\.[a-z_]+)"/g)].map((m) => m[1]))].sort();
  assert.deepEqual([...EVENT_TYPES].sort(), types.filter((type) => !notFolded.includes(type)));
});

test("a type no family handles changes nothing but the seq, an Object.prototype name too", () => {
  const run = fold(["constructor", "__proto__", "toString", "no.such"].map((type, seq) => ({ seq, type, run_id: "r" })));
  assert.equal(run.lastSeq, 3);
  assert.equal(run.version, 4);
  assert.deepEqual(run.anomalies, []);
  assert.equal(run.status, "running");
});
