// Every front-end module loads (no syntax or import errors), and the layering holds: data
// modules touch no DOM, and runtime values reach the DOM only through textContent.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

const JS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "static", "picoflow_web", "js");
const modules = readdirSync(JS).filter((f) => f.endsWith(".js")).sort();
const DATA = ["fold.js", "fold_model.js", "fold_views.js", "fold_publication.js", "fold_io.js", "fold_reduce.js", "layout.js", "format.js", "store.js", "socket.js", "config_form.js", "stopping.js", "publication.js", "diff.js", "timeline.js", "activity.js", "conflict.js", "overview.js", "cascade.js", "critical_path.js", "time_marks.js", "panel_sizes.js", "labels.js"];

test("the front end has its modules", () => {
  for (const name of [...DATA, "api.js", "dom.js", "rows_ui.js", "inspector_ui.js", "inspector_parts_ui.js", "branch_inspector_ui.js", "barrier_inspector_ui.js", "conflict_ui.js", "calls_ui.js", "resize_ui.js", "overview_ui.js", "run_ui.js", "runs_ui.js", "stop_ui.js"]) {
    assert.ok(modules.includes(name), `${name} is missing`);
  }
});

for (const name of modules) {
  test(`${name} imports cleanly`, async () => {
    await import(pathToFileURL(join(JS, name)).href);
  });
}

for (const name of DATA) {
  test(`${name} is a data module: no DOM`, () => {
    const code = readFileSync(join(JS, name), "utf8").replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, "");
    for (const dom of ["document.", "window.", "HTMLElement", "innerHTML", "querySelector", "localStorage"]) {
      assert.ok(!code.includes(dom), `${name} uses ${dom}`);
    }
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
