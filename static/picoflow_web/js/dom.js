// @ts-check
/**
 * Small DOM helpers shared by the page modules. Runtime values only ever go in through
 * `textContent` (`h(..., text)`, `setText`); markup is built with createElement.
 */

import { pretty } from "./format.js";

/**
 * Create an element with optional class names and text.
 * @param {string} tag @param {string} [className] @param {string | number | null} [text]
 * @returns {HTMLElement}
 */
export function h(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined && text !== null) el.textContent = String(text);
  return el;
}

/**
 * Append children (nullish ones skipped); returns the parent.
 * @template {Node} T @param {T} parent @param {...(Node | null | undefined | false)} children
 */
export function append(parent, ...children) {
  for (const child of children) if (child) parent.appendChild(child);
  return parent;
}

/** @param {Element} el */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/**
 * Set text only when it changed (no needless DOM writes).
 * @param {Element | null} el @param {string | number} text
 */
export function setText(el, text) {
  if (!el) return;
  const value = String(text);
  if (el.textContent !== value) el.textContent = value;
}

/**
 * Set an attribute only when it changed.
 * @param {Element} el @param {string} name @param {string} value
 */
export function setAttr(el, name, value) {
  if (el.getAttribute(name) !== value) el.setAttribute(name, value);
}

/**
 * Delegated event listener: `handler(event, matched)` for events inside `selector`.
 * @param {Element | Document} root @param {string} type @param {string} selector
 * @param {(event: any, matched: HTMLElement) => void} handler
 */
export function on(root, type, selector, handler) {
  root.addEventListener(type, (event) => {
    const target = /** @type {Element | null} */ (event.target);
    const matched = target && target.closest ? target.closest(selector) : null;
    if (matched && root.contains(matched)) handler(event, /** @type {HTMLElement} */ (matched));
  });
}

/**
 * A `<pre>` with a value's pretty JSON; long values are cut with a "show all" button.
 * @param {any} value @param {string} [className]
 * @param {{text: string, cut: boolean}} [shown]  `pretty(value)`, when the caller has it
 */
export function jsonBlock(value, className = "", shown = pretty(value)) {
  const pre = h("pre", `pf-json ${className}`.trim());
  pre.textContent = shown.text;
  if (!shown.cut) return pre;
  const wrap = h("div", "pf-json-wrap");
  const more = h("button", "pf-button pf-button-small", `Show all (over ${shown.text.length.toLocaleString("en-US")} characters)`);
  more.setAttribute("type", "button");
  more.addEventListener("click", () => {
    pre.textContent = pretty(value, Infinity).text;
    more.remove();
  });
  return append(wrap, pre, more);
}

/**
 * A badge: `<span class="pf-badge pf-badge-<kind>">text</span>`.
 * @param {string} text @param {string} [kind]
 */
export function badge(text, kind = "") {
  return h("span", kind ? `pf-badge pf-badge-${kind}` : "pf-badge", text);
}

/**
 * A table from column titles and rows of cells (strings or nodes). `source` is an array of
 * rows, or `{count, at(i)}` so long lists build only what is shown: the first `limit`
 * rows, then a "show more" button adds the next thousand.
 * @param {string} className @param {string[]} columns
 * @param {(string | Node)[][] | {count: number, at: (i: number) => (string | Node)[]}} source
 * @param {(row: number) => string} [rowClass] @param {number} [limit]
 */
export function table(className, columns, source, rowClass, limit = 200) {
  const count = Array.isArray(source) ? source.length : source.count;
  const at = Array.isArray(source) ? (/** @type {number} */ i) => source[i] : source.at;
  const t = h("table", `pf-table ${className}`);
  const head = h("thead");
  const tr = h("tr");
  for (const c of columns) tr.appendChild(h("th", "", c));
  head.appendChild(tr);
  const body = h("tbody");
  let shown = 0;
  const addRows = (/** @type {number} */ upto) => {
    for (; shown < Math.min(upto, count); shown += 1) {
      const row = h("tr", rowClass ? rowClass(shown) : "");
      for (const cell of at(shown)) {
        const td = h("td");
        if (typeof cell === "string") td.textContent = cell;
        else td.appendChild(cell);
        row.appendChild(td);
      }
      body.appendChild(row);
    }
  };
  addRows(limit);
  append(t, head, body);
  if (shown < count) {
    const foot = h("tfoot");
    const cell = h("td");
    cell.setAttribute("colspan", String(columns.length));
    const more = h("button", "pf-button pf-button-small");
    more.setAttribute("type", "button");
    const label = () => setText(more, `Show ${Math.min(1000, count - shown).toLocaleString("en-US")} more of ${(count - shown).toLocaleString("en-US")} not shown`);
    label();
    more.addEventListener("click", () => {
      addRows(shown + 1000);
      if (shown >= count) foot.remove();
      else label();
    });
    cell.appendChild(more);
    foot.appendChild(h("tr")).appendChild(cell);
    t.appendChild(foot);
  }
  return t;
}

/**
 * A collapsible section.
 * @param {string} title @param {boolean} open @param {string} [className]
 * @returns {{root: HTMLDetailsElement, body: HTMLElement}}
 */
export function section(title, open, className = "") {
  const root = /** @type {HTMLDetailsElement} */ (h("details", `pf-section ${className}`.trim()));
  root.open = open;
  const summary = h("summary", "pf-section-title", title);
  const body = h("div", "pf-section-body");
  append(root, summary, body);
  return { root, body };
}

/**
 * Read JSON that the server rendered with `json_script`.
 * @param {string} id
 */
export function readJsonScript(id) {
  const el = document.getElementById(id);
  if (!el || !el.textContent) return null;
  try {
    return JSON.parse(el.textContent);
  } catch {
    return null;
  }
}

/**
 * A table that shows one page of `source` at a time, with first / previous / next / last
 * buttons and "101–200 of 10,000"; a page is built only when shown. `state.page` (0-based)
 * is read and written, so a caller that keeps `state` keeps the page across rebuilds.
 *
 * Hooks: `.pf-paged` wraps the table; `.pf-pager` (absent when one page holds all) holds
 * `[data-page=first|prev|next|last]` and `.pf-pager-label`.
 * @param {string} className @param {string[]} columns
 * @param {{count: number, at: (i: number) => (string | Node)[]}} source
 * @param {{page: number}} state @param {number} [size] @param {(row: number) => string} [rowClass]
 */
export function pagedTable(className, columns, source, state, size = 100, rowClass) {
  const wrap = h("div", "pf-paged");
  const pages = Math.max(1, Math.ceil(source.count / size));
  const draw = () => {
    state.page = Math.min(pages - 1, Math.max(0, Math.floor(state.page || 0)));
    const start = state.page * size;
    const end = Math.min(source.count, start + size);
    const slice = { count: end - start, at: (/** @type {number} */ i) => source.at(start + i) };
    const t = table(className, columns, slice, rowClass ? (i) => rowClass(start + i) : undefined, size);
    if (pages === 1) {
      wrap.replaceChildren(t);
      return;
    }
    const pager = h("div", "pf-pager");
    /** @param {string} name @param {string} text @param {string} label @param {number} to */
    const button = (name, text, label, to) => {
      const b = h("button", "pf-button pf-button-small", text);
      b.setAttribute("type", "button");
      b.setAttribute("aria-label", label);
      b.dataset.page = name;
      if (to === state.page) b.setAttribute("disabled", "");
      b.addEventListener("click", () => { state.page = to; draw(); });
      return b;
    };
    append(pager,
      button("first", "«", "First page", 0),
      button("prev", "‹", "Previous page", state.page - 1 < 0 ? 0 : state.page - 1),
      h("span", "pf-pager-label pf-mono", `${(start + 1).toLocaleString("en-US")}–${end.toLocaleString("en-US")} of ${source.count.toLocaleString("en-US")}`),
      button("next", "›", "Next page", Math.min(pages - 1, state.page + 1)),
      button("last", "»", "Last page", pages - 1));
    wrap.replaceChildren(t, pager);
  };
  draw();
  return wrap;
}
