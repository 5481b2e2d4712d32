// @ts-check
/**
 * The fan-out overview of a barrier (DOM), drawn from `barrierOverview` (overview.js):
 * its branches grouped by step with their status and publication counts, a histogram
 * of how long they ran, and the slowest and failed ones, each one click from the
 * inspector. Counts that stand for a set of branches are buttons that show that set in
 * the tree (which virtualises however many there are).
 *
 * Hooks: `.pf-overview[data-barrier]`; in `.pf-overview-status` and
 * `.pf-overview-publication`, per step `.pf-overview-group[data-step]` whose cells are
 * `[data-count=<status or publication state>]`, and the totals row `.pf-overview-total`; `.pf-histogram` with one `.pf-bin[data-count]` per bin;
 * `.pf-slowest` and `.pf-failed` lists of `[data-select-path]` buttons; buttons that show
 * branches in the tree carry `data-show-barrier` and `data-show-status`.
 */

import { append, h } from "./dom.js";
import { labelOf } from "./labels.js";
import { formatSeconds } from "./layout.js";
import { PUBLICATION_STATES, barrierOverview } from "./overview.js";
import { STATE_LABELS } from "./publication.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./overview.js").Overview} Overview */

const STATUS_COLUMNS = ["queued", "running", "fulfilled", "rejected"];

/** @param {number} n */
const count = (n) => n.toLocaleString("en-US");

/**
 * @param {string} barrier @param {string} status  "" for every branch
 * @param {string} text @param {string} title
 */
function showButton(barrier, status, text, title) {
  const b = h("button", "pf-linkbutton pf-show-in-tree", text);
  b.setAttribute("type", "button");
  b.dataset.showBarrier = barrier;
  b.dataset.showStatus = status;
  b.title = title;
  return b;
}

/** @param {string} path @param {string} text */
function selectButton(path, text) {
  const b = h("button", "pf-linkbutton pf-mono", text);
  b.setAttribute("type", "button");
  b.dataset.selectPath = path;
  return b;
}

/**
 * The overview of `barrier` in `view`.
 * @param {Run} view @param {Barrier} barrier @returns {HTMLElement}
 */
export function overviewView(view, barrier) {
  const root = h("div", "pf-overview");
  root.dataset.barrier = barrier.id;
  const o = barrierOverview(view, barrier.id);
  if (!o) return root;
  root.appendChild(groupsTable(o, "status"));
  root.appendChild(groupsTable(o, "publication"));
  root.appendChild(histogramView(o));
  root.appendChild(lists(o, view));
  const all = showButton(barrier.id, "", `Show all ${count(o.total)} in the tree`, "Expand this barrier's branches in the tree (drawn as you scroll)");
  all.classList.add("pf-button", "pf-button-small");
  all.classList.remove("pf-linkbutton");
  root.appendChild(append(h("p", "pf-overview-actions"), all));
  return root;
}

/**
 * Steps down, counts across: one table of statuses, one of the publication states some
 * branch is in (two narrow tables fit the inspector; one wide one did not).
 * @param {Overview} o @param {"status" | "publication"} what
 */
function groupsTable(o, what) {
  const names = what === "status" ? STATUS_COLUMNS : PUBLICATION_STATES.filter((s) => o.publication[s] > 0);
  const t = h("table", `pf-table pf-overview-groups pf-overview-${what}`);
  const head = h("tr");
  append(head, h("th", "", "Step"), what === "status" ? h("th", "pf-num", "branches") : null,
    ...names.map((s) => h("th", `pf-num pf-col-${s}`, what === "status" ? s : STATE_LABELS[/** @type {keyof typeof STATE_LABELS} */ (s)])));
  const body = h("tbody");
  /** @param {HTMLElement} tr @param {string} name @param {number} n @param {boolean} link */
  const cell = (tr, name, n, link) => {
    const td = h("td", "pf-num pf-mono");
    td.dataset.count = name;
    // A status count is a set the tree can filter to; publication states are not.
    if (link && n > 0) td.appendChild(showButton(o.barrier, name, count(n), `Show the ${name} branches in the tree`));
    else td.textContent = count(n);
    tr.appendChild(td);
  };
  /** @param {string} cls @param {string} label @param {number} total @param {Record<string, number>} counts */
  const row = (cls, label, total, counts) => {
    const tr = h("tr", cls);
    tr.appendChild(h("td", "pf-mono", label));
    if (what === "status") cell(tr, "total", total, false);
    for (const s of names) cell(tr, s, counts[s], what === "status");
    return tr;
  };
  for (const g of o.groups) {
    const tr = row("pf-overview-group", g.step, g.total, what === "status" ? g.status : g.publication);
    tr.dataset.step = g.step;
    body.appendChild(tr);
  }
  if (o.groups.length > 1) body.appendChild(row("pf-overview-total", "all", o.total, what === "status" ? o.status : o.publication));
  append(t, append(h("thead"), head), body);
  return append(h("div", "pf-table-wrap"), t);
}

/** @param {Overview} o */
function histogramView(o) {
  const wrap = h("figure", "pf-histogram-wrap");
  const hist = o.histogram;
  const caption = h("figcaption", "pf-muted pf-small", hist.measured
    ? `How long they ran: ${count(hist.measured)} finished branches, ${formatSeconds(hist.min)} to ${formatSeconds(hist.max)}${hist.scale === "log" ? " (bins of equal ratio)" : ""}`
    : "How long they ran: no branch has finished yet");
  wrap.appendChild(caption);
  if (!hist.measured) return wrap;
  const bars = h("div", "pf-histogram");
  bars.setAttribute("role", "img");
  bars.setAttribute("aria-label", `Histogram of ${hist.measured} branch durations`);
  const peak = Math.max(...hist.bins.map((b) => b.count));
  for (const bin of hist.bins) {
    const bar = h("div", "pf-bin");
    bar.dataset.count = String(bin.count);
    // A bin of one still shows next to a peak of thousands.
    bar.style.height = bin.count ? `max(2px, ${((bin.count / peak) * 100).toFixed(2)}%)` : "0";
    bar.title = `${count(bin.count)} ran ${formatSeconds(bin.t0)}–${formatSeconds(bin.t1)}`;
    bars.appendChild(bar);
  }
  const axis = h("div", "pf-histogram-axis pf-muted pf-small pf-mono");
  const middle = hist.bins[Math.floor(hist.bins.length / 2)];
  append(axis, h("span", "", formatSeconds(hist.min)), hist.bins.length > 2 ? h("span", "", formatSeconds(middle.t0)) : null, h("span", "", formatSeconds(hist.max)));
  return append(wrap, bars, axis);
}

/** @param {Overview} o @param {Run} view */
function lists(o, view) {
  const wrap = h("div", "pf-overview-lists");
  const slow = h("div", "pf-overview-list");
  slow.appendChild(h("h3", "pf-subtitle", `Slowest ${o.slowest.length}`));
  if (o.slowest.length) {
    const ol = h("ol", "pf-slowest");
    for (const s of o.slowest) {
      const li = h("li");
      li.dataset.path = s.path;
      append(li, selectButton(s.path, labelOf(view, s.path)), h("span", "pf-muted pf-mono", ` ${s.path} `),
        h("span", "pf-mono pf-duration", formatSeconds(s.duration)));
      ol.appendChild(li);
    }
    slow.appendChild(ol);
  } else slow.appendChild(h("p", "pf-muted", "None finished yet."));
  const failed = h("div", "pf-overview-list");
  failed.appendChild(h("h3", "pf-subtitle", `Failed (${count(o.failedTotal)})`));
  if (o.failed.length) {
    const ul = h("ul", "pf-failed");
    for (const f of o.failed) {
      const li = h("li");
      li.dataset.path = f.path;
      append(li, selectButton(f.path, labelOf(view, f.path)), h("span", "pf-muted pf-mono", ` ${f.path}`));
      ul.appendChild(li);
    }
    failed.appendChild(ul);
    if (o.failedTotal > o.failed.length) {
      failed.appendChild(showButton(o.barrier, "rejected", `All ${count(o.failedTotal)} in the tree`, "Show the rejected branches in the tree"));
    }
  } else failed.appendChild(h("p", "pf-muted", "None rejected."));
  return append(wrap, slow, failed);
}
