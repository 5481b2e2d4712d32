// @ts-check
/**
 * The inspector's small shared pieces (DOM): collapsible sections that remember being open,
 * buttons that select an invocation or barrier or pin the scrubber, value cells, fact
 * lists, headings, badges and error boxes. Runtime values go in as text only.
 */

import { append, badge, h, jsonBlock, section } from "./dom.js";
import { cellOf, errorLabel } from "./format.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./inspector_ui.js").InspectorContext} InspectorContext */

/**
 * At most `limit` of a list, then how many more.
 * @param {string[]} items @param {number} [limit]
 */
export function shortList(items, limit = 20) {
  if (!items.length) return "—";
  const shown = items.slice(0, limit).join(", ");
  return items.length > limit ? `${shown} … and ${(items.length - limit).toLocaleString("en-US")} more` : shown;
}

/**
 * A lazy table source over `items`: rows are built only when shown.
 * @template T @param {T[]} items @param {(item: T, i: number) => (string | Node)[]} cells
 */
export function lazy(items, cells) {
  return { count: items.length, at: (/** @type {number} */ i) => cells(items[i], i) };
}

/**
 * A remembered collapsible section. With `fill`, its body is built when it is first shown
 * (at once when it opens open): a closed section's long table costs nothing while the
 * inspector is rebuilt with a live run.
 * @param {DocumentFragment | HTMLElement} parent @param {InspectorContext} ctx
 * @param {string} name @param {string} title @param {boolean} open @param {string} [className]
 * @param {(body: HTMLElement) => void} [fill]
 */
export function sectionIn(parent, ctx, name, title, open, className = "", fill) {
  const s = section(title, ctx.open.has(name) ? /** @type {boolean} */ (ctx.open.get(name)) : open, className);
  s.root.dataset.section = name;
  let empty = fill !== undefined;
  const show = () => {
    if (empty && fill && s.root.open) {
      empty = false;
      fill(s.body);
    }
  };
  s.root.addEventListener("toggle", () => {
    ctx.open.set(name, s.root.open);
    show();
  });
  show();
  parent.appendChild(s.root);
  return s.body;
}

/** A link-like button that selects an invocation. @param {string} path @param {string} text */
export function pathLink(path, text) {
  const b = h("button", "pf-linkbutton pf-mono", text);
  b.setAttribute("type", "button");
  b.dataset.selectPath = path;
  // The text is usually the label (`labelOf`); the path stays a hover away.
  b.title = path === "" ? "the turn" : `path ${path}`;
  return b;
}

/** A link-like button that selects a barrier. @param {string} id @param {string} [text]  its label */
export function barrierLink(id, text = id) {
  const b = h("button", "pf-linkbutton pf-mono", text);
  b.setAttribute("type", "button");
  b.dataset.selectBarrier = id;
  b.title = `barrier ${id}`;
  return b;
}

/** A button that pins the scrubber at a seq. @param {number} seq */
export function seqLink(seq) {
  const b = h("button", "pf-linkbutton pf-mono", `#${seq}`);
  b.setAttribute("type", "button");
  b.dataset.pinSeq = String(seq);
  b.title = "Show the run as it was at this event";
  return b;
}

/**
 * A value on one line when its JSON is short, else as a block (`cellOf`).
 * @param {any} value
 */
export function valueCell(value) {
  const cell = cellOf(value);
  return "line" in cell ? h("code", "pf-value", cell.line) : jsonBlock(value, "pf-value-block", cell.block);
}

/** @param {[string, string | Node | null][]} items @param {string} [extra] */
export function facts(items, extra = "") {
  const dl = h("dl", `pf-facts ${extra}`.trim());
  for (const [label, value] of items) {
    if (value === null || value === "") continue;
    const row = h("div");
    const dd = h("dd");
    if (typeof value === "string") dd.textContent = value;
    else dd.appendChild(value);
    append(row, h("dt", "", label), dd);
    dl.appendChild(row);
  }
  return dl;
}

/** @param {string} title @param {string} [sub] */
export function heading(title, sub) {
  const el = h("div", "pf-inspector-head");
  append(el, h("h2", "pf-inspector-title", title), sub ? h("span", "pf-muted pf-mono", sub) : null);
  return el;
}

/**
 * The publication badge of a branch or barrier, from publication.js.
 * @param {{state: string, badge: {kind: string, label: string, title: string}}} marks
 */
export function publicationBadge(marks) {
  const el = badge(marks.badge.label, marks.badge.kind);
  el.classList.add("pf-publication-badge");
  el.dataset.publication = marks.state;
  el.title = marks.badge.title;
  return el;
}

/**
 * Why it was discarded, in words.
 * @param {string} text @param {string | null} reason
 */
export function discardReason(text, reason) {
  const el = h("p", "pf-published-none pf-discard-reason", text);
  if (reason) el.dataset.discard = reason;
  return el;
}

/** @param {any} error */
export function errorBox(error) {
  const box = h("div", "pf-error-box");
  append(box,
    h("div", "pf-error-code pf-mono", `${errorLabel(error)}${error?.code && error.code !== "internal" ? ` · ${error.code}` : ""}`),
    h("p", "pf-error-message", error?.message || ""));
  if (error?.extra && Object.keys(error.extra).length && !error.extra.provenance) box.appendChild(jsonBlock(error.extra));
  return box;
}
