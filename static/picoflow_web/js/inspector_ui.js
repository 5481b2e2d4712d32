// @ts-check
/**
 * The inspector (DOM): what the selected invocation could see, wrote, and had published,
 * its model and tool calls, and its events; or, for a barrier, its join. Everything is
 * rebuilt into a fragment and swapped in at once; runtime values go in as text only.
 *
 * Hooks: `#pf-inspector[data-path]` (`data-barrier` when a barrier is selected),
 * `.pf-visible-state`, `.pf-invisible` (sibling writes it could not see, each a
 * `.pf-invisible-row`), `.pf-published`, `.pf-conflict` (provenance table rows
 * `.pf-conflict-row`), `.pf-events`, `.pf-model-call`, `.pf-tool-call`; the publication
 * badge `.pf-publication-badge[data-publication]`, and why it was discarded,
 * `.pf-discard-reason[data-discard]`; on a run read from OpenTelemetry spans, the notice
 * that stands instead of its (absent) state views, `.pf-spans-note`.
 */

import { barrierInspector } from "./barrier_inspector_ui.js";
import { branchInspector } from "./branch_inspector_ui.js";
import { callsAndEvents } from "./calls_ui.js";
import { append, badge, h, table } from "./dom.js";
import { formatDuration, interruptionText, runStatusKind } from "./format.js";
import { errorBox, facts, heading, lazy, pathLink, sectionIn, seqLink, valueCell } from "./inspector_parts_ui.js";
import { fieldLabelOf, fromLangGraph, fromSpans, labelOf, spansNotice } from "./labels.js";
import { endedExplanation, endingEvent } from "./stopping.js";

// The inspector's parts live in their own modules; this one stays the door the page imports.
export { PAGE_SIZE } from "./barrier_inspector_ui.js";
export { conflictCard } from "./conflict_ui.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */

/**
 * @typedef {object} InspectorContext
 * @property {Run} view  the model drawn (live, or stopped at the pinned seq)
 * @property {string | null} path  selected invocation ("" is the turn)
 * @property {string | null} barrier  selected barrier id
 * @property {Map<string, boolean>} open  remembered open/closed sections, by name
 * @property {boolean} pinned  the view is the fold stopped at a seq (replay)
 */

/**
 * Rebuild the inspector for the selection, keeping it scrolled at `scroll`.
 *
 * The caller reads `scroll` with its other layout reads, before the frame's writes: read
 * here, after them, it would force a layout of the whole page (tens of ms on a big run).
 * @param {HTMLElement} container @param {InspectorContext} ctx @param {number} scroll
 */
export function renderInspector(container, ctx, scroll) {
  const fragment = document.createDocumentFragment();
  const { view } = ctx;
  container.removeAttribute("data-barrier");
  if (ctx.barrier !== null && view.barriers.has(ctx.barrier)) {
    const barrier = /** @type {Barrier} */ (view.barriers.get(ctx.barrier));
    container.dataset.path = barrier.caller;
    container.dataset.barrier = barrier.id;
    barrierInspector(fragment, view, barrier, ctx);
  } else if (ctx.path !== null && view.invocations.has(ctx.path)) {
    container.dataset.path = ctx.path;
    const inv = /** @type {Invocation} */ (view.invocations.get(ctx.path));
    if (ctx.path === "") rootInspector(fragment, view, inv, ctx);
    else branchInspector(fragment, view, inv, ctx);
  } else {
    container.dataset.path = ctx.path ?? "";
    const wanted = ctx.barrier !== null ? `barrier ${ctx.barrier}` : ctx.path ? `branch ${ctx.path}` : "";
    fragment.appendChild(h("p", "pf-empty", wanted
      ? `No ${wanted} at this point of the run (it may not have forked yet).`
      : "Select a branch or barrier to see what it could see, what it wrote, and what its join published."));
  }
  container.replaceChildren(fragment);
  if (scroll) container.scrollTop = scroll;  // a panel at the top stays there by itself
}

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Invocation} inv
 * @param {InspectorContext} ctx
 */
function rootInspector(parent, view, inv, ctx) {
  parent.appendChild(heading(view.flow || "Turn", "the top level"));
  const status = h("div", "pf-status-line");
  append(status, badge(view.status, runStatusKind(view.status)), view.conflicts.length ? badge(`${view.conflicts.length} invalidated join${view.conflicts.length > 1 ? "s" : ""}`, "conflict") : null);
  parent.appendChild(status);
  if (fromLangGraph(view)) {
    // What the page draws for LangGraph is the tracer's reading of its callbacks.
    parent.appendChild(h("p", "pf-hint pf-origin-note", "Recorded from LangGraph: supersteps shown as barriers, nodes and Send tasks as branches, channel writes as contributions; timings from callbacks."));
  }
  const spans = fromSpans(view);
  if (spans) parent.appendChild(h("p", "pf-hint pf-origin-note pf-spans-note", spansNotice(view, "turn")));
  parent.appendChild(facts([
    ["Message", view.message ?? ""],
    ["Cursor", spans ? null : view.cursor ?? "—"],
    ["Tokens", `${view.tokens.total_tokens ?? 0} (${view.tokens.input_tokens ?? 0} in · ${view.tokens.output_tokens ?? 0} out)`],
    ["Barriers", String(view.barriers.size)],
    ["Branches", String(view.branchCount)],
  ]));
  if (view.reply) {
    const body = sectionIn(parent, ctx, "reply", "Reply", true);
    body.appendChild(h("p", "pf-reply-text", view.reply.message));
  }
  if (view.error) parent.appendChild(errorBox(view.error));
  if (view.interruption) {
    const box = h("div", "pf-error-box pf-interruption");
    append(box,
      h("div", "pf-error-code pf-mono", `run.interrupted at #${view.interruption.seq} · silent for ${formatDuration(view.interruption.silent_for)}`),
      h("p", "pf-error-message", interruptionText(view.interruption)));
    parent.appendChild(box);
  }
  const end = view.status === "cancelled" ? endingEvent(view) : null;
  if (end && end.type === "turn.cancelled") {
    // The same sentences as the page's panel, as of the fold shown (a replay may be pinned).
    const explained = endedExplanation(view, null);
    const box = h("div", "pf-error-box pf-cancellation");
    box.appendChild(h("div", "pf-error-code pf-mono", `turn.cancelled at #${end.seq}`));
    if (explained) {
      if (explained.headline) box.appendChild(h("p", "pf-error-message", explained.headline));
      for (const line of explained.lines) box.appendChild(h("p", "pf-error-message", line));
    }
    parent.appendChild(box);
  }
  // A run read from spans has no state: the notice above says so, no empty panel does.
  if (!spans) {
    sectionIn(parent, ctx, "canonical", ctx.pinned ? `Canonical state at seq ${view.lastSeq}` : "Canonical state", true, "pf-visibility")
      .appendChild(canonicalState(view));
    // What the session store holds is above; what the stopped turn only had in memory, here.
    if (view.unsaved.length) {
      sectionIn(parent, ctx, "unsaved", `Published in memory, not saved: the turn was stopped (${view.unsaved.length})`, true, "pf-unsaved")
        .appendChild(unsavedState(view));
    }
  }
  if (view.trail.length) {
    const steps = view.trail.length;
    sectionIn(parent, ctx, "trail", `Steps entered (${steps})`, false, "", (trail) => {
      trail.appendChild(table("pf-trail-table", ["Seq", "Step", "How", "Path"], lazy(view.trail.slice(0, steps), (t) => [
        seqLink(t.seq), h("code", "pf-mono", t.step), h("span", "", t.how), t.path ? pathLink(t.path, labelOf(view, t.path)) : h("span", "pf-muted", "turn"),
      ])));
    });
  }
  if (view.anomalies.length || view.overflows.length) {
    const warn = sectionIn(parent, ctx, "anomalies", "Stream problems", true);
    for (const o of view.overflows) warn.appendChild(h("p", "pf-error-message", `A sink dropped events ${o.first}–${o.last} (${o.sink}).`));
    for (const a of view.anomalies.slice(0, 50)) warn.appendChild(h("p", "pf-error-message", `#${a.seq}: ${a.message}`));
  }
  callsAndEvents(parent, view, inv, ctx);
}

/** A stopped turn's fields published in memory but never saved. @param {Run} view */
function unsavedState(view) {
  const wrap = h("div", "pf-unsaved-state");
  const revision = view.cancellation && view.cancellation.revision !== null ? ` at revision ${view.cancellation.revision}` : "";
  wrap.appendChild(h("p", "pf-hint", `The session stays${revision}: these values were published in memory after its last save, and were never saved.`));
  wrap.appendChild(table("pf-state-table", ["Field", "Value in memory"], lazy(view.unsaved, (u) => [
    h("code", "pf-mono pf-unsaved-row", fieldLabelOf(view, u.step, u.field)),
    u.deleted ? h("span", "pf-muted", "removed in memory") : valueCell(u.value),
  ])));
  return wrap;
}

/** The canonical state as a table of fields. @param {Run} view */
function canonicalState(view) {
  const wrap = h("div", "pf-visible-state");
  /** @type {[string, string, any][]} */
  const rows = [];
  for (const [step, fields] of Object.entries(view.state)) {
    for (const [field, value] of Object.entries(fields)) rows.push([step, field, value]);
  }
  wrap.appendChild(rows.length
    ? table("pf-state-table", ["Field", "Value"], lazy(rows, ([step, field, value]) => [h("code", "pf-mono", fieldLabelOf(view, step, field)), valueCell(value)]))
    : h("p", "pf-muted", "Empty: no step state yet."));
  return wrap;
}
