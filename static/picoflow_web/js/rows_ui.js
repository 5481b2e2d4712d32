// @ts-check
/**
 * The virtual list of tree rows with their lanes (DOM). Only the rows inside the scroll
 * window exist; their elements are pooled and re-pointed by row key (Temporal's pooled
 * rows), so scrolling through 10,000 branches creates no garbage per frame. A row's tree
 * cell is rebuilt only when its signature changes; its lane's segments are moved in place.
 *
 * Hooks: `.pf-row` on every row; `.pf-branch[data-path][data-status]` (and
 * `[data-stop=not-started|cancelled|late]` on a branch a cancellation stopped, `[data-reused]`
 * (the run it ran in) on one restored from the branch ledger, with its `a.pf-chip-reused`),
 * `.pf-barrier[data-barrier]`, `.pf-more[data-barrier]`, `.pf-root`; the lane cell of a
 * branch row is `.pf-lane[data-path]`. Branch and barrier rows carry `data-publication`
 * (pending, scoped, published, nothing or discarded, from publication.js) and, when
 * discarded, `data-discard` (why); a barrier's badge is `.pf-join-badge`, a discarded
 * branch's chip `.pf-chip-discarded`. While a branch's (or the turn's) model writes, its
 * lane shows the end of the text in `.pf-lane-stream` (`data-call`, `data-attempt`). While an invalidated barrier is selected, the rows and
 * lanes of the writes it failed on carry `.pf-conflict-writer`.
 */

import { append, h } from "./dom.js";
import { errorLabel, errorText, preview } from "./format.js";
import { barrierLabelOf, barrierNameOf, fromLangGraph, fromSpans } from "./labels.js";
import { ROW_HEIGHT, formatSeconds, lane, timeScale, windowRange } from "./layout.js";
import { barrierMarks, branchMarks, spanCounts } from "./publication.js";
import { reusedHref, reusedTitle } from "./resumption.js";
import { STOP_LABELS, barrierStopped, stopKind } from "./stopping.js";
import { laneStream } from "./streaming.js";

/** @typedef {import("./layout.js").Row} Row */
/** @typedef {import("./fold.js").Run} Run */

const INDENT = 16;

/**
 * @typedef {{el: HTMLElement, tree: HTMLElement, lane: HTMLElement, sig: string | null,
 *   base: string | null, laneSig: string | null, top: number,
 *   dot: HTMLElement | null, chip: HTMLElement | null, time: HTMLElement | null}} Slot
 * `base`: which elements a branch row has (`branchBase`); what else it shows (status,
 * duration, publication, selection) `patchBranch` updates in place, on `dot`, `chip` and
 * `time`.
 */

/**
 * @param {HTMLElement} viewport  the scrolling element
 * @param {HTMLElement} sizer  its child, as tall as all rows
 */
export function createRowsView(viewport, sizer) {
  /** @type {Map<string, Slot>} */
  const live = new Map();
  /** @type {Slot[]} */
  const spare = [];
  let height = -1;

  /** @returns {Slot} */
  const makeSlot = () => {
    const el = h("div", "pf-row");
    el.setAttribute("role", "treeitem");
    const tree = h("div", "pf-cell-tree");
    const laneEl = h("div", "pf-cell-lane");
    append(el, tree, laneEl);
    sizer.appendChild(el);
    return { el, tree, lane: laneEl, sig: null, base: null, laneSig: null, top: -1, dot: null, chip: null, time: null };
  };

  /**
   * Draw the rows in the window.
   * @param {Row[]} rows @param {{scrollTop: number, viewport: number, run: Run,
   *   bounds: {start: number, end: number}, now: number | null, selected: string | null,
   *   selectedBarrier: string | null, writers?: Map<string, string>,
   *   critical?: Set<string> | null}} frame
   */
  const render = (rows, frame) => {
    const range = windowRange(rows.length, frame.scrollTop, frame.viewport);
    if (range.height !== height) {
      height = range.height;
      sizer.style.height = `${height}px`;
    }
    const wanted = new Set();
    for (let i = range.start; i < range.end; i += 1) wanted.add(rows[i].rowKey);
    for (const [key, slot] of live) {
      if (!wanted.has(key)) {
        live.delete(key);
        park(slot);
        spare.push(slot);
      }
    }
    for (let i = range.start; i < range.end; i += 1) {
      const row = rows[i];
      let slot = live.get(row.rowKey);
      if (!slot) {
        slot = spare.pop() || makeSlot();
        slot.sig = null;
        slot.laneSig = null;
        slot.el.hidden = false;
        live.set(row.rowKey, slot);
      }
      const selected = isSelected(row, frame.selected, frame.selectedBarrier);
      const base = row.kind === "branch" ? branchBase(row) : null;
      const sig = signature(row, selected, frame.run, base);
      if (sig !== slot.sig) {
        // Branches start, end and are joined many rows at a time: a row keeps its
        // elements through those, and only what changed is written.
        if (base !== null && base === slot.base) patchBranch(slot, /** @type {any} */ (row), selected, frame.run);
        else fillRow(slot, row, selected, frame.run);
        slot.sig = sig;
        slot.base = base;
      }
      // Outside the signature: a conflict's writers are marked while its card or barrier
      // is selected, whatever the row shows.
      const writer = row.kind === "branch" && frame.writers ? frame.writers.has(row.path) : false;
      slot.el.classList.toggle("pf-conflict-writer", writer);
      slot.lane.classList.toggle("pf-conflict-writer", writer);
      const critical = row.kind === "branch" && frame.critical ? frame.critical.has(row.path) : false;
      slot.el.classList.toggle("pf-critical", critical);
      slot.lane.classList.toggle("pf-critical", critical);
      const top = i * ROW_HEIGHT;
      if (slot.top !== top) {
        slot.el.style.transform = `translateY(${top}px)`;
        slot.top = top;
      }
      slot.el.setAttribute("aria-rowindex", String(i + 1));
      fillLane(slot, lane(row, frame.run, frame.bounds, frame.now), streamLabel(row, frame.run, frame.bounds));
    }
    return range;
  };

  return { render, viewport };
}

/**
 * Hide a slot that left the window and strip its hooks, so selectors only ever match
 * rows that are shown.
 * @param {Slot} slot
 */
function park(slot) {
  slot.el.hidden = true;
  slot.el.className = "pf-row";
  for (const name of ROW_ATTRIBUTES) slot.el.removeAttribute(name);
  slot.lane.className = "pf-cell-lane";
  slot.lane.removeAttribute("data-path");
  slot.lane.removeAttribute("data-publication");
  slot.sig = null;
  slot.base = null;
  slot.laneSig = null;
}

/** One glyph per kind of activity row, so a column of them scans at a glance. */
const ACTIVITY_ICONS = { step: "▶", model: "◆", tool: "⚙", cursor: "➜" };

const ROW_ATTRIBUTES = ["data-activity", "data-seq", "data-path", "data-status", "data-barrier", "data-stop", "data-reused", "data-publication", "data-discard", "title", "aria-expanded"];

/** @param {Row} row @param {string | null} path @param {string | null} barrier */
function isSelected(row, path, barrier) {
  if (row.kind === "barrier") return barrier === row.id;
  if (row.kind === "branch") return barrier === null && path === row.path;
  if (row.kind === "root") return barrier === null && path === "";
  return false;
}

/**
 * Which elements a branch row has: what its publication, its selection and its status
 * leave as they are. Rows with the same base are updated in place (`patchBranch`).
 * @param {Row & {kind: "branch"}} row
 */
function branchBase(row) {
  const inv = row.inv;
  const failed = inv.status === "rejected" && !!inv.error && !inv.cancelled;
  return `p|${row.path}|${inv.key}|${inv.step}|${row.depth}|${inv.hasDirectResult}|${inv.barriers.length}|${inv.interrupted}|${inv.reused?.runId}|${inv.rerun}|${stopKind(inv)}|${failed}`;
}

/** @param {Row} row @param {boolean} selected @param {Run} run @param {string | null} base */
function signature(row, selected, run, base) {
  switch (row.kind) {
    case "root":
      return `r|${row.flow}|${row.step}|${row.status}|${selected}`;
    case "barrier": {
      const b = row.barrier;
      const c = b.counts;
      const marks = barrierMarks(run, row.id);
      const pub = marks ? `${marks.state}|${marks.reason}|${marks.counts.map((n) => `${n.kind}${n.n}`).join(",")}` : "";
      // The label too: a trace's run rebuilt from later spans may name its parent anew.
      return `b|${row.id}|${barrierLabelOf(run, row.id)}|${row.depth}|${b.outcome}|${pub}|${c.queued},${c.running},${c.fulfilled},${c.rejected}|${row.collapsed}|${row.matched}|${b.checkpointRevision}|${b.checkpointFailed}|${b.cancelReason}|${b.interrupted}|${barrierStopped(run, b)}|${selected}`;
    }
    case "branch": {
      const inv = row.inv;
      const marks = branchMarks(run, row.path);
      return `${base}|${inv.status}|${inv.started}|${inv.finished}|${marks ? `${marks.state}|${marks.reason}` : ""}|${selected}`;
    }
    case "activity": {
      const a = row.item;
      return `a|${a.seq}|${row.depth}|${a.state}|${a.label}|${a.detail}|${a.t1}`;
    }
    default:
      return `m|${row.id}|${row.depth}|${row.hidden}|${JSON.stringify(row.counts)}`;
  }
}

/** @param {Slot} slot @param {Row} row @param {boolean} selected @param {Run} run */
function fillRow(slot, row, selected, run) {
  const { el, tree } = slot;
  slot.dot = null;
  slot.chip = null;
  slot.time = null;
  for (const name of ROW_ATTRIBUTES) el.removeAttribute(name);
  slot.lane.removeAttribute("data-path");
  slot.lane.removeAttribute("data-publication");
  slot.lane.className = "pf-cell-lane";
  el.setAttribute("aria-level", String(row.depth + 1));
  el.setAttribute("aria-selected", String(selected));
  tree.replaceChildren();
  tree.style.paddingLeft = `${8 + row.depth * INDENT}px`;
  switch (row.kind) {
    case "root": {
      el.className = `pf-row pf-root pf-status-${row.status}${selected ? " pf-selected" : ""}`;
      // A trace's turn is its root span: no cursor, no canonical state.
      const spans = fromSpans(run);
      el.title = `${row.flow || "turn"}${row.step ? ` · ${spans ? "root span" : "cursor"} ${row.step}` : ""} · ${spans
        ? "the turn: the trace's root span, its model and tool calls (inferred from spans)"
        : "the turn: canonical state, top-level model and tool calls"}`;
      append(tree,
        h("span", "pf-twisty-space"),
        h("span", `pf-dot pf-dot-${row.status}`),
        h("span", "pf-row-key", row.flow || "turn"),
        h("span", "pf-row-step", row.step ? `${spans ? "root span" : "cursor"} ${row.step}` : ""),
        h("span", "pf-row-path", "turn"));
      slot.lane.classList.add("pf-lane-root");
      break;
    }
    case "barrier": {
      const b = row.barrier;
      // A barrier inferred from spans publishes nothing and has no policy of its own.
      const spans = fromSpans(run);
      const marks = spans ? null : barrierMarks(run, row.id);
      const state = marks ? marks.state : "pending";
      el.className = `pf-row pf-barrier pf-outcome-${b.outcome} pf-pub-${state}${b.interrupted ? " pf-interrupted" : ""}${selected ? " pf-selected" : ""}`;
      el.dataset.barrier = row.id;
      el.dataset.publication = state;
      if (marks && marks.reason && state !== "published") el.dataset.discard = marks.reason;
      el.setAttribute("aria-expanded", String(!row.collapsed));
      const twisty = h("button", "pf-twisty", row.collapsed ? "▸" : "▾");
      twisty.setAttribute("type", "button");
      twisty.setAttribute("aria-label", row.collapsed ? "Expand" : "Collapse");
      twisty.tabIndex = -1;
      const counts = h("span", "pf-counts");
      for (const n of marks ? marks.counts : spans ? spanCounts(run, row.id) : []) {
        const count = h("span", `pf-count pf-count-${n.kind}`, `${n.symbol} ${n.n}`);
        count.title = n.title;
        counts.appendChild(count);
      }
      const joinBadge = marks ? h("span", `pf-badge pf-join-badge pf-badge-${marks.badge.kind}`, marks.badge.label) : null;
      if (joinBadge && marks) joinBadge.title = marks.badge.title;
      // Every LangGraph superstep is atomic: its chip would only crowd out the label.
      const superstep = fromLangGraph(run);
      el.title = spans
        ? `${barrierNameOf(run, row.id)}, ${b.branches.length} ${b.branches.length === 1 ? "span" : "spans"}, inferred from span times`
        : superstep
        ? `${barrierNameOf(run, row.id)}, ${b.branches.length} ${b.branches.length === 1 ? "task" : "tasks"}, atomic`
        : `${barrierNameOf(run, row.id)}, ${b.branches.length} ${b.branches.length === 1 ? "branch" : "branches"}, ${b.policy}, forked by ${b.callerStep}`;
      append(tree,
        twisty,
        h("span", "pf-fork-icon"),
        h("span", "pf-row-key pf-barrier-label", barrierLabelOf(run, row.id)),
        superstep || spans ? null : h("span", `pf-chip pf-chip-${b.policy}`, b.policy === "retain-successes" ? "retain" : b.policy),
        b.checkpoint !== "none" ? h("span", "pf-chip", b.checkpointFailed ? "checkpoint failed" : b.checkpointRevision !== null ? `checkpoint r${b.checkpointRevision}` : "root-join") : null,
        b.maxConcurrency !== null ? h("span", "pf-chip", `≤${b.maxConcurrency}`) : null,
        b.cancelReason !== null ? h("span", "pf-chip pf-chip-cancel", "cancelled") : null,
        counts,
        joinBadge,
        row.matched !== b.branches.length ? h("span", "pf-muted", `${row.matched} match`) : null);
      break;
    }
    case "branch": {
      const inv = row.inv;
      const stopped = stopKind(inv);
      const marks = fromSpans(run) ? null : branchMarks(run, row.path);
      markBranch(slot, row, selected, marks);
      if (stopped) el.dataset.stop = stopped;
      if (inv.reused) el.dataset.reused = inv.reused.runId;
      slot.lane.classList.add("pf-lane");
      slot.lane.dataset.path = row.path;
      slot.dot = h("span", dotClass(inv, marks));
      slot.chip = marks && marks.chip ? publicationChip(marks.chip) : null;
      slot.time = h("span", "pf-row-time pf-mono", durationOf(inv));
      append(tree,
        h("span", "pf-twisty-space"),
        slot.dot,
        h("span", "pf-row-key", inv.key || inv.step),
        inv.key && inv.key !== inv.step ? h("span", "pf-row-step", inv.step) : null,
        h("span", "pf-row-path pf-mono", inv.path),
        inv.hasDirectResult ? h("span", "pf-chip", "direct") : null,
        inv.reused ? reusedChip(inv.reused) : null,
        inv.rerun ? rerunChip(inv.rerun) : null,
        stopped ? stopChip(stopped) : null,
        inv.interrupted ? h("span", "pf-chip pf-chip-interrupted", "interrupted") : null,
        inv.status === "rejected" && inv.error && !inv.cancelled ? errorChip(inv.error) : null,
        slot.chip,
        slot.time);
      break;
    }
    case "activity": {
      const a = row.item;
      el.className = `pf-row pf-activity pf-activity-${a.kind} pf-activity-${a.state}`;
      el.dataset.path = row.path;
      el.dataset.activity = a.kind;
      el.dataset.seq = String(a.seq);
      el.title = `${a.title}\n(click: show the run at #${a.seq})`;
      slot.lane.classList.add("pf-lane-activity");
      const duration = a.t1 !== null && a.kind !== "cursor" ? formatSeconds(a.t1 - a.t0) : "";
      append(tree,
        h("span", "pf-twisty-space"),
        h("span", `pf-activity-icon pf-activity-icon-${a.kind}`, ACTIVITY_ICONS[a.kind]),
        h("span", "pf-row-key pf-activity-label", a.label),
        h("span", "pf-row-step pf-activity-detail", a.detail),
        h("span", "pf-row-time pf-mono", duration));
      break;
    }
    default: {
      el.className = "pf-row pf-more";
      el.dataset.barrier = row.id;
      const c = row.counts;
      const detail = [
        c.running ? `${c.running} running` : "", c.queued ? `${c.queued} queued` : "",
        c.fulfilled ? `${c.fulfilled} fulfilled` : "", c.rejected ? `${c.rejected} rejected` : "",
      ].filter(Boolean).join(" · ");
      const more = h("button", "pf-button pf-button-small pf-more-button", `Show ${Math.min(500, row.hidden).toLocaleString("en-US")} more`);
      more.setAttribute("type", "button");
      more.dataset.more = "500";
      const all = h("button", "pf-button pf-button-small pf-more-button", "Show all");
      all.setAttribute("type", "button");
      all.dataset.more = "all";
      append(tree,
        h("span", "pf-twisty-space"),
        h("span", "pf-more-count", `+${row.hidden.toLocaleString("en-US")} more`),
        h("span", "pf-muted", detail),
        more, row.hidden > 500 ? all : null);
      break;
    }
  }
}

/**
 * A branch row's element and lane attributes: what its status, publication and selection
 * change.
 * @param {Slot} slot @param {Row & {kind: "branch"}} row @param {boolean} selected
 * @param {ReturnType<typeof branchMarks>} marks
 */
function markBranch(slot, row, selected, marks) {
  const { el } = slot;
  const inv = row.inv;
  const stopped = stopKind(inv);
  const state = marks ? marks.state : "pending";
  el.className = `pf-row pf-branch pf-status-${inv.status} pf-pub-${state}${inv.interrupted ? " pf-interrupted" : ""}${selected ? " pf-selected" : ""}`;
  el.title = `${inv.key || inv.step} (${inv.step}) · path ${inv.path} · ${inv.status}${inv.interrupted ? " when the run was interrupted" : ""}${stopped ? ` · ${STOP_LABELS[stopped].label}: ${STOP_LABELS[stopped].title}` : ""}${marks ? ` · ${marks.text}` : ""}`;
  el.dataset.path = row.path;
  el.dataset.status = inv.status;
  el.dataset.publication = state;
  if (marks && marks.reason) el.dataset.discard = marks.reason;
  else el.removeAttribute("data-discard");
  slot.lane.dataset.publication = state;
}

/** @param {import("./fold.js").Invocation} inv */
function durationOf(inv) {
  return inv.started !== null && inv.finished !== null ? formatSeconds(inv.finished - inv.started) : "";
}

/**
 * @param {import("./fold.js").Invocation} inv @param {ReturnType<typeof branchMarks>} marks
 */
function dotClass(inv, marks) {
  return `pf-dot pf-dot-${marks ? marks.dot : inv.interrupted ? "interrupted" : inv.status}`;
}

/**
 * A branch row drawn by `fillRow` whose status, timing, publication or selection changed:
 * the same attributes, dot, duration and chip `fillRow` would give it, on the elements it
 * has.
 * @param {Slot} slot @param {Row & {kind: "branch"}} row @param {boolean} selected @param {Run} run
 */
function patchBranch(slot, row, selected, run) {
  const marks = fromSpans(run) ? null : branchMarks(run, row.path);
  slot.el.setAttribute("aria-selected", String(selected));
  markBranch(slot, row, selected, marks);
  const dot = dotClass(row.inv, marks);
  if (slot.dot && slot.dot.className !== dot) slot.dot.className = dot;
  const duration = durationOf(row.inv);
  if (slot.time && slot.time.textContent !== duration) slot.time.textContent = duration;
  const next = marks && marks.chip ? marks.chip : null;
  const chip = slot.chip;
  if (chip && next && chip.className === `pf-chip pf-chip-${next.kind}` && chip.textContent === next.label) {
    chip.title = next.title;
    return;
  }
  if (chip) chip.remove();
  slot.chip = next ? publicationChip(next) : null;
  if (slot.chip) slot.tree.insertBefore(slot.chip, slot.time);
}

/** @param {any} error */
function errorChip(error) {
  const chip = h("span", "pf-chip pf-chip-error", preview(errorLabel(error), 28, true));
  chip.title = errorText(error);
  return chip;
}

/** @param {{kind: string, label: string, title: string}} chip */
function publicationChip(chip) {
  const el = h("span", `pf-chip pf-chip-${chip.kind}`, chip.label);
  el.title = chip.title;
  return el;
}

/**
 * A branch restored from the ledger: a link to where it ran.
 * @param {{runId: string, seq: number | null, tokens: number}} reused
 */
function reusedChip(reused) {
  const chip = /** @type {HTMLAnchorElement} */ (h("a", "pf-chip pf-chip-reused", "reused"));
  chip.href = reusedHref(reused);
  chip.title = reusedTitle(reused);
  return chip;
}

/**
 * A branch the ledger held that a resumed turn ran again: its request changed.
 * @param {string} reason
 */
function rerunChip(reason) {
  const chip = h("span", "pf-chip pf-chip-rerun", "run again");
  chip.title = `Run again although the branch ledger held it: ${reason}`;
  return chip;
}

/** @param {keyof typeof STOP_LABELS} kind */
function stopChip(kind) {
  const chip = h("span", `pf-chip pf-chip-cancel pf-chip-stop-${kind}`, STOP_LABELS[kind].label);
  chip.title = STOP_LABELS[kind].title;
  return chip;
}

/**
 * The text a row's model is writing, placed where its attempt started (kept in the lane's
 * left half, so the end of the text has room), or null.
 * @param {Row} row @param {Run} run @param {{start: number, end: number}} bounds
 * @returns {StreamLabel | null}
 */
function streamLabel(row, run, bounds) {
  const inv = row.kind === "branch" ? row.inv : row.kind === "root" ? run.invocations.get("") : undefined;
  const stream = inv ? laneStream(inv) : null;
  if (!stream) return null;
  return { text: stream.text, x: Math.min(0.5, timeScale(bounds)(stream.offset)), call: stream.call, attempt: stream.attempt };
}

/** @typedef {{text: string, x: number, call: number, attempt: number}} StreamLabel */

/**
 * Move the lane's segment elements into place (created or removed only when the number
 * of segments changes), and the label of the text its model is writing after them.
 * @param {Slot} slot @param {{segments: {kind: string, x0: number, x1: number}[],
 *   marks: {kind: string, x: number}[]}} geometry @param {StreamLabel | null} stream
 */
function fillLane(slot, geometry, stream) {
  let sig = "";
  for (const s of geometry.segments) sig += `${s.kind}${(s.x0 * 1000) | 0},${(s.x1 * 1000) | 0};`;
  for (const m of geometry.marks) sig += `${m.kind}@${(m.x * 1000) | 0};`;
  if (stream) sig += `"${stream.call}.${stream.attempt}@${(stream.x * 1000) | 0}:${stream.text}`;
  if (sig === slot.laneSig) return;
  slot.laneSig = sig;
  /** @type {{cls: string, left: number, width: number, text?: string}[]} */
  const items = [...geometry.segments.map((s) => ({ cls: `pf-seg pf-seg-${s.kind}`, left: s.x0, width: Math.max(0, s.x1 - s.x0) })),
    ...geometry.marks.map((m) => ({ cls: `pf-mark pf-mark-${m.kind}`, left: m.x, width: -1 }))];
  if (stream) items.push({ cls: "pf-lane-stream", left: stream.x, width: -1, text: stream.text });
  const children = slot.lane.children;
  while (children.length > items.length) children[children.length - 1].remove();
  while (children.length < items.length) slot.lane.appendChild(h("i"));
  items.forEach((item, i) => {
    const el = /** @type {HTMLElement} */ (children[i]);
    if (el.className !== item.cls) el.className = item.cls;
    el.style.left = `${(item.left * 100).toFixed(3)}%`;
    if (item.width >= 0) el.style.width = `max(2px, ${(item.width * 100).toFixed(3)}%)`;
    else el.style.removeProperty("width");
    const text = item.text ?? "";
    if (el.textContent !== text) el.textContent = text;
    if (stream && item.text !== undefined) {
      el.dataset.call = String(stream.call);
      el.dataset.attempt = String(stream.attempt);
    } else if (el.dataset.call !== undefined) {
      delete el.dataset.call;
      delete el.dataset.attempt;
    }
  });
}
