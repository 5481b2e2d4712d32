// @ts-check
/**
 * The inspector of one branch (DOM): its status and fate, what it could see at the
 * selected moment, its writes, and what its join published of it.
 * Hooks: `.pf-visible-state`, `.pf-invisible` (`.pf-invisible-row`, a sibling's draft
 * `.pf-invisible-draft`, its inner join's result `.pf-invisible-join`), `.pf-published`.
 */

import { PAGE_SIZE, tableState } from "./barrier_inspector_ui.js";
import { callsAndEvents } from "./calls_ui.js";
import { changeKind, conflictOf } from "./conflict.js";
import { conflictCard } from "./conflict_ui.js";
import { append, badge, h, jsonBlock, pagedTable, table } from "./dom.js";
import { baseAt, publicationOf, published, viewAt } from "./fold.js";
import { formatDuration, requestOrdinal } from "./format.js";
import { barrierLink, discardReason, errorBox, facts, heading, lazy, pathLink, publicationBadge, sectionIn, seqLink, valueCell } from "./inspector_parts_ui.js";
import { barrierLabelOf, fieldLabelOf, fromSpans, labelOf, spansNotice, taskNounOf } from "./labels.js";
import { branchMarks } from "./publication.js";
import { STOP_LABELS, stopKind } from "./stopping.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./inspector_ui.js").InspectorContext} InspectorContext */

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Invocation} inv
 * @param {InspectorContext} ctx
 */
export function branchInspector(parent, view, inv, ctx) {
  const barrier = /** @type {Barrier} */ (view.barriers.get(/** @type {string} */ (inv.barrier)));
  parent.appendChild(heading(labelOf(view, inv.path), `${taskNounOf(view, inv.path)} · path ${inv.path}`));
  const status = h("div", "pf-status-line");
  const stopped = stopKind(inv);
  // A run read from spans publishes nothing: its branches get no publication marks.
  const spans = fromSpans(view);
  const marks = spans ? null : branchMarks(view, inv.path);
  append(status, badge(inv.status, inv.status),
    marks ? publicationBadge(marks) : null,
    stopped ? badge(STOP_LABELS[stopped].label, stopped === "late" ? "conflict" : "cancel") : null,
    inv.cancelTold ? badge("told to cancel", "cancel") : null,
    inv.hasDirectResult ? badge(`direct result via ${inv.directResult.tool}`, "muted") : null,
    inv.interrupted ? badge("interrupted", "interrupted") : null);
  parent.appendChild(status);
  const fate = spans ? null : publicationOf(view, inv.path);
  if (fate && fate.state === "discarded") parent.appendChild(discardReason(fate.text, fate.reason));
  if (stopped) parent.appendChild(h("p", "pf-hint", STOP_LABELS[stopped].title));
  if (inv.interrupted) {
    parent.appendChild(h("p", "pf-hint", "It was still running when the run was interrupted: its executor stopped reporting, so how it ended is not known."));
  }
  const queued = inv.started !== null ? inv.started - barrier.forkedAt : null;
  const ran = inv.started !== null && inv.finished !== null ? inv.finished - inv.started : null;
  const waited = inv.finished !== null && barrier.joinedAt !== null ? barrier.joinedAt - inv.finished : null;
  parent.appendChild(facts(/** @type {any} */ ([
    ["Barrier", barrierLink(barrier.id, barrierLabelOf(view, barrier.id))],
    ["Request", requestOrdinal(inv.index, barrier.branches.length)],
    ["Caller", pathLink(barrier.caller, labelOf(view, barrier.caller))],
    ["Queued", formatDuration(queued)],
    ["Ran", formatDuration(ran)],
    ["Waited at join", formatDuration(waited)],
    ["Tokens", String(inv.tokens)],
  ]), "pf-facts-2"));
  if ((inv.params && Object.keys(inv.params).length) || inv.userMessage) {
    parent.appendChild(facts([
      [fromSpans(view) ? "Span attributes" : "Params", inv.params && Object.keys(inv.params).length ? valueCell(inv.params) : null],
      ["Message", inv.userMessage ?? null],
    ]));
  }
  if (inv.status === "rejected" && inv.error) parent.appendChild(errorBox(inv.error));
  if (spans) {
    // Spans carry no state: the notice stands where the state panels would be empty.
    parent.appendChild(h("p", "pf-hint pf-origin-note pf-spans-note", spansNotice(view, "branch", inv.path)));
    branchEnd(parent, view, inv, ctx);
    return;
  }

  // The state-visibility snapshot.
  const seen = viewAt(view, inv.path);
  const when = ctx.pinned ? `at seq ${view.lastSeq}` : inv.status === "running" || inv.status === "queued" ? "now" : "";
  const body = sectionIn(parent, ctx, "visibility", `What it ${when === "now" ? "can" : "could"} see${when ? ` ${when}` : ""}`, true, "pf-visibility");
  body.appendChild(h("p", "pf-hint", "Its view: the fork-time base, overlaid with its own drafts and what its inner joins published into its scope. Siblings' drafts are not visible until the join."));
  body.appendChild(visibleStateTable(view, seen, baseAt(view, inv.path)));
  const base = sectionIn(parent, ctx, "base", `Fork-time base (${barrier.base === "canonical" ? "canonical state" : `view of ${labelOf(view, barrier.base)}`} at #${barrier.forkedSeq})`, false);
  base.appendChild(jsonBlock(baseAt(view, inv.path), "pf-base-state"));

  const own = sectionIn(parent, ctx, "own", `Its writes (${seen.own.length})`, true, "pf-own");
  if (seen.own.length) {
    // At an invalidated join, say which of its writes were the problem and which were
    // fine but went down with the barrier.
    const story = barrier.outcome === "invalidated" ? conflictOf(view, barrier.id) : null;
    const problem = new Set(story ? story.writers.filter((w) => w.part).map((w) => w.seq) : []);
    own.appendChild(table("pf-own-table", ["Seq", "Field", "As", "Value", "From", ...(story ? ["At the join"] : [])], lazy(seen.own, (c) => {
      const kind = changeKind(view, c);
      return [
        seqLink(c.seq), h("code", "pf-mono", fieldLabelOf(view, c.step, c.field)),
        h("span", `pf-write-kind pf-write-${kind}`, kind === "join" ? "publication" : kind),
        c.deleted ? h("span", "pf-muted", "removed") : valueCell(c.value),
        c.kind === "join" ? append(h("span"), h("span", "", "inner join "), barrierLink(/** @type {string} */ (c.barrier), barrierLabelOf(view, /** @type {string} */ (c.barrier)))) : h("span", "", "own draft"),
        ...(story ? [problem.has(c.seq) ? badge(story.kind === "conflict" ? "in the conflict" : story.kind === "reducer" ? "reducer failed" : "the problem", "conflict")
          : badge(`not in the ${story.kind === "conflict" ? "conflict" : "problem"}`, "muted")] : []),
      ];
    }), (i) => (problem.has(seen.own[i].seq) ? "pf-own-row pf-own-problem" : "pf-own-row")));
  } else own.appendChild(h("p", "pf-muted", "No writes."));

  const invisible = sectionIn(parent, ctx, "invisible", `Sibling writes it could NOT see (${seen.invisible.length})`, true, "pf-invisible");
  if (seen.invisible.length) {
    const visible = seen.state;
    const list = seen.invisible;
    invisible.appendChild(pagedTable("pf-invisible-table", ["Sibling", "Field", "Their write", "It saw"], { count: list.length, at: (i) => {
      const w = list[i];
      const who = h("span", "pf-who");
      append(who, pathLink(w.path, labelOf(view, w.path)), h("span", "pf-muted pf-mono", ` ${w.path} `), badge("not visible", "conflict"));
      const has = Object.prototype.hasOwnProperty.call(visible[w.step] || {}, w.field);
      // A sibling's inner join publishes into that sibling's scope only.
      const how = h("span", `pf-write-kind pf-write-${w.kind === "join" ? "join" : "draft"}`, w.kind === "join" ? "its inner join's result" : "its draft");
      return [who, h("code", "pf-mono", fieldLabelOf(view, w.step, w.field)),
        append(h("span", "pf-invisible-write"), how, w.deleted ? h("span", "pf-muted", " removed") : valueCell(w.value)),
        has ? valueCell(visible[w.step][w.field]) : h("span", "pf-muted", "(absent)")];
    } }, tableState(view, barrier, `invisible:${inv.path}`, "request"), PAGE_SIZE, (i) => `pf-invisible-row pf-invisible-${list[i].kind === "join" ? "join" : "draft"}`));
  } else invisible.appendChild(h("p", "pf-muted", "No sibling had written anything yet."));

  const pub = published(view, inv.path);
  const pubBody = sectionIn(parent, ctx, "published", "What its join published from it", true, "pf-published");
  publishedView(pubBody, view, barrier, inv, pub);

  if (barrier.outcome === "invalidated") parent.appendChild(conflictCard(view, barrier, { highlight: inv.path }));
  branchEnd(parent, view, inv, ctx);
}

/**
 * Its output, calls and events.
 * @param {DocumentFragment} parent @param {Run} view @param {Invocation} inv
 * @param {InspectorContext} ctx
 */
function branchEnd(parent, view, inv, ctx) {
  if (inv.status === "fulfilled" || inv.hasDirectResult) {
    const out = sectionIn(parent, ctx, "output", inv.hasDirectResult ? `Output (direct result of ${inv.directResult.tool})` : "Output", true);
    out.appendChild(jsonBlock(inv.output));
  }
  callsAndEvents(parent, view, inv, ctx);
}

/**
 * The visible state as a table of fields with where each came from.
 * @param {Run} view @param {{state: Record<string, Record<string, any>>, own: any[]}} seen
 * @param {Record<string, Record<string, any>>} base
 */
function visibleStateTable(view, seen, base) {
  const wrap = h("div", "pf-visible-state");
  /** @type {Map<string, any>} */
  const last = new Map();
  for (const c of seen.own) last.set(`${c.step}\u0000${c.field}`, c);
  const rows = [];
  for (const [step, fields] of Object.entries(seen.state)) {
    for (const [field, value] of Object.entries(fields)) {
      const change = last.get(`${step}\u0000${field}`);
      const origin = change ? (change.kind === "join" ? `inner join ${barrierLabelOf(view, change.barrier)} #${change.seq}` : `own draft #${change.seq}`) : "fork-time base";
      rows.push({ step, field, value, origin, kind: change ? change.kind : "base" });
    }
  }
  for (const c of last.values()) {
    if (c.deleted && !Object.prototype.hasOwnProperty.call(seen.state[c.step] || {}, c.field)) {
      rows.push({ step: c.step, field: c.field, value: undefined, origin: `removed by own draft #${c.seq}`, kind: "removed" });
    }
  }
  if (!rows.length) {
    wrap.appendChild(h("p", "pf-muted", Object.keys(base).length ? "Nothing visible." : "Empty: no step state yet."));
    return wrap;
  }
  wrap.appendChild(table("pf-state-table", ["Field", "Value", "From"], lazy(rows, (r) => [
    h("code", "pf-mono", fieldLabelOf(view, r.step, r.field)),
    r.kind === "removed" ? h("span", "pf-muted", "(removed)") : valueCell(r.value),
    h("span", `pf-origin pf-origin-${r.kind}`, r.origin),
  ])));
  return wrap;
}

/**
 * What the join did with it, in the words of `publicationOf`; the fields are listed only
 * when its record applied them.
 * @param {HTMLElement} body @param {Run} view @param {Barrier} barrier @param {Invocation} inv
 * @param {ReturnType<typeof published>} pub
 */
function publishedView(body, view, barrier, inv, pub) {
  const fate = publicationOf(view, inv.path);
  if (!pub || !fate) return;
  if (fate.state === "pending") {
    body.appendChild(h("p", "pf-muted", fate.text));
    return;
  }
  if (fate.state === "discarded") {
    // Said at the top of the inspector too; here it answers the section's question.
    body.appendChild(h("p", "pf-published-none", "Nothing of it was published: its writes were discarded, for the reason given above."));
    return;
  }
  const where = barrier.target === "caller-scope" ? `into the scope of ${labelOf(view, barrier.caller)}` : "into the canonical session state";
  if (pub.replacements.length || pub.contributions.length) {
    const items = [...pub.replacements.map((f) => ({ f, c: null })), ...pub.contributions.map((c) => ({ f: null, c }))];
    body.appendChild(h("p", "", `Its join published ${where}:`));
    body.appendChild(table("pf-published-table", ["Field", "As", "Value"], lazy(items, ({ f, c }) => (f
      ? [h("code", "pf-mono", fieldLabelOf(view, f.step, f.field)), h("span", "", f.deleted ? "removal" : "replacement"), f.deleted ? h("span", "pf-muted", "—") : valueCell(f.value)]
      : [h("code", "pf-mono", fieldLabelOf(view, c.step, c.field)), h("span", "", `contribution to ${c.channel}${c.path !== inv.path ? ` (from ${labelOf(view, c.path)})` : ""}`), valueCell(c.value)]))));
  }
  body.appendChild(h("p", fate.state === "published" ? "pf-published-yes" : "pf-muted", fate.text));
}
