// Every front-end module loads (no syntax or import errors), and the layering holds
// (layering.mjs): data modules touch no DOM and import no DOM module, the fold package is
// entered through fold.js, no import cycle; runtime values reach the DOM only through
// textContent. Which modules are data modules is derived from the files.
import assert from "node:assert/strict";
import { appendFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

import { DOM_MODULES, JS, isDom, layeringProblems, modulesIn, stripComments } from "./layering.mjs";

const ROOT = join(JS, "..", "..", "..");
const modules = modulesIn(JS);
const data = modules.filter((name) => !isDom(name));

test("the modules are found in the files and sorted into data and DOM modules", () => {
  for (const name of ["fold.js", "fold/apply.js", "fold/turn.js", "fold/undo.js", "layout.js", "store.js", "socket.js"]) {
    assert.ok(data.includes(name), `${name} is not a data module`);
  }
  for (const name of [...DOM_MODULES, "run_ui.js", "rows_ui.js"]) {
    assert.ok(modules.includes(name) && !data.includes(name), `${name} is not a DOM module`);
  }
});

test("the layering holds", () => {
  assert.deepEqual(layeringProblems(JS), []);
});

test("the layering test fails on planted violations", (t) => {
  const copy = mkdtempSync(join(tmpdir(), "pf-layering-"));
  t.after(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(JS, copy, { recursive: true });
  appendFileSync(join(copy, "fold", "turn.js"), "\nexport const title = () => document.title;\n");
  appendFileSync(join(copy, "fold", "io.js"), '\nimport { h } from "../dom.js";\n');
  writeFileSync(join(copy, "sneaky.js"), 'export const saved = () => globalThis.localStorage.getItem("x");\n');
  appendFileSync(join(copy, "layout.js"), '\nimport { anomaly } from "./fold/model.js";\n');
  appendFileSync(join(copy, "fold", "model.js"), '\nimport "./apply.js";\n');
  appendFileSync(join(copy, "labels.js"), '\n// document.title in a comment is no use of the document\nexport const u = "http://x"; export const el = (/** @type {any} */ e) => e.innerHTML;\n');
  const problems = layeringProblems(copy);
  const expect = [
    /^fold\/turn\.js is a data module and uses document\./,
    /^fold\/io\.js is a data module and imports the DOM module dom\.js$/,
    /^fold\/io\.js is in the fold package and imports dom\.js from outside it$/,
    /^sneaky\.js is a data module and uses globalThis\.localStorage$/,
    /^layout\.js imports fold\/model\.js: outside the fold package, import the fold from fold\.js$/,
    /^import cycle: fold\/apply\.js -> .*fold\/model\.js -> fold\/apply\.js$/,
    /^labels\.js is a data module and uses innerHTML$/,
  ];
  for (const pattern of expect) assert.ok(problems.some((p) => pattern.test(p)), `no problem matches ${pattern}:\n${problems.join("\n")}`);
  assert.equal(problems.length, expect.length, problems.join("\n"));
});

test("comments are stripped, strings and regular expressions kept", () => {
  const code = 'const a = "http://x"; // document.title\nconst b = /\\/\\//.test(a) /* window.x */ ? `${"//"}` : 1 / 2;';
  const blank = " ".repeat("/* window.x */".length);
  assert.equal(stripComments(code), `const a = "http://x"; \nconst b = /\\/\\//.test(a) ${blank} ? \`\${"//"}\` : 1 / 2;`);
});

test("tsc checks exactly the data modules (tsconfig.json excludes the DOM modules)", () => {
  const config = JSON.parse(readFileSync(join(ROOT, "tsconfig.json"), "utf8").replace(/^\s*\/\/.*$/gm, ""));
  assert.deepEqual(config.include, ["static/picoflow_web/js/**/*.js", "tests/js/platform.d.ts"]);
  assert.deepEqual(config.exclude.sort(), ["static/picoflow_web/js/**/*_ui.js", ...DOM_MODULES.map((m) => `static/picoflow_web/js/${m}`)].sort());
  assert.ok(!config.compilerOptions.lib.some((/** @type {string} */ lib) => /^dom/i.test(lib)), "a data module must not type-check against the DOM");
});

test("every data module is type-checked", () => {
  for (const name of data) {
    assert.match(readFileSync(join(JS, name), "utf8"), /^\/\/ @ts-check\n/, `${name} lacks // @ts-check`);
  }
});

for (const name of modules) {
  test(`${name} imports cleanly`, async () => {
    await import(pathToFileURL(join(JS, name)).href);
  });
}

test("no module writes HTML from strings", () => {
  for (const name of modules) {
    const code = readFileSync(join(JS, name), "utf8");
    for (const sink of ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"]) {
      assert.ok(!code.includes(sink), `${name} uses ${sink}`);
    }
  }
});

test("every CSS class the modules set starts with pf-", () => {
  for (const name of modules) {
    const code = readFileSync(join(JS, name), "utf8");
    for (const m of code.matchAll(/className = `([^`]*)`|className = "([^"]*)"|h\("[a-z0-9]+", "([^"]*)"/g)) {
      const classes = (m[1] ?? m[2] ?? m[3]).replace(/\$\{[^}]*\}/g, "").split(/\s+/).filter(Boolean);
      for (const c of classes) assert.ok(c.startsWith("pf-") || c === "pf", `${name}: class "${c}" lacks the pf- prefix`);
    }
  }
});
