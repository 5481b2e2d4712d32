// @ts-check
/**
 * The conflict card (DOM) of an invalidated barrier, drawn from `conflictOf`: the writes at
 * stake with their bases and events, the proposals side by side, and the bystanders.
 * Hooks: `.pf-conflict[data-barrier][data-kind]`, provenance rows `.pf-conflict-row`.
 */

import { conflictLine, conflictOf } from "./conflict.js";
import { differencePlace } from "./diff.js";
import { append, badge, h, jsonBlock, table } from "./dom.js";
import { preview } from "./format.js";
import { barrierLink, pathLink, seqLink, valueCell } from "./inspector_parts_ui.js";
import { barrierLabelOf, fieldLabelOf, fromLangGraph, labelOf } from "./labels.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./inspector_ui.js").InspectorContext} InspectorContext */

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

/** @param {Run} view @param {import("./conflict.js").Writer} w */
function writerWho(view, w) {
  const who = h("span", "pf-who");
  append(who, pathLink(w.path, labelOf(view, w.path)), h("span", "pf-muted pf-mono", ` ${w.path}`));
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
 *
 * A `collapsible` card (the run page's and the session page's, above the tree) is one line
 * until it is expanded: the field, its writers and the barrier's link, and a toggle
 * (`[data-conflict-toggle]`) that opens the rest in place, so the tree and the lanes stay
 * on the first screen. The inspector draws it whole.
 * @param {Run} view @param {Barrier} barrier
 * @param {{highlight?: string | null, at?: number | null, ahead?: boolean, collapsible?: boolean, expanded?: boolean}} [options]
 *   `highlight`: a branch path to mark; `at`: the scrubber's seq, to mark the write there;
 *   `ahead`: the scrubber is before this join (the card is drawn from the whole run);
 *   `collapsible` and `expanded`: see above
 */
export function conflictCard(view, barrier, options = {}) {
  const { highlight = null, at = null, ahead = false, collapsible = false, expanded = true } = options;
  const c = conflictOf(view, barrier.id);
  const open = !collapsible || expanded;
  const card = h("div", `pf-conflict${ahead ? " pf-conflict-ahead" : ""}${collapsible ? " pf-conflict-collapsible" : ""}`);
  card.dataset.barrier = barrier.id;
  if (collapsible) card.dataset.expanded = open ? "1" : "0";
  if (!c) return card;
  card.dataset.kind = c.kind;
  const title = h("div", "pf-conflict-title");
  const line = collapsible ? conflictLine(c) : null;
  /** @type {(Node | null)[]} */
  const writers = [];
  if (line) {
    line.writers.forEach((w, i) => writers.push(i ? h("span", "pf-muted", ", ") : null, pathLink(w.path, w.key)));
    if (line.more) writers.push(h("span", "pf-muted", ` and ${line.more} more`));
  }
  const heading = h("strong", "pf-conflict-heading", c.title);
  heading.title = c.title;
  append(title, heading,
    writers.length ? append(h("span", "pf-conflict-writers"), h("span", "pf-muted", "by "), ...writers) : null,
    barrierLink(barrier.id, barrierLabelOf(view, barrier.id)), badge(c.code, "conflict"),
    c.joinSeq !== null ? append(h("span", "pf-muted pf-conflict-join"), h("span", "", "join "), seqLink(c.joinSeq)) : null);
  if (collapsible) {
    const toggle = h("button", "pf-button pf-button-small pf-conflict-toggle", open ? "Hide details" : "Details");
    toggle.setAttribute("type", "button");
    toggle.setAttribute("aria-expanded", String(open));
    toggle.dataset.conflictToggle = barrier.id;
    toggle.title = open ? "Fold the card back to one line" : "Show the writes, their bases, the reason and the fix here";
    title.appendChild(toggle);
  }
  card.appendChild(title);
  const body = collapsible ? h("div", "pf-conflict-details") : card;
  if (collapsible) {
    body.hidden = !open;
    card.appendChild(body);
  }
  if (ahead && at !== null) {
    body.appendChild(h("p", "pf-hint pf-conflict-when", `The scrubber is at #${at}, before this join ran (#${c.joinSeq}): the card tells what happens there.`));
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
  if (c.step && !fromLangGraph(view)) fact("Owned by", h("code", "pf-mono pf-conflict-step", c.step), "pf-conflict-step-row");
  fact("Why", c.reason, "pf-conflict-reason");
  fact("Fix", c.fix, "pf-conflict-fix");
  if (c.initial !== undefined) fact("Reduced from", valueCell(c.initial), "pf-conflict-initial");
  body.appendChild(facts2);

  const problem = c.writers.filter((w) => w.part);
  const others = c.writers.filter((w) => !w.part);
  if (problem.length) {
    body.appendChild(h("h3", "pf-subtitle", PROBLEM_TITLES[c.kind]));
    const hasResult = problem.some((w) => w.result !== undefined);
    const columns = ["Branch", "Write", "As", "Proposed value", "Base at its fork", ...(hasResult ? ["Its view after"] : []), "Event"];
    body.appendChild(table("pf-provenance", columns, problem.map((w) => [
      writerWho(view, w), h("code", "pf-mono", fieldLabelOf(view, w.step, w.field)),
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
      body.appendChild(h("p", "pf-hint", "The runtime refuses such a write before it becomes a draft, so no write event exists: its link goes to the event where the error surfaced."));
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
        append(head, writerWho(view, w), badge(WRITE_LABELS[w.kind], "conflict"), writeEventLink(w));
        side.appendChild(head);
        side.appendChild(h("div", "pf-muted pf-small", "proposed"));
        side.appendChild(jsonBlock(w.value, "pf-conflict-value"));
        side.appendChild(h("div", "pf-muted pf-small", w.hasBase ? "its base at the fork" : "its base at the fork: the field was absent"));
        if (w.hasBase) side.appendChild(jsonBlock(w.base, "pf-conflict-base"));
        if (w.kind !== "contribution") side.appendChild(differenceList(w.field, w.changes, "the same as its base"));
        else if (w.result !== undefined) side.appendChild(h("p", "pf-muted pf-small", `alone in its own view it reduced ${w.hasBase ? preview(w.base, 60) : "the empty value"} to ${preview(w.result, 60)}`));
        sides.appendChild(side);
      }
      body.appendChild(sides);
    }
    for (const pair of c.between) {
      const a = problem[pair.a];
      const b = problem[pair.b];
      const box = h("div", "pf-conflict-between");
      box.appendChild(h("div", "pf-small", `${b.key}'s proposal against ${a.key}'s (${pair.changes.length} difference${pair.changes.length === 1 ? "" : "s"}):`));
      box.appendChild(differenceList(a.field, pair.changes, "the same value: still a conflict, because a join does not compare replacements"));
      body.appendChild(box);
    }
  }
  if (others.length) {
    const noun = c.kind === "conflict" ? "conflict" : c.kind === "mutation" ? "mutation" : c.kind === "reducer" ? "reducer failure" : "problem";
    body.appendChild(h("h3", "pf-subtitle", `Other writes of these branches: not part of the ${noun}`));
    body.appendChild(h("p", "pf-hint", `Nothing was wrong with these, but a join that is invalidated publishes nothing, so they were discarded with the rest.`));
    body.appendChild(table("pf-bystanders", ["Branch", "Write", "As", "Value", "Event"], others.map((w) => [
      writerWho(view, w), h("code", "pf-mono", fieldLabelOf(view, w.step, w.field)),
      append(h("span"), badge(WRITE_LABELS[w.kind], "muted"), h("span", "pf-muted pf-small", ` not part of the ${noun}`)),
      w.hasValue ? valueCell(w.value) : h("span", "pf-muted", "(removed)"),
      writeEventLink(w),
    ]), (i) => `pf-bystander-row${at !== null && others[i].seq === at ? " pf-at-scrubber" : ""}`));
  }
  if (c.message) body.appendChild(h("p", "pf-conflict-message pf-muted pf-small", `The runtime said: ${c.message}`));
  return card;
}
