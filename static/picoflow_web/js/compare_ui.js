// @ts-check
/**
 * Two runs of one flow side by side (DOM): the compare page (`/runs/<a>/compare/<b>/`, from
 * `GET /api/runs/<a>/compare/<b>`): both runs' headers and the overall difference in a
 * sentence, a table of branches matched by invocation path and key (changed cells,
 * added and missing branches marked), and both runs' timings on one axis. Also the run
 * page's "Compare with…" picker.
 *
 * Data: compare.js and whatif.js. Messages, keys and outputs go in as text only.
 *
 * Hooks: `#pf-compare[data-state=loading|ready|error]`; `.pf-cmp-run[data-side=a|b]`;
 * `#pf-cmp-sentence`; rows `.pf-cmp-row[data-path][data-key][data-match=both|only_a|only_b]`
 * with cells `td[data-field]` (`.pf-cmp-changed`, `data-changed=1`) holding `.pf-cmp-a`
 * and `.pf-cmp-b`; `#pf-cmp-timing .pf-wi-schedule[data-schedule=a|b]` (whatif_ui.js's).
 */

import { ApiError, compareApiUrl, comparePageUrl, requestJson, runPageUrl } from "./api.js";
import { compareChoices, compareRows, countsLine, differenceSentence, FIELDS, FIELD_TITLES } from "./compare.js";
import { append, badge, h, setText } from "./dom.js";
import { formatClock, preview, runStatusKind } from "./format.js";
import { amount, biggestShift, laneModel } from "./whatif.js";
import { hiddenNote, laneSets } from "./whatif_ui.js";

/** Rows the branch table builds at first (a button adds more). */
const ROWS_SHOWN = 500;

/**
 * The run page's "Compare with…" select: the other runs of the run's flow (its
 * `data-flow`), loaded when the page has settled; choosing one opens the compare page.
 * @param {HTMLSelectElement} select @param {string} runId
 */
export function mountComparePicker(select, runId) {
  const flow = select.dataset.flow || "";
  let loaded = false;
  const load = async () => {
    if (loaded) return;
    loaded = true;
    try {
      const data = await requestJson(`/api/runs?flow=${encodeURIComponent(flow)}`);
      const choices = compareChoices(Array.isArray(data.runs) ? data.runs : [], runId);
      for (const choice of choices) {
        const option = /** @type {HTMLOptionElement} */ (h("option", "", choice.label));
        option.value = choice.id;
        select.appendChild(option);
      }
      if (!choices.length) {
        const none = /** @type {HTMLOptionElement} */ (h("option", "", "no other run of this flow"));
        none.disabled = true;
        select.appendChild(none);
      }
      select.dataset.loaded = "1";
    } catch {
      loaded = false;
    }
  };
  select.addEventListener("focus", () => { void load(); });
  select.addEventListener("pointerdown", () => { void load(); });
  window.setTimeout(() => { void load(); }, 300);
  select.addEventListener("change", () => {
    if (select.value) location.assign(comparePageUrl(runId, select.value));
  });
}

/**
 * One run's card in the header.
 * @param {string} side @param {any} run @param {string} unit
 */
function runCard(side, run, unit) {
  const card = h("div", "pf-cmp-run");
  card.dataset.side = side;
  card.dataset.run = String(run.run ?? "");
  const title = h("div", "pf-cmp-run-title");
  const link = h("a", "pf-link pf-strong", `Run ${side}`);
  link.setAttribute("href", runPageUrl(String(run.run ?? "")));
  append(title, link, badge(String(run.status ?? "?"), runStatusKind(String(run.status ?? ""))),
    h("span", "pf-muted pf-mono", String(run.run ?? "").slice(0, 10)));
  const meta = h("dl", "pf-meta pf-cmp-meta");
  /** @param {string} name @param {string} value @param {string} [cls] */
  const item = (name, value, cls = "") => append(h("div"), h("dt", "", name), h("dd", cls, value));
  append(meta,
    item("Message", run.message ? preview(String(run.message), 80, true) : "—"),
    item("Flow", String(run.flow ?? "—")),
    item("Started", typeof run.started_at === "number" ? formatClock(run.started_at) : "—", "pf-mono"),
    item("Duration", typeof run.duration === "number" ? amount(run.duration, unit) : "—", "pf-mono pf-cmp-duration"),
    item("Tokens", typeof run.tokens === "number" ? String(run.tokens) : "—", "pf-mono pf-cmp-tokens"));
  return append(card, title, meta);
}

/**
 * The branch table's rows (`limit` of them; a button adds the rest).
 * @param {ReturnType<typeof compareRows>} rows @param {HTMLElement} body @param {HTMLElement} more
 * @param {boolean} changedOnly
 */
function fillTable(rows, body, more, changedOnly) {
  const shown = changedOnly ? rows.filter((r) => r.match !== "both" || r.cells.some((c) => c.changed)) : rows;
  let count = 0;
  const add = (/** @type {number} */ upto) => {
    for (; count < Math.min(upto, shown.length); count += 1) body.appendChild(branchRow(shown[count]));
    more.hidden = count >= shown.length;
    setText(more, `Show ${Math.min(1000, shown.length - count).toLocaleString("en-US")} more (of ${(shown.length - count).toLocaleString("en-US")})`);
  };
  body.replaceChildren();
  more.onclick = () => add(count + 1000);
  add(ROWS_SHOWN);
}

/** @param {ReturnType<typeof compareRows>[number]} row */
function branchRow(row) {
  const tr = h("tr", `pf-cmp-row pf-cmp-${row.match}`);
  tr.dataset.path = row.path;
  tr.dataset.key = row.label;
  tr.dataset.match = row.match;
  const name = h("td", "pf-cmp-branch");
  name.style.paddingLeft = `${0.5 + Math.max(0, row.depth - 1) * 0.9}rem`;
  append(name, h("span", "pf-strong", row.label), h("span", "pf-muted pf-mono", ` ${row.path}${row.step ? ` · ${row.step}` : ""}`));
  const match = h("td", "pf-cmp-match");
  match.appendChild(row.match === "both" ? h("span", "pf-muted", "both")
    : row.match === "only_b" ? badge("added in b", "fulfilled") : badge("missing from b", "rejected"));
  append(tr, name, match);
  for (const cell of row.cells) {
    const td = h("td", `pf-cmp-cell${cell.changed ? " pf-cmp-changed" : ""}`);
    td.dataset.field = cell.field;
    if (cell.changed) {
      td.dataset.changed = "1";
      td.title = `${FIELD_TITLES[cell.field]} differs`;
    }
    const a = h("div", "pf-cmp-a", cell.a.text);
    if (cell.a.title) a.title = cell.a.title;
    const b = h("div", "pf-cmp-b", cell.b.text);
    if (cell.b.title) b.title = cell.b.title;
    append(td, a, b);
    tr.appendChild(td);
  }
  return tr;
}

/** @param {HTMLElement} root */
export function mountComparePage(root) {
  const a = root.dataset.a || "";
  const b = root.dataset.b || "";
  const runs = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-runs"));
  const sentence = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-sentence"));
  const counts = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-counts"));
  const head = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-table-head"));
  const body = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-table-body"));
  const more = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-more"));
  const changedOnly = /** @type {HTMLInputElement} */ (document.getElementById("pf-cmp-changed-only"));
  const timing = /** @type {HTMLElement} */ (document.getElementById("pf-cmp-timing"));
  root.dataset.state = "loading";

  const headRow = h("tr");
  append(headRow, h("th", "", "Branch"), h("th", "", "In"));
  for (const field of FIELDS) {
    const th = h("th", "", FIELD_TITLES[field]);
    th.appendChild(h("span", "pf-muted pf-cmp-ab", " a / b"));
    headRow.appendChild(th);
  }
  head.replaceChildren(headRow);

  requestJson(compareApiUrl(a, b)).then((data) => {
    const unit = typeof data.unit === "string" ? data.unit : "s";
    runs.replaceChildren(runCard("a", data.a ?? {}, unit), runCard("b", data.b ?? {}, unit));
    setText(sentence, differenceSentence(data));
    setText(counts, countsLine(data));
    const rows = compareRows(data);
    fillTable(rows, body, more, changedOnly.checked);
    changedOnly.addEventListener("change", () => fillTable(rows, body, more, changedOnly.checked));

    const ta = data.timing?.a;
    const tb = data.timing?.b;
    if (ta && tb) {
      const model = laneModel({ a: ta, b: tb }, { names: ["a", "b"], base: "a", unit, keyed: true });
      const label = (/** @type {string} */ side) => {
        const run = data[side] ?? {};
        return `Run ${side}${run.message ? ` · ${preview(String(run.message), 40, true)}` : ""}`;
      };
      const { best } = biggestShift(ta, tb, true);
      const moved = best ? ` ${best.key} starts at ${amount(best.to, unit)} in b, at ${amount(best.from, unit)} in a.` : "";
      const diff = Number(tb.total) - Number(ta.total);
      timing.replaceChildren(...[hiddenNote(model), laneSets(model, {
        titles: { a: label("a"), b: label("b") },
        sentences: {
          a: `Run a took ${amount(Number(ta.total), unit)} as recorded.`,
          b: `Run b took ${amount(Number(tb.total), unit)}${amount(Math.abs(diff), unit) === amount(0, unit) ? ", as long as a" : ` (${amount(Math.abs(diff), unit)} ${diff > 0 ? "more" : "less"} than a)`}.${moved}`,
        },
        totals: { a: Number(ta.total), b: Number(tb.total) },
        base: "a",
        unit,
        onlyPresent: true,
      })].filter((n) => n !== null));
    } else timing.replaceChildren(h("p", "pf-empty", "No timing to show."));
    root.dataset.state = "ready";
  }).catch((error) => {
    root.dataset.state = "error";
    if (error instanceof ApiError && error.status === 401) {
      location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
      return;
    }
    const message = error instanceof ApiError ? `${error.message} (${error.status})` : String(error);
    setText(sentence, `The runs could not be compared: ${message}`);
  });
}

const root = typeof document === "undefined" ? null : document.getElementById("pf-compare");
if (root) mountComparePage(root);
