// @ts-check
/**
 * The inspector of one barrier (DOM): its join, its overview, who the join waited for, its
 * reductions and publication, and its branches in paged tables that keep their page and
 * order while a live run redraws them.
 */

import { conflictCard } from "./conflict_ui.js";
import { append, badge, h, pagedTable, table } from "./dom.js";
import { publicationOf } from "./fold.js";
import { formatDuration } from "./format.js";
import { discardReason, facts, heading, lazy, pathLink, publicationBadge, sectionIn, seqLink, shortList, valueCell } from "./inspector_parts_ui.js";
import { barrierLabelOf, fieldLabelOf, fromLangGraph, fromSpans, labelOf, spansNotice } from "./labels.js";
import { joinWaits } from "./layout.js";
import { ORDERS, durationOf, orderedBranches } from "./overview.js";
import { overviewView } from "./overview_ui.js";
import { barrierMarks, branchMarks } from "./publication.js";
import { barrierStopped } from "./stopping.js";
import { timingSections } from "./timing_ui.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./inspector_ui.js").InspectorContext} InspectorContext */

/** Rows per page of the per-branch tables. */
export const PAGE_SIZE = 100;
/** A barrier with more branches than this gets the overview open by default. */
const OVERVIEW_OPEN = 20;

/**
 * Page and order of each per-branch table, by run, barrier and table: the inspector is
 * rebuilt while a run is live, and a reader on page 7 stays on page 7.
 * @type {Map<string, {page: number, order: keyof typeof ORDERS}>}
 */
const TABLES = new Map();

/** @param {Run} view @param {Barrier} barrier @param {string} name @param {keyof typeof ORDERS} order */
export function tableState(view, barrier, name, order) {
  const key = `${view.runId}|${barrier.id}|${name}`;
  let state = TABLES.get(key);
  if (!state) {
    state = { page: 0, order };
    TABLES.set(key, state);
  }
  return state;
}

/**
 * A paged per-branch table with a choice of order; switching order goes back to page 1.
 * @param {Run} view @param {Barrier} barrier @param {string} name @param {keyof typeof ORDERS} order
 * @param {string} className @param {string[]} columns
 * @param {(path: string, rank: number) => (string | Node)[]} cells
 */
function branchTable(view, barrier, name, order, className, columns, cells) {
  const state = tableState(view, barrier, name, order);
  const wrap = h("div", "pf-branch-paged");
  wrap.dataset.table = name;
  const select = /** @type {HTMLSelectElement} */ (h("select", "pf-input pf-input-small pf-table-order"));
  select.setAttribute("aria-label", "Order");
  for (const [value, label] of Object.entries(ORDERS)) {
    const option = /** @type {HTMLOptionElement} */ (h("option", "", label));
    option.value = value;
    select.appendChild(option);
  }
  select.value = state.order;
  const holder = h("div");
  const draw = () => {
    const paths = orderedBranches(view, barrier.id, state.order);
    holder.replaceChildren(pagedTable(className, columns, { count: paths.length, at: (i) => cells(paths[i], i) }, state, PAGE_SIZE));
  };
  select.addEventListener("change", () => {
    state.order = /** @type {keyof typeof ORDERS} */ (select.value);
    state.page = 0;
    draw();
  });
  draw();
  const bar = h("div", "pf-table-controls");
  append(bar, h("label", "pf-muted pf-small", "Order "), select);
  return append(wrap, bar, holder);
}

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Barrier} barrier
 * @param {InspectorContext} ctx
 */
export function barrierInspector(parent, view, barrier, ctx) {
  // A run read from spans: the barrier is inferred from overlapping child spans and
  // publishes nothing, so it gets no publication marks and no "branches see".
  const spans = fromSpans(view);
  const what = spans ? "inferred from spans" : fromLangGraph(view) ? "a LangGraph superstep" : `forked by ${barrier.callerStep}`;
  parent.appendChild(heading(barrierLabelOf(view, barrier.id), `id ${barrier.id} · ${what}`));
  const status = h("div", "pf-status-line");
  const marks = spans ? null : barrierMarks(view, barrier.id);
  append(status, marks ? publicationBadge(marks) : null,
    spans ? null : badge(barrier.policy, "muted"),
    barrier.checkpoint !== "none" ? badge(barrier.checkpointFailed ? "checkpoint failed" : barrier.checkpointRevision !== null ? `checkpoint saved r${barrier.checkpointRevision}` : "root-join checkpoint", barrier.checkpointFailed ? "conflict" : "muted") : null,
    barrier.cancelReason !== null ? badge(`cancelled: ${barrier.cancelReason}`, "cancel") : null);
  parent.appendChild(status);
  if (barrier.interrupted) {
    parent.appendChild(h("p", "pf-hint", "It was still open when the run was interrupted: its join never ran."));
  }
  if (barrierStopped(view, barrier)) {
    parent.appendChild(h("p", "pf-hint", "It was still open when the turn was stopped: its join never ran, so nothing of it was published."));
  }
  if (spans) parent.appendChild(h("p", "pf-hint pf-origin-note pf-spans-note", spansNotice(view, "barrier", barrier.id)));
  const c = barrier.counts;
  parent.appendChild(facts([
    ["Caller", pathLink(barrier.caller, labelOf(view, barrier.caller))],
    ["Branches", `${barrier.branches.length}: ${c.fulfilled} fulfilled, ${c.rejected} rejected, ${c.running} running, ${c.queued} queued`],
    ["Branches see", spans ? null : barrier.base === "canonical" ? "the canonical state at the fork" : `the view of ${labelOf(view, barrier.base)} at the fork`],
    ["Forked at", seqLink(barrier.forkedSeq)],
    ["Joined at", barrier.joinedSeq !== null ? seqLink(barrier.joinedSeq) : null],
    ["Max concurrency", barrier.maxConcurrency !== null ? String(barrier.maxConcurrency) : null],
    ["Branch timeout", barrier.branchTimeout !== null ? formatDuration(barrier.branchTimeout) : null],
    ["Token budget", barrier.tokenBudget !== null ? String(barrier.tokenBudget) : null],
  ]));
  if (barrier.outcome === "invalidated") parent.appendChild(conflictCard(view, barrier));

  if (barrier.branches.length > 1) {
    const body = sectionIn(parent, ctx, "overview", `Overview of ${barrier.branches.length.toLocaleString("en-US")} branches`, barrier.branches.length > OVERVIEW_OPEN, "pf-overview-section");
    body.appendChild(overviewView(view, barrier));
  }

  const waits = joinWaits(view, barrier.id);
  if (waits && barrier.joinedAt !== null) {
    const body = sectionIn(parent, ctx, "waits", "Who the join waited for", true, "pf-waits");
    if (waits.straggler) {
      const p = h("p");
      append(p, h("span", "", "Last to finish: "), pathLink(waits.straggler.path, waits.straggler.key), h("span", "", `; the join ran ${formatDuration(barrier.joinedAt - waits.straggler.finished)} later.`));
      body.appendChild(p);
    }
    const joinedAt = barrier.joinedAt;
    body.appendChild(branchTable(view, barrier, "waits", "slowest", "pf-waits-table", ["#", "Branch", "Status", "Ran", "Finished", "Idle until join"], (path, rank) => {
      const inv = view.invocations.get(path);
      const finished = inv ? inv.finished : null;
      return [h("span", "pf-mono pf-muted", String(rank + 1)), pathLink(path, inv?.key || path), badge(inv?.status || "?", inv?.status || "muted"),
        h("span", "pf-mono pf-ran", formatDuration(inv ? durationOf(inv) : null)),
        h("span", "pf-mono", finished !== null ? formatDuration(finished) : "—"),
        h("span", "pf-mono", formatDuration(finished !== null ? Math.max(0, joinedAt - finished) : null))];
    }));
  }
  if (barrier.reductions.length) {
    const body = sectionIn(parent, ctx, "reductions", `Reductions (${barrier.reductions.length})`, true, "pf-reductions");
    body.appendChild(h("p", "pf-hint", "Contributions are reduced in request-path order, never in completion order."));
    for (const r of barrier.reductions) {
      const box = h("div", "pf-reduction");
      append(box, h("div", "pf-call-head", `${fieldLabelOf(view, r.step, r.field)} · ${r.channel}`));
      const inputs = r.inputs || [];
      box.appendChild(pagedTable("pf-reduction-table", ["#", "Branch", "Value"], lazy(inputs, (input, i) => [
        h("span", "pf-mono", String(i + 1)), pathLink(String(input.path), labelOf(view, String(input.path))), valueCell(input.value),
      ]), tableState(view, barrier, `reduction:${r.step}.${r.field}`, "request"), PAGE_SIZE));
      const order = r.completion_order || [];
      // Thousands of paths in one line say nothing; the first few show the interleaving.
      const completion = order.length > 20 ? `${order.slice(0, 20).join(" → ")} → … (${order.length.toLocaleString("en-US")} in all)` : order.join(" → ");
      box.appendChild(facts([["Completion order", completion || "—"], ["Result", valueCell(r.result)]]));
      body.appendChild(box);
    }
  }
  if (barrier.outcome === "published" && marks) {
    const body = sectionIn(parent, ctx, "publication", barrier.target === "canonical" ? "Publication into the canonical state" : `Publication into the scope of ${labelOf(view, barrier.caller)}`, true, "pf-published");
    if (barrier.published.length && marks.state !== "discarded") {
      body.appendChild(table("pf-published-table", ["Field", "Writer", "Value"], lazy(barrier.published, (f) => [
        h("code", "pf-mono", `${f.step}.${f.field}`),
        f.writer ? pathLink(f.writer, labelOf(view, f.writer)) : h("span", "pf-muted", "reduced"),
        f.deleted ? h("span", "pf-muted", "(removed)") : valueCell(f.value),
      ])));
      body.appendChild(h("p", marks.state === "published" ? "pf-published-yes" : "pf-muted", marks.text));
    } else body.appendChild(discardReason(marks.text, marks.reason));
    if (barrier.discarded.length) {
      body.appendChild(h("h3", "pf-subtitle", "Discarded"));
      body.appendChild(pagedTable("pf-discarded-table", ["Branch", "Why"], lazy(barrier.discarded, (d) => {
        const path = barrier.branches[d.index];
        const fate = path === undefined ? null : publicationOf(view, path);
        const why = h("span", "pf-discard-reason", fate && fate.state === "discarded" ? fate.text : String(d.reason));
        if (fate && fate.reason) why.dataset.discard = fate.reason;
        return [pathLink(path, labelOf(view, path)), why];
      }), tableState(view, barrier, "discarded", "request"), PAGE_SIZE));
    }
  } else if (marks && marks.state === "discarded") {
    const body = sectionIn(parent, ctx, "publication", "Publication", true, "pf-published");
    body.appendChild(discardReason(marks.text, marks.reason));
  }
  if (barrier.cancel) {
    const body = sectionIn(parent, ctx, "cancel", "Cancellation", true, "pf-cancel");
    body.appendChild(facts([
      ["Reason", barrier.cancelReason ?? ""], ["Requested at", seqLink(barrier.cancel.seq)],
      ["Told (running)", shortList(barrier.cancel.running)],
      ["Never started (queued)", shortList(barrier.cancel.queued)],
      ["Lost publication rights", shortList(barrier.cancel.closed)],
    ]));
  }
  timingSections(parent, view, barrier, ctx.open);
  const branches = sectionIn(parent, ctx, "branches", `Branches (${barrier.branches.length})`, barrier.branches.length <= 20);
  branches.appendChild(branchTable(view, barrier, "branches", "request", "pf-branch-table", ["#", "Key", "Step", "Status", "Ran", "Publication"], (path) => {
    const inv = view.invocations.get(path);
    const m = spans ? null : branchMarks(view, path);
    return [h("span", "pf-mono", String((inv?.index ?? 0) + 1)), pathLink(path, inv?.key || path), h("span", "", inv?.step || ""), badge(inv?.status || "?", inv?.status || "muted"),
      h("span", "pf-mono", formatDuration(inv ? durationOf(inv) : null)),
      m ? publicationBadge(m) : h("span", "pf-muted", "—")];
  }));
}
