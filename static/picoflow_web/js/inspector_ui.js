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
 * `.pf-discard-reason[data-discard]`.
 */

import { changeKind, conflictOf } from "./conflict.js";
import { differencePlace } from "./diff.js";
import { append, badge, h, jsonBlock, pagedTable, section, table } from "./dom.js";
import { baseAt, published, publicationOf, viewAt } from "./fold.js";
import { describeEvent, errorLabel, formatDuration, interruptionText, messageText, preview, requestOrdinal, runStatusKind } from "./format.js";
import { joinWaits } from "./layout.js";
import { ORDERS, durationOf, orderedBranches } from "./overview.js";
import { overviewView } from "./overview_ui.js";
import { barrierMarks, branchMarks } from "./publication.js";
import { STOP_LABELS, barrierStopped, endedExplanation, endingEvent, stopKind } from "./stopping.js";
import { timingSections } from "./timing_ui.js";

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

const EVENT_LIST_LIMIT = 300;
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
function tableState(view, barrier, name, order) {
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
 * At most `limit` of a list, then how many more.
 * @param {string[]} items @param {number} [limit]
 */
function shortList(items, limit = 20) {
  if (!items.length) return "—";
  const shown = items.slice(0, limit).join(", ");
  return items.length > limit ? `${shown} … and ${(items.length - limit).toLocaleString("en-US")} more` : shown;
}

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

// -- shared pieces ---------------------------------------------------------------------------

/**
 * A lazy table source over `items`: rows are built only when shown.
 * @template T @param {T[]} items @param {(item: T, i: number) => (string | Node)[]} cells
 */
function lazy(items, cells) {
  return { count: items.length, at: (/** @type {number} */ i) => cells(items[i], i) };
}

/**
 * A remembered collapsible section.
 * @param {DocumentFragment | HTMLElement} parent @param {InspectorContext} ctx
 * @param {string} name @param {string} title @param {boolean} open @param {string} [className]
 */
function sectionIn(parent, ctx, name, title, open, className = "") {
  const s = section(title, ctx.open.has(name) ? /** @type {boolean} */ (ctx.open.get(name)) : open, className);
  s.root.dataset.section = name;
  s.root.addEventListener("toggle", () => ctx.open.set(name, s.root.open));
  parent.appendChild(s.root);
  return s.body;
}

/** A link-like button that selects an invocation. @param {string} path @param {string} text */
function pathLink(path, text) {
  const b = h("button", "pf-linkbutton pf-mono", text);
  b.setAttribute("type", "button");
  b.dataset.selectPath = path;
  return b;
}

/** A link-like button that selects a barrier. @param {string} id */
function barrierLink(id) {
  const b = h("button", "pf-linkbutton pf-mono", id);
  b.setAttribute("type", "button");
  b.dataset.selectBarrier = id;
  return b;
}

/** A button that pins the scrubber at a seq. @param {number} seq */
function seqLink(seq) {
  const b = h("button", "pf-linkbutton pf-mono", `#${seq}`);
  b.setAttribute("type", "button");
  b.dataset.pinSeq = String(seq);
  b.title = "Show the run as it was at this event";
  return b;
}

/** @param {any} value */
function valueCell(value) {
  const text = preview(value, 400);
  if (text.length < 60 && !text.includes("\n")) return h("code", "pf-value", text);
  return jsonBlock(value, "pf-value-block");
}

/** @param {[string, string | Node | null][]} items @param {string} [extra] */
function facts(items, extra = "") {
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
function heading(title, sub) {
  const el = h("div", "pf-inspector-head");
  append(el, h("h2", "pf-inspector-title", title), sub ? h("span", "pf-muted pf-mono", sub) : null);
  return el;
}

/**
 * The publication badge of a branch or barrier, from publication.js.
 * @param {{state: string, badge: {kind: string, label: string, title: string}}} marks
 */
function publicationBadge(marks) {
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
function discardReason(text, reason) {
  const el = h("p", "pf-published-none pf-discard-reason", text);
  if (reason) el.dataset.discard = reason;
  return el;
}

/** @param {any} error */
function errorBox(error) {
  const box = h("div", "pf-error-box");
  append(box,
    h("div", "pf-error-code pf-mono", `${errorLabel(error)}${error?.code && error.code !== "internal" ? ` · ${error.code}` : ""}`),
    h("p", "pf-error-message", error?.message || ""));
  if (error?.extra && Object.keys(error.extra).length && !error.extra.provenance) box.appendChild(jsonBlock(error.extra));
  return box;
}

/** How each kind of write reads on the card. */
const WRITE_LABELS = {
  replacement: "replacement", removal: "removal", contribution: "contribution",
  mutation: "write to shared state", output: "output", write: "write",
};

/** The card's words for the problem's writes, per kind of problem. */
const PROBLEM_TITLES = {
  conflict: "The conflicting writes", mutation: "The refused write", reducer: "The contributions the reducer could not combine",
  output: "The output", configuration: "The write", checkpoint: "", other: "The writes",
};

/**
 * One difference inside a value, as a line: `› rooms[0]: 2 → 3`.
 * @param {string} field @param {{path: (string | number)[], kind: string, before: any, after: any}} d
 */
function differenceLine(field, d) {
  const place = differencePlace({ step: "", field, path: d.path, kind: /** @type {any} */ (d.kind), before: d.before, after: d.after }).slice(1);
  const line = h("li", `pf-diff-line pf-diff-${d.kind}`);
  const text = d.kind === "added" ? `${place}: + ${preview(d.after, 120)}`
    : d.kind === "removed" ? `${place}: − ${preview(d.before, 120)}`
      : `${place}: ${d.before === undefined ? "(absent)" : preview(d.before, 120)} → ${preview(d.after, 120)}`;
  line.textContent = text;
  return line;
}

/** @param {string} field @param {any[]} changes @param {string} empty */
function differenceList(field, changes, empty) {
  if (!changes.length) return h("p", "pf-muted pf-small", empty);
  const list = h("ul", "pf-diff-list");
  for (const d of changes.slice(0, 40)) list.appendChild(differenceLine(field, d));
  if (changes.length > 40) list.appendChild(h("li", "pf-muted", `… ${changes.length - 40} more differences`));
  return list;
}

/** A button that moves the scrubber to a write's event. @param {import("./conflict.js").Writer} w */
function writeEventLink(w) {
  if (w.seq === null) return h("span", "pf-muted", "not recorded");
  const b = seqLink(w.seq);
  b.classList.add("pf-write-link");
  b.dataset.path = w.path;
  b.textContent = `#${w.seq} ${w.event ?? ""}`.trim();
  b.title = "Move the scrubber to this event";
  return b;
}

/** @param {import("./conflict.js").Writer} w */
function writerWho(w) {
  const who = h("span", "pf-who");
  append(who, pathLink(w.path, w.key), h("span", "pf-muted pf-mono", ` ${w.path}`));
  return who;
}

/** @param {import("./conflict.js").Writer} w */
function baseCell(w) {
  if (w.kind === "output") return h("span", "pf-muted", "—");
  if (!w.hasBase) return h("span", "pf-muted pf-base-absent", "(absent at its fork)");
  return valueCell(w.base);
}

/**
 * The conflict card of an invalidated barrier, from `conflictOf`: the field and its step,
 * why the join refused, the fix that usually applies, each write at stake with its value,
 * its base at the fork and a link to its event, the proposals side by side with their
 * structural differences, and the branches' other writes, which were not part of it.
 * @param {Run} view @param {Barrier} barrier
 * @param {{highlight?: string | null, at?: number | null, ahead?: boolean}} [options]
 *   `highlight`: a branch path to mark; `at`: the scrubber's seq, to mark the write there;
 *   `ahead`: the scrubber is before this join (the card is drawn from the whole run)
 */
export function conflictCard(view, barrier, options = {}) {
  const { highlight = null, at = null, ahead = false } = options;
  const c = conflictOf(view, barrier.id);
  const card = h("div", `pf-conflict${ahead ? " pf-conflict-ahead" : ""}`);
  card.dataset.barrier = barrier.id;
  if (!c) return card;
  card.dataset.kind = c.kind;
  const title = h("div", "pf-conflict-title");
  append(title, h("strong", "pf-conflict-heading", c.title), barrierLink(barrier.id), badge(c.code, "conflict"),
    c.joinSeq !== null ? append(h("span", "pf-muted"), h("span", "", "join "), seqLink(c.joinSeq)) : null);
  card.appendChild(title);
  if (ahead && at !== null) {
    card.appendChild(h("p", "pf-hint pf-conflict-when", `The scrubber is at #${at}, before this join ran (#${c.joinSeq}): the card tells what happens there.`));
  }
  const facts2 = h("dl", "pf-facts pf-conflict-facts");
  /** @param {string} label @param {string | Node} value @param {string} cls */
  const fact = (label, value, cls) => {
    const row = h("div", cls);
    const dd = h("dd");
    if (typeof value === "string") dd.textContent = value;
    else dd.appendChild(value);
    append(row, h("dt", "", label), dd);
    facts2.appendChild(row);
  };
  if (c.field) fact("Field", h("code", "pf-mono pf-conflict-field", c.field), "pf-conflict-field-row");
  if (c.step) fact("Owned by", h("code", "pf-mono pf-conflict-step", c.step), "pf-conflict-step-row");
  fact("Why", c.reason, "pf-conflict-reason");
  fact("Fix", c.fix, "pf-conflict-fix");
  if (c.initial !== undefined) fact("Reduced from", valueCell(c.initial), "pf-conflict-initial");
  card.appendChild(facts2);

  const problem = c.writers.filter((w) => w.part);
  const others = c.writers.filter((w) => !w.part);
  if (problem.length) {
    card.appendChild(h("h3", "pf-subtitle", PROBLEM_TITLES[c.kind]));
    const hasResult = problem.some((w) => w.result !== undefined);
    const columns = ["Branch", "Write", "As", "Proposed value", "Base at its fork", ...(hasResult ? ["Its view after"] : []), "Event"];
    card.appendChild(table("pf-provenance", columns, problem.map((w) => [
      writerWho(w), h("code", "pf-mono", `${w.step}.${w.field}`),
      badge(WRITE_LABELS[w.kind], "conflict"),
      w.hasValue ? valueCell(w.value) : h("span", "pf-muted", w.kind === "removal" ? "(removed)" : "—"),
      baseCell(w),
      ...(hasResult ? [w.result !== undefined ? valueCell(w.result) : h("span", "pf-muted", "—")] : []),
      writeEventLink(w),
    ]), (i) => {
      const w = problem[i];
      return `pf-conflict-row${highlight !== null && w.path === highlight ? " pf-highlight" : ""}${at !== null && w.seq === at ? " pf-at-scrubber" : ""}`;
    }));
    if (problem.some((w) => w.kind === "mutation")) {
      card.appendChild(h("p", "pf-hint", "The runtime refuses such a write before it becomes a draft, so no write event exists: its link goes to the event where the error surfaced."));
    }
    // Side by side: what each proposed, against what it saw at its fork, and the
    // proposals against each other; a long list of writers stays a table only.
    const sided = problem.filter((w) => w.hasValue);
    if (sided.length && sided.length <= 4) {
      const sides = h("div", "pf-conflict-sides");
      for (const w of sided) {
        const side = h("div", "pf-conflict-side");
        side.dataset.path = w.path;
        const head = h("div", "pf-conflict-side-head");
        append(head, writerWho(w), badge(WRITE_LABELS[w.kind], "conflict"), writeEventLink(w));
        side.appendChild(head);
        side.appendChild(h("div", "pf-muted pf-small", "proposed"));
        side.appendChild(jsonBlock(w.value, "pf-conflict-value"));
        side.appendChild(h("div", "pf-muted pf-small", w.hasBase ? "its base at the fork" : "its base at the fork: the field was absent"));
        if (w.hasBase) side.appendChild(jsonBlock(w.base, "pf-conflict-base"));
        if (w.kind !== "contribution") side.appendChild(differenceList(w.field, w.changes, "the same as its base"));
        else if (w.result !== undefined) side.appendChild(h("p", "pf-muted pf-small", `alone in its own view it reduced ${w.hasBase ? preview(w.base, 60) : "the empty value"} to ${preview(w.result, 60)}`));
        sides.appendChild(side);
      }
      card.appendChild(sides);
    }
    for (const pair of c.between) {
      const a = problem[pair.a];
      const b = problem[pair.b];
      const box = h("div", "pf-conflict-between");
      box.appendChild(h("div", "pf-small", `${b.key}'s proposal against ${a.key}'s (${pair.changes.length} difference${pair.changes.length === 1 ? "" : "s"}):`));
      box.appendChild(differenceList(a.field, pair.changes, "the same value: still a conflict, because a join does not compare replacements"));
      card.appendChild(box);
    }
  }
  if (others.length) {
    const noun = c.kind === "conflict" ? "conflict" : c.kind === "mutation" ? "mutation" : c.kind === "reducer" ? "reducer failure" : "problem";
    card.appendChild(h("h3", "pf-subtitle", `Other writes of these branches: not part of the ${noun}`));
    card.appendChild(h("p", "pf-hint", `Nothing was wrong with these, but a join that is invalidated publishes nothing, so they were discarded with the rest.`));
    card.appendChild(table("pf-bystanders", ["Branch", "Write", "As", "Value", "Event"], others.map((w) => [
      writerWho(w), h("code", "pf-mono", `${w.step}.${w.field}`),
      append(h("span"), badge(WRITE_LABELS[w.kind], "muted"), h("span", "pf-muted pf-small", ` not part of the ${noun}`)),
      w.hasValue ? valueCell(w.value) : h("span", "pf-muted", "(removed)"),
      writeEventLink(w),
    ]), (i) => `pf-bystander-row${at !== null && others[i].seq === at ? " pf-at-scrubber" : ""}`));
  }
  if (c.message) card.appendChild(h("p", "pf-conflict-message pf-muted pf-small", `The runtime said: ${c.message}`));
  return card;
}

/**
 * @param {Run} view @param {Invocation} inv @param {InspectorContext} ctx
 * @param {DocumentFragment} parent
 */
function callsAndEvents(parent, view, inv, ctx) {
  if (inv.models.length) {
    const body = sectionIn(parent, ctx, "models", `Model calls (${inv.models.length})`, true);
    inv.models.forEach((call, i) => body.appendChild(modelCall(call, i === inv.models.length - 1, ctx)));
  }
  if (inv.tools.length) {
    const body = sectionIn(parent, ctx, "tools", `Tool calls (${inv.tools.length})`, true);
    for (const call of inv.tools) body.appendChild(toolCall(call));
  }
  eventsSection(parent, view, inv.seqs, ctx);
}

/**
 * `provider/name` of the model that answered; a model playing another's selection (a
 * scripted model) adds what was requested: `scripted/x (as openai/gpt-5.1)`.
 * @param {any} model
 */
function modelLabel(model) {
  const name = (/** @type {any} */ m) => (m && m.name ? `${m.provider ? `${m.provider}/` : ""}${m.name}` : "");
  const requested = model ? name(model.requested) : "";
  return name(model) + (requested ? ` (as ${requested})` : "");
}

/** @param {any} call @param {boolean} last @param {InspectorContext} ctx */
function modelCall(call, last, ctx) {
  const box = h("div", "pf-model-call");
  const f = call.finished;
  const head = h("div", "pf-call-head");
  append(head,
    h("strong", "", `call ${call.call}`),
    call.attempt > 1 ? h("span", "pf-chip", `attempt ${call.attempt}`) : null,
    h("span", "pf-muted pf-mono", modelLabel(call.model)),
    f ? h("span", "pf-chip", `${f.total_tokens} tokens`) : null,
    f ? h("span", "pf-chip", formatDuration(f.latency)) : null,
    f && !f.accepted ? badge("not accepted", "rejected") : null,
    call.failed ? badge(call.failed.retrying ? "failed, retrying" : "failed", "rejected") : null,
    !f && !call.failed ? badge("waiting", "running") : null,
    seqLink(call.seq));
  box.appendChild(head);
  const name = `model-${call.seq}`;
  const request = section(`Request: ${call.messages.length} messages${call.tools.length ? `, tools ${call.tools.join(", ")}` : ""}`, ctx.open.get(name) ?? last, "pf-request");
  request.root.addEventListener("toggle", () => ctx.open.set(name, request.root.open));
  for (const m of call.messages) {
    const msg = h("div", `pf-message pf-message-${String(m.type || m.role || "other").replace(/[^a-z]/gi, "")}`);
    append(msg, h("span", "pf-message-role", String(m.type || m.role || "message")), h("div", "pf-message-text", messageText(m.content)));
    if (Array.isArray(m.tool_calls) && m.tool_calls.length) msg.appendChild(toolCallsList(m.tool_calls));
    request.body.appendChild(msg);
  }
  box.appendChild(request.root);
  if (f) {
    const response = h("div", "pf-response");
    const text = messageText(f.content);
    append(response, h("span", "pf-message-role", "response"),
      text ? h("div", "pf-message-text", text) : null,
      f.tool_calls && f.tool_calls.length ? toolCallsList(f.tool_calls) : null,
      !text && !(f.tool_calls && f.tool_calls.length) ? h("span", "pf-muted", "(empty)") : null,
      h("span", "pf-muted pf-small", `${f.input_tokens} in · ${f.output_tokens} out · ${f.finish_reason}`));
    box.appendChild(response);
  }
  if (call.failed) box.appendChild(errorBox(call.failed.error));
  return box;
}

/** @param {any[]} calls */
function toolCallsList(calls) {
  const list = h("ul", "pf-toolcalls");
  for (const c of calls) {
    const item = h("li");
    append(item, h("code", "pf-mono", `${c.name}(`), h("code", "pf-value", preview(c.args ?? {}, 300)), h("code", "pf-mono", ")"));
    list.appendChild(item);
  }
  return list;
}

/** @param {any} call */
function toolCall(call) {
  const box = h("div", "pf-tool-call");
  const f = call.finished;
  const head = h("div", "pf-call-head");
  append(head, h("strong", "pf-mono", call.name),
    f ? badge(f.status, f.status === "success" ? "fulfilled" : "rejected") : badge("running", "running"),
    f && f.transition ? h("span", "pf-chip", `→ ${f.transition.kind}${f.transition.target ? ` ${f.transition.target}` : ""}`) : null,
    f && f.outcome && f.outcome !== "handled" ? h("span", "pf-chip pf-chip-error", f.outcome) : null,
    seqLink(call.seq));
  box.appendChild(head);
  box.appendChild(facts([["Arguments", valueCell(call.args)], ["Result", f ? valueCell(f.result) : null]]));
  return box;
}

/**
 * @param {DocumentFragment} parent @param {Run} view @param {number[]} seqs
 * @param {InspectorContext} ctx
 */
function eventsSection(parent, view, seqs, ctx) {
  const body = sectionIn(parent, ctx, "events", `Events (${seqs.length})`, false, "pf-events");
  const first = view.events.length ? view.events[0].seq : 0;
  const shown = seqs.length > EVENT_LIST_LIMIT ? seqs.slice(-EVENT_LIST_LIMIT) : seqs;
  if (shown.length < seqs.length) body.appendChild(h("p", "pf-muted", `The last ${EVENT_LIST_LIMIT} of ${seqs.length} events.`));
  body.appendChild(table("pf-event-table", ["Seq", "Type", ""], lazy(shown, (seq) => {
    const e = view.events[seq - first] && view.events[seq - first].seq === seq ? view.events[seq - first] : view.events.find((x) => x.seq === seq);
    return [seqLink(seq), h("code", `pf-event-type pf-event-${String(e?.type || "").split(".")[0]}`, e?.type || "?"), h("span", "pf-event-summary", e ? describeEvent(e) : "")];
  })));
}

// -- branch ---------------------------------------------------------------------------------

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Invocation} inv
 * @param {InspectorContext} ctx
 */
function branchInspector(parent, view, inv, ctx) {
  const barrier = /** @type {Barrier} */ (view.barriers.get(/** @type {string} */ (inv.barrier)));
  parent.appendChild(heading(inv.key || inv.step, `${inv.step} · path ${inv.path}`));
  const status = h("div", "pf-status-line");
  const stopped = stopKind(inv);
  const marks = branchMarks(view, inv.path);
  append(status, badge(inv.status, inv.status),
    marks ? publicationBadge(marks) : null,
    stopped ? badge(STOP_LABELS[stopped].label, stopped === "late" ? "conflict" : "cancel") : null,
    inv.cancelTold ? badge("told to cancel", "cancel") : null,
    inv.hasDirectResult ? badge(`direct result via ${inv.directResult.tool}`, "muted") : null,
    inv.interrupted ? badge("interrupted", "interrupted") : null);
  parent.appendChild(status);
  const fate = publicationOf(view, inv.path);
  if (fate && fate.state === "discarded") parent.appendChild(discardReason(fate.text, fate.reason));
  if (stopped) parent.appendChild(h("p", "pf-hint", STOP_LABELS[stopped].title));
  if (inv.interrupted) {
    parent.appendChild(h("p", "pf-hint", "It was still running when the run was interrupted: its executor stopped reporting, so how it ended is not known."));
  }
  const queued = inv.started !== null ? inv.started - barrier.forkedAt : null;
  const ran = inv.started !== null && inv.finished !== null ? inv.finished - inv.started : null;
  const waited = inv.finished !== null && barrier.joinedAt !== null ? barrier.joinedAt - inv.finished : null;
  parent.appendChild(facts(/** @type {any} */ ([
    ["Barrier", barrierLink(barrier.id)],
    ["Request", requestOrdinal(inv.index, barrier.branches.length)],
    ["Caller", barrier.caller === "" ? pathLink("", "turn") : pathLink(barrier.caller, barrier.caller)],
    ["Queued", formatDuration(queued)],
    ["Ran", formatDuration(ran)],
    ["Waited at join", formatDuration(waited)],
    ["Tokens", String(inv.tokens)],
  ]), "pf-facts-2"));
  if ((inv.params && Object.keys(inv.params).length) || inv.userMessage) {
    parent.appendChild(facts([
      ["Params", inv.params && Object.keys(inv.params).length ? valueCell(inv.params) : null],
      ["Message", inv.userMessage ?? null],
    ]));
  }
  if (inv.status === "rejected" && inv.error) parent.appendChild(errorBox(inv.error));

  // The state-visibility snapshot.
  const seen = viewAt(view, inv.path);
  const when = ctx.pinned ? `at seq ${view.lastSeq}` : inv.status === "running" || inv.status === "queued" ? "now" : "";
  const body = sectionIn(parent, ctx, "visibility", `What it ${when === "now" ? "can" : "could"} see${when ? ` ${when}` : ""}`, true, "pf-visibility");
  body.appendChild(h("p", "pf-hint", "Its view: the fork-time base, overlaid with its own drafts and what its inner joins published into its scope. Siblings' drafts are not visible until the join."));
  body.appendChild(visibleStateTable(seen, baseAt(view, inv.path)));
  const base = sectionIn(parent, ctx, "base", `Fork-time base (${barrier.base === "canonical" ? "canonical state" : `view of ${barrier.base}`} at #${barrier.forkedSeq})`, false);
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
        seqLink(c.seq), h("code", "pf-mono", `${c.step}.${c.field}`),
        h("span", `pf-write-kind pf-write-${kind}`, kind === "join" ? "publication" : kind),
        c.deleted ? h("span", "pf-muted", "removed") : valueCell(c.value),
        c.kind === "join" ? append(h("span"), h("span", "", "inner join "), barrierLink(/** @type {string} */ (c.barrier))) : h("span", "", "own draft"),
        ...(story ? [problem.has(c.seq) ? badge(story.kind === "conflict" ? "in the conflict" : story.kind === "reducer" ? "reducer failed" : "the problem", "conflict")
          : badge(`not in the ${story.kind === "conflict" ? "conflict" : "problem"}`, "muted")] : []),
      ];
    }), (i) => (problem.has(seen.own[i].seq) ? "pf-own-row pf-own-problem" : "pf-own-row")));
  } else own.appendChild(h("p", "pf-muted", "No writes."));

  const invisible = sectionIn(parent, ctx, "invisible", `Sibling writes it could NOT see (${seen.invisible.length})`, true, "pf-invisible");
  if (seen.invisible.length) {
    const visible = seen.state;
    const list = seen.invisible;
    invisible.appendChild(pagedTable("pf-invisible-table", ["Sibling", "Field", "Their draft", "It saw"], { count: list.length, at: (i) => {
      const w = list[i];
      const who = h("span", "pf-who");
      append(who, pathLink(w.path, w.key || w.path), h("span", "pf-muted pf-mono", ` ${w.path} `), badge("not visible", "conflict"));
      const has = Object.prototype.hasOwnProperty.call(visible[w.step] || {}, w.field);
      return [who, h("code", "pf-mono", `${w.step}.${w.field}`), w.deleted ? h("span", "pf-muted", "removed") : valueCell(w.value),
        has ? valueCell(visible[w.step][w.field]) : h("span", "pf-muted", "(absent)")];
    } }, tableState(view, barrier, `invisible:${inv.path}`, "request"), PAGE_SIZE, () => "pf-invisible-row"));
  } else invisible.appendChild(h("p", "pf-muted", "No sibling had written anything yet."));

  const pub = published(view, inv.path);
  const pubBody = sectionIn(parent, ctx, "published", "What its join published from it", true, "pf-published");
  publishedView(pubBody, view, barrier, inv, pub);

  if (barrier.outcome === "invalidated") parent.appendChild(conflictCard(view, barrier, { highlight: inv.path }));
  if (inv.status === "fulfilled" || inv.hasDirectResult) {
    const out = sectionIn(parent, ctx, "output", inv.hasDirectResult ? `Output (direct result of ${inv.directResult.tool})` : "Output", true);
    out.appendChild(jsonBlock(inv.output));
  }
  callsAndEvents(parent, view, inv, ctx);
}

/**
 * The visible state as a table of fields with where each came from.
 * @param {{state: Record<string, Record<string, any>>, own: any[]}} seen
 * @param {Record<string, Record<string, any>>} base
 */
function visibleStateTable(seen, base) {
  const wrap = h("div", "pf-visible-state");
  /** @type {Map<string, any>} */
  const last = new Map();
  for (const c of seen.own) last.set(`${c.step}\u0000${c.field}`, c);
  const rows = [];
  for (const [step, fields] of Object.entries(seen.state)) {
    for (const [field, value] of Object.entries(fields)) {
      const change = last.get(`${step}\u0000${field}`);
      const origin = change ? (change.kind === "join" ? `inner join ${change.barrier} #${change.seq}` : `own draft #${change.seq}`) : "fork-time base";
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
    h("code", "pf-mono", `${r.step}.${r.field}`),
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
  const where = barrier.target === "caller-scope" ? `into the scope of ${barrier.caller}` : "into the canonical session state";
  if (pub.replacements.length || pub.contributions.length) {
    const items = [...pub.replacements.map((f) => ({ f, c: null })), ...pub.contributions.map((c) => ({ f: null, c }))];
    body.appendChild(h("p", "", `Its join published ${where}:`));
    body.appendChild(table("pf-published-table", ["Field", "As", "Value"], lazy(items, ({ f, c }) => (f
      ? [h("code", "pf-mono", `${f.step}.${f.field}`), h("span", "", f.deleted ? "removal" : "replacement"), f.deleted ? h("span", "pf-muted", "—") : valueCell(f.value)]
      : [h("code", "pf-mono", `${c.step}.${c.field}`), h("span", "", `contribution to ${c.channel}${c.path !== inv.path ? ` (from ${c.path})` : ""}`), valueCell(c.value)]))));
  }
  body.appendChild(h("p", fate.state === "published" ? "pf-published-yes" : "pf-muted", fate.text));
}

// -- barrier --------------------------------------------------------------------------------

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Barrier} barrier
 * @param {InspectorContext} ctx
 */
function barrierInspector(parent, view, barrier, ctx) {
  parent.appendChild(heading(`Barrier ${barrier.id}`, `forked by ${barrier.callerStep}`));
  const status = h("div", "pf-status-line");
  const marks = barrierMarks(view, barrier.id);
  append(status, marks ? publicationBadge(marks) : null,
    badge(barrier.policy, "muted"),
    barrier.checkpoint !== "none" ? badge(barrier.checkpointFailed ? "checkpoint failed" : barrier.checkpointRevision !== null ? `checkpoint saved r${barrier.checkpointRevision}` : "root-join checkpoint", barrier.checkpointFailed ? "conflict" : "muted") : null,
    barrier.cancelReason !== null ? badge(`cancelled: ${barrier.cancelReason}`, "cancel") : null);
  parent.appendChild(status);
  if (barrier.interrupted) {
    parent.appendChild(h("p", "pf-hint", "It was still open when the run was interrupted: its join never ran."));
  }
  if (barrierStopped(view, barrier)) {
    parent.appendChild(h("p", "pf-hint", "It was still open when the turn was stopped: its join never ran, so nothing of it was published."));
  }
  const c = barrier.counts;
  parent.appendChild(facts([
    ["Caller", barrier.caller === "" ? pathLink("", "turn") : pathLink(barrier.caller, barrier.caller)],
    ["Branches", `${barrier.branches.length}: ${c.fulfilled} fulfilled, ${c.rejected} rejected, ${c.running} running, ${c.queued} queued`],
    ["Branches see", barrier.base === "canonical" ? "the canonical state at the fork" : `the view of ${barrier.base} at the fork`],
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
      append(box, h("div", "pf-call-head", `${r.step}.${r.field} · ${r.channel}`));
      const inputs = r.inputs || [];
      box.appendChild(pagedTable("pf-reduction-table", ["#", "Branch", "Value"], lazy(inputs, (input, i) => [
        h("span", "pf-mono", String(i + 1)), pathLink(String(input.path), `${input.key} (${input.path})`), valueCell(input.value),
      ]), tableState(view, barrier, `reduction:${r.step}.${r.field}`, "request"), PAGE_SIZE));
      const order = r.completion_order || [];
      // Thousands of paths in one line say nothing; the first few show the interleaving.
      const completion = order.length > 20 ? `${order.slice(0, 20).join(" → ")} → … (${order.length.toLocaleString("en-US")} in all)` : order.join(" → ");
      box.appendChild(facts([["Completion order", completion || "—"], ["Result", valueCell(r.result)]]));
      body.appendChild(box);
    }
  }
  if (barrier.outcome === "published" && marks) {
    const body = sectionIn(parent, ctx, "publication", barrier.target === "canonical" ? "Publication into the canonical state" : `Publication into the scope of ${barrier.caller}`, true, "pf-published");
    if (barrier.published.length && marks.state !== "discarded") {
      body.appendChild(table("pf-published-table", ["Field", "Writer", "Value"], lazy(barrier.published, (f) => [
        h("code", "pf-mono", `${f.step}.${f.field}`),
        f.writer ? pathLink(f.writer, `${view.invocations.get(f.writer)?.key || f.writer} (${f.writer})`) : h("span", "pf-muted", "reduced"),
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
        return [pathLink(path, `${d.key} (${path})`), why];
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
    const m = branchMarks(view, path);
    return [h("span", "pf-mono", String((inv?.index ?? 0) + 1)), pathLink(path, inv?.key || path), h("span", "", inv?.step || ""), badge(inv?.status || "?", inv?.status || "muted"),
      h("span", "pf-mono", formatDuration(inv ? durationOf(inv) : null)),
      m ? publicationBadge(m) : h("span", "pf-muted", "—")];
  }));
}

// -- the turn -------------------------------------------------------------------------------

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Invocation} inv
 * @param {InspectorContext} ctx
 */
function rootInspector(parent, view, inv, ctx) {
  parent.appendChild(heading(view.flow || "Turn", "the top level"));
  const status = h("div", "pf-status-line");
  append(status, badge(view.status, runStatusKind(view.status)), view.conflicts.length ? badge(`${view.conflicts.length} invalidated join${view.conflicts.length > 1 ? "s" : ""}`, "conflict") : null);
  parent.appendChild(status);
  parent.appendChild(facts([
    ["Message", view.message ?? ""],
    ["Cursor", view.cursor ?? "—"],
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
  const body = sectionIn(parent, ctx, "canonical", ctx.pinned ? `Canonical state at seq ${view.lastSeq}` : "Canonical state", true, "pf-visibility");
  const wrap = h("div", "pf-visible-state");
  /** @type {[string, string, any][]} */
  const rows = [];
  for (const [step, fields] of Object.entries(view.state)) {
    for (const [field, value] of Object.entries(fields)) rows.push([step, field, value]);
  }
  wrap.appendChild(rows.length
    ? table("pf-state-table", ["Field", "Value"], lazy(rows, ([step, field, value]) => [h("code", "pf-mono", `${step}.${field}`), valueCell(value)]))
    : h("p", "pf-muted", "Empty: no step state yet."));
  body.appendChild(wrap);
  if (view.trail.length) {
    const trail = sectionIn(parent, ctx, "trail", `Steps entered (${view.trail.length})`, false);
    trail.appendChild(table("pf-trail-table", ["Seq", "Step", "How", "Path"], lazy(view.trail, (t) => [
      seqLink(t.seq), h("code", "pf-mono", t.step), h("span", "", t.how), t.path ? pathLink(t.path, t.path) : h("span", "pf-muted", "turn"),
    ])));
  }
  if (view.anomalies.length || view.overflows.length) {
    const warn = sectionIn(parent, ctx, "anomalies", "Stream problems", true);
    for (const o of view.overflows) warn.appendChild(h("p", "pf-error-message", `A sink dropped events ${o.first}–${o.last} (${o.sink}).`));
    for (const a of view.anomalies.slice(0, 50)) warn.appendChild(h("p", "pf-error-message", `#${a.seq}: ${a.message}`));
  }
  callsAndEvents(parent, view, inv, ctx);
}
