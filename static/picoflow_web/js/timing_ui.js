// @ts-check
/**
 * When a barrier's time ran out, drawn (DOM): grace-end, deadline and timeout marks on the
 * time axis, and two sections of the barrier inspector, the cancellation cascade and the
 * join's critical path, with the toggle that highlights that path's lanes.
 *
 * Data comes from time_marks.js, cascade.js and critical_path.js; runtime values (reasons,
 * keys, user names) go in as text only.
 *
 * Hooks: `.pf-axis-mark[data-kind=grace|deadline|timeout]` (`data-barrier`, `data-path`,
 * `title`); `.pf-cascade` with `.pf-cascade-sentence` and rows
 * `.pf-cascade-row[data-path][data-at]` (`data-late` when the grace period closed it);
 * `.pf-critical-section` with `.pf-critical-sentence`, its steps `.pf-critical-step
 * [data-path]`, and the button `.pf-critical-toggle[data-critical-barrier][aria-pressed]`;
 * rows and lanes of the highlighted path carry `.pf-critical`, the axis `data-critical`.
 */

import { cascadeOf, cascadeSentence } from "./cascade.js";
import { criticalPath } from "./critical_path.js";
import { append, badge, h, section, table } from "./dom.js";
import { formatDuration } from "./format.js";
import { barrierNameOf } from "./labels.js";
import { timeMarkers } from "./time_marks.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Barrier} Barrier */

/**
 * Axis elements for the grace-end, deadline and timeout markers inside `bounds`.
 * @param {Run} view @param {{start: number, end: number}} bounds @returns {HTMLElement[]}
 */
export function timeMarkElements(view, bounds) {
  return timeMarkers(view, bounds).map((m) => {
    const mark = h("i", `pf-axis-mark pf-axis-mark-${m.kind}`);
    mark.dataset.kind = m.kind;
    mark.dataset.barrier = m.barrier;
    if (m.path !== null) mark.dataset.path = m.path;
    mark.title = `${m.title} · ${m.t.toFixed(6)}s`;
    mark.style.left = `${(m.x * 100).toFixed(3)}%`;
    return mark;
  });
}

/** How a branch stood when the cancel came, for people. */
const AT_LABELS = { finished: "finished", running: "running: told to stop", queued: "queued: not started" };

/** What became of it, and how long after the request. @param {import("./cascade.js").CascadeBranch} b */
function thenCell(b) {
  const cell = h("span", "pf-cascade-then");
  const label = b.late ? badge("late: lost its rights", "cancel") : badge(b.status, b.status);
  if (b.late) label.title = "still running when the grace period ended: it lost its publication rights";
  append(cell, label, b.after !== null ? h("span", "pf-muted", ` ${formatDuration(b.after)} later`) : null);
  return cell;
}

/**
 * The barrier inspector's cascade and critical-path sections, appended to `parent`.
 * @param {DocumentFragment | HTMLElement} parent @param {Run} view @param {Barrier} barrier
 * @param {Map<string, boolean>} open  remembered open/closed sections
 */
export function timingSections(parent, view, barrier, open) {
  const cascade = cascadeOf(view, barrier.id);
  if (cascade) {
    const body = remembered(parent, open, "cascade", "Cancellation cascade", "pf-cascade");
    body.appendChild(h("p", "pf-cascade-sentence", cascadeSentence(cascade, (id) => barrierNameOf(view, id))));
    const when = h("p", "pf-hint");
    append(when, h("span", "", `Requested at ${formatDuration(cascade.requested.t)} (`), seqLink(cascade.requested.seq), h("span", "", ")"),
      cascade.graceEnded ? h("span", "", `; the grace period ended at ${formatDuration(cascade.graceEnded.t)} (`) : null,
      cascade.graceEnded ? seqLink(cascade.graceEnded.seq) : null, cascade.graceEnded ? h("span", "", ")") : null);
    body.appendChild(when);
    const rows = cascade.branches;
    body.appendChild(table("pf-cascade-table", ["Branch", "At the request", "Then", "Spent"], rows.map((b) => [
      pathButton(b.path, `${b.key || b.path} (${b.path})`),
      AT_LABELS[b.at],
      thenCell(b),
      b.tokens !== null ? `${b.tokens.toLocaleString("en-US")} tokens (${(b.tokensAtRequest ?? 0).toLocaleString("en-US")} by the request)`
        : b.elapsed !== null ? `${formatDuration(b.elapsed)} running` : "nothing: never ran",
    ]), (i) => `pf-cascade-row pf-cascade-${rows[i].at}`));
    const trs = body.querySelectorAll("tbody tr");
    rows.forEach((b, i) => {
      const tr = /** @type {HTMLElement} */ (trs[i]);
      tr.dataset.path = b.path;
      tr.dataset.at = b.at;
      if (b.late) tr.dataset.late = "1";
    });
  }
  const cp = criticalPath(view, barrier.id);
  if (cp && barrier.branches.length) {
    const body = remembered(parent, open, "critical", "Critical path", "pf-critical-section");
    body.appendChild(h("p", "pf-critical-sentence", cp.sentence));
    if (cp.steps.length) {
      const list = h("ol", "pf-critical-steps");
      for (const step of cp.steps) {
        const li = h("li", "pf-critical-step");
        li.dataset.path = step.path;
        append(li, pathButton(step.path, step.label),
          h("span", "pf-muted", ` ended at ${formatDuration(step.finished)}; the join of ${barrierNameOf(view, step.barrier)} ran ${formatDuration(Math.max(0, step.joinedAt - step.finished))} later`));
        list.appendChild(li);
      }
      body.appendChild(list);
      const toggle = h("button", "pf-button pf-button-small pf-critical-toggle", "Highlight on the lanes (c)");
      toggle.setAttribute("type", "button");
      toggle.setAttribute("aria-pressed", "false");
      toggle.dataset.criticalBarrier = barrier.id;
      body.appendChild(toggle);
    }
  }
}

/**
 * The highlighted critical path: which barrier's, and the paths it marks in a view.
 */
export function createCriticalHighlight() {
  /** @type {string | null} */
  let barrier = null;
  /** @type {{view: Run | null, version: number, barrier: string | null, paths: Set<string>}} */
  let memo = { view: null, version: -1, barrier: null, paths: new Set() };
  return {
    /** @param {string | null} id  another barrier switches to it; the same one turns it off */
    toggle(id) {
      barrier = id === barrier ? null : id;
    },
    get barrier() {
      return barrier;
    },
    /** The invocation paths to mark in `view` (recomputed only when the view changed). @param {Run} view */
    paths(view) {
      if (barrier === null) return null;
      if (memo.view !== view || memo.version !== view.version || memo.barrier !== barrier) {
        const cp = criticalPath(view, barrier);
        memo = { view, version: view.version, barrier, paths: new Set(cp ? cp.paths : []) };
      }
      return memo.paths;
    },
    /** Reflect the state on the inspector's toggle and the axis. @param {HTMLElement} inspector @param {HTMLElement} axis */
    sync(inspector, axis) {
      for (const el of inspector.querySelectorAll("[data-critical-barrier]")) {
        const on = /** @type {HTMLElement} */ (el).dataset.criticalBarrier === barrier;
        if (el.getAttribute("aria-pressed") !== String(on)) {
          el.setAttribute("aria-pressed", String(on));
          el.textContent = on ? "Clear the highlight (c)" : "Highlight on the lanes (c)";
        }
      }
      if (barrier === null) delete axis.dataset.critical;
      else axis.dataset.critical = barrier;
    },
  };
}

/**
 * @param {DocumentFragment | HTMLElement} parent @param {Map<string, boolean>} open
 * @param {string} name @param {string} title @param {string} className
 */
function remembered(parent, open, name, title, className) {
  const s = section(title, open.has(name) ? /** @type {boolean} */ (open.get(name)) : true, className);
  s.root.dataset.section = name;
  s.root.addEventListener("toggle", () => open.set(name, s.root.open));
  parent.appendChild(s.root);
  return s.body;
}

/** @param {string} path @param {string} text */
function pathButton(path, text) {
  const b = h("button", "pf-linkbutton pf-mono", text);
  b.setAttribute("type", "button");
  b.dataset.selectPath = path;
  return b;
}

/** @param {number} seq */
function seqLink(seq) {
  const b = h("button", "pf-linkbutton pf-mono", `#${seq}`);
  b.setAttribute("type", "button");
  b.dataset.pinSeq = String(seq);
  b.title = "Show the run as it was at this event";
  return b;
}
