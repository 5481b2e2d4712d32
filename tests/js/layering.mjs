// The front end's layering, derived from its files (modules.test.mjs runs it on the real
// tree and on a copy with planted violations):
//
// - a module is a DOM module when its name ends in `_ui.js` or it is one of DOM_MODULES;
//   every other module is a data module: pure, node imports it, tsc type-checks it
//   (tsconfig.json excludes exactly the DOM modules);
// - a data module references no browser-only global (the document, the window, storage,
//   the location, fetch), no DOM type or API, and imports no DOM module;
// - the fold package (`fold/`) imports nothing outside itself, and modules outside it
//   import it only through its door, `fold.js`;
// - no module imports itself through others (no cycle of static imports);
// - every relative import names a module that exists.
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join, posix, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

/** DOM modules not named `*_ui.js`: dom.js builds elements, api.js talks to the server. */
export const DOM_MODULES = ["api.js", "dom.js"];

/** @param {string} name a module's path under the js folder, "/"-separated */
export const isDom = (name) => name.endsWith("_ui.js") || DOM_MODULES.includes(name);

/** Every module under `dir`, as "/"-separated paths relative to it, sorted. */
export function modulesIn(dir) {
  const found = [];
  const walk = (folder) => {
    for (const entry of readdirSync(folder, { withFileTypes: true })) {
      const path = join(folder, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith(".js")) found.push(relative(dir, path).split(sep).join("/"));
    }
  };
  walk(dir);
  return found.sort();
}

/** A browser-only global used as a value: `document.x`, `window[...]`, `globalThis.location`. */
const BROWSER_GLOBAL = new RegExp([
  /(?<![\w$.])(?:document|window|navigator|location|localStorage|sessionStorage)\s*[.[]/.source,
  /(?<![\w$.])(?:fetch|XMLHttpRequest|alert|confirm|prompt|getComputedStyle|matchMedia)\s*\(/.source,
  /\b(?:globalThis|self)\s*\.\s*(?:document|window|navigator|location|localStorage|sessionStorage|fetch|XMLHttpRequest)\b/.source,
].join("|"));
/** DOM types and element APIs. */
const DOM_API = /\b(?:HTML\w*Element|SVG\w*Element|Element|DocumentFragment|MutationObserver|ResizeObserver|IntersectionObserver|CustomEvent|innerHTML|outerHTML|insertAdjacentHTML|querySelector(?:All)?|getElementById|createElement(?:NS)?|addEventListener|removeEventListener|classList|appendChild|replaceChildren)\b/;

/**
 * `code` without its comments (strings, template literals and regular expressions kept),
 * so a comment's words are not read as code and a "//" in a string does not end a line.
 * @param {string} code
 */
export function stripComments(code) {
  let out = "";
  let i = 0;
  // What the last significant character was decides whether "/" starts a regex.
  let last = "";
  const templates = []; // brace depth inside each open `${`
  while (i < code.length) {
    const c = code[i];
    const next = code[i + 1];
    if (c === "/" && next === "/") {
      while (i < code.length && code[i] !== "\n") i += 1;
      continue;
    }
    if (c === "/" && next === "*") {
      const end = code.indexOf("*/", i + 2);
      const stop = end < 0 ? code.length : end + 2;
      out += code.slice(i, stop).replace(/[^\n]/g, " ");
      i = stop;
      continue;
    }
    if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < code.length && code[j] !== c && code[j] !== "\n") j += code[j] === "\\" ? 2 : 1;
      out += code.slice(i, j + 1);
      i = j + 1;
      last = c;
      continue;
    }
    if (c === "`" || (c === "}" && templates.length && templates[templates.length - 1] === 0)) {
      if (c === "}") templates.pop();
      let j = i + 1;
      while (j < code.length && code[j] !== "`" && !(code[j] === "$" && code[j + 1] === "{")) j += code[j] === "\\" ? 2 : 1;
      if (code[j] === "$") {
        templates.push(0);
        j += 1;
      }
      out += code.slice(i, j + 1);
      i = j + 1;
      last = "`";
      continue;
    }
    if (c === "/" && (last === "" || "(,=:[!&|?{};+-*%<>~^".includes(last) || /(?:^|[^\w$])(?:return|typeof|case|of|in)$/.test(out.slice(-12).trimEnd()))) {
      let j = i + 1;
      let inClass = false;
      while (j < code.length && code[j] !== "\n" && (inClass || code[j] !== "/")) {
        if (code[j] === "\\") j += 1;
        else if (code[j] === "[") inClass = true;
        else if (code[j] === "]") inClass = false;
        j += 1;
      }
      out += code.slice(i, j + 1);
      i = j + 1;
      last = "/";
      continue;
    }
    if (templates.length) {
      if (c === "{") templates[templates.length - 1] += 1;
      else if (c === "}") templates[templates.length - 1] -= 1;
    }
    out += c;
    if (!/\s/.test(c)) last = c;
    i += 1;
  }
  return out;
}

/**
 * The relative modules `code` (comments stripped) imports or re-exports statically.
 * @param {string} code
 */
export function importsOf(code) {
  const found = [];
  const pattern = /(?:^|[;\n])\s*(?:(?:import|export)\b[^"'`;]*?\bfrom|import)\s*["'](\.{1,2}\/[^"']+)["']/g;
  for (const m of code.matchAll(pattern)) found.push(m[1]);
  return found;
}

/**
 * What breaks the layering in the js folder `dir` (empty when it holds).
 * @param {string} dir
 * @returns {string[]}
 */
export function layeringProblems(dir) {
  const problems = [];
  const modules = modulesIn(dir);
  const known = new Set(modules);
  /** @type {Map<string, string[]>} */
  const graph = new Map();
  for (const name of modules) {
    const code = stripComments(readFileSync(join(dir, name), "utf8"));
    const targets = [];
    for (const spec of importsOf(code)) {
      const target = posix.normalize(posix.join(posix.dirname(name), spec));
      if (!known.has(target)) {
        problems.push(`${name} imports ${spec}, which is no module`);
        continue;
      }
      targets.push(target);
      if (!isDom(name) && isDom(target)) problems.push(`${name} is a data module and imports the DOM module ${target}`);
      const inFold = name.startsWith("fold/");
      if (inFold && !target.startsWith("fold/")) problems.push(`${name} is in the fold package and imports ${target} from outside it`);
      if (!inFold && name !== "fold.js" && target.startsWith("fold/")) {
        problems.push(`${name} imports ${target}: outside the fold package, import the fold from fold.js`);
      }
    }
    graph.set(name, targets);
    if (isDom(name)) continue;
    const global = code.match(BROWSER_GLOBAL);
    if (global) problems.push(`${name} is a data module and uses ${global[0].trim()}`);
    const api = code.match(DOM_API);
    if (api) problems.push(`${name} is a data module and uses ${api[0]}`);
  }
  for (const cycle of cyclesOf(graph)) problems.push(`import cycle: ${cycle.join(" -> ")}`);
  return problems;
}

/**
 * One cycle through each strongly connected part of `graph` that has one (depth first).
 * @param {Map<string, string[]>} graph
 */
function cyclesOf(graph) {
  const cycles = [];
  const state = new Map(); // 1: on the current path, 2: done
  const path = [];
  const visit = (node) => {
    state.set(node, 1);
    path.push(node);
    for (const next of graph.get(node) || []) {
      if (state.get(next) === 1) cycles.push([...path.slice(path.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    path.pop();
    state.set(node, 2);
  };
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node);
  return cycles;
}

/** The js folder of the checkout this file is in. */
export const JS = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "static", "picoflow_web", "js");
