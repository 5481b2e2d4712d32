// @ts-check
/**
 * The compare page's data (pure): two runs of one flow from `GET /api/runs/<a>/compare/<b>`
 * as a header sentence, table rows (one per branch matched by invocation path and key, each
 * cell holding a's and b's value as text and whether they differ) and counts.
 *
 * Values are turned into text here; the page puts them in with textContent only.
 */

import { preview } from "./format.js";
import { amount } from "./whatif.js";

/**
 * @typedef {object} RunSide
 * @property {string} run
 * @property {string} [flow]
 * @property {string} [status]
 * @property {number | null} [duration]
 * @property {number | null} [tokens]
 * @property {number | null} [started_at]
 * @property {string | null} [message]
 */

/**
 * @typedef {object} BranchSide
 * @property {string} [status]
 * @property {number | null} [duration]
 * @property {number | null} [tokens]
 * @property {any} [output]
 * @property {{step?: string, field?: string, value?: any}[]} [published]
 */

/**
 * @typedef {object} BranchMatch
 * @property {string} path
 * @property {string | null} [key]
 * @property {string | null} [step]
 * @property {string} match  "both" | "only_a" | "only_b"
 * @property {BranchSide | null} a
 * @property {BranchSide | null} b
 * @property {string[]} [changed]
 */

/** The columns of the branch table after the branch itself, in order. */
export const FIELDS = ["status", "duration", "tokens", "output", "published"];

/** @type {Record<string, string>} */
export const FIELD_TITLES = { status: "Status", duration: "Duration", tokens: "Tokens", output: "Output", published: "Published" };

/** Characters of an output or a published value a cell shows (its title holds more). */
const CELL_CHARS = 80;

/**
 * A run's name in sentences: "a (pipelined)".
 * @param {string} side @param {RunSide | undefined} run
 */
function runName(side, run) {
  const message = run && typeof run.message === "string" && run.message.trim() ? ` (${preview(run.message, 40, true)})` : "";
  return `run ${side}${message}`;
}

/**
 * The overall difference in a sentence: "Run b (batched) took 0.4 s less than run a
 * (pipelined): 10.6 s against 11.0 s; it used 12 more tokens: 132 against 120."
 * @param {any} data the compare answer
 */
export function differenceSentence(data) {
  const unit = typeof data.unit === "string" ? data.unit : "s";
  const a = /** @type {RunSide} */ (data.a ?? {});
  const b = /** @type {RunSide} */ (data.b ?? {});
  const parts = [];
  const da = typeof a.duration === "number" ? a.duration : null;
  const db = typeof b.duration === "number" ? b.duration : null;
  const subject = runName("b", b);
  const other = runName("a", a);
  if (da !== null && db !== null) {
    const d = db - da;
    parts.push(amount(Math.abs(d), unit) === amount(0, unit)
      ? `${capital(subject)} took as long as ${other}: ${amount(db, unit)}`
      : `${capital(subject)} took ${amount(Math.abs(d), unit)} ${d > 0 ? "more" : "less"} than ${other}: ${amount(db, unit)} against ${amount(da, unit)}`);
  } else parts.push(`${capital(subject)} and ${other}: a duration is not known yet (${da === null ? "a" : "b"} has not ended)`);
  const ta = typeof a.tokens === "number" ? a.tokens : null;
  const tb = typeof b.tokens === "number" ? b.tokens : null;
  if (ta !== null && tb !== null) {
    const d = tb - ta;
    parts.push(d === 0 ? `it used as many tokens: ${tb}` : `it used ${Math.abs(d)} ${d > 0 ? "more" : "fewer"} token${Math.abs(d) === 1 ? "" : "s"}: ${tb} against ${ta}`);
  }
  let text = `${parts.join("; ")}.`;
  if (data.same_flow === false) {
    text += ` The runs are of different flows (${a.flow ?? "?"} and ${b.flow ?? "?"}): branches are matched by path and key all the same.`;
  }
  return text;
}

/** @param {string} text */
const capital = (text) => text.charAt(0).toUpperCase() + text.slice(1);

/**
 * A branch's value of one field as a cell's text ("—" for none).
 * @param {string} field @param {BranchSide | null} side @param {string} [unit]
 * @returns {{text: string, title: string}}
 */
export function cellText(field, side, unit = "s") {
  if (!side) return { text: "—", title: "" };
  const value = /** @type {any} */ (side)[field];
  if (value === undefined || value === null) return { text: "—", title: "" };
  if (field === "duration") return { text: typeof value === "number" ? amount(value, unit) : String(value), title: String(value) };
  if (field === "tokens" || field === "status") return { text: String(value), title: "" };
  if (field === "published") {
    if (!Array.isArray(value) || value.length === 0) return { text: "nothing", title: "" };
    const full = value.map((p) => `${p.step ?? "?"}.${p.field ?? "?"} = ${preview(p.value, 2000)}`).join("; ");
    return { text: preview(full, CELL_CHARS, true), title: preview(full, 2000, true) };
  }
  return { text: preview(value, CELL_CHARS, true), title: preview(value, 2000, true) };
}

/**
 * The rows of the branch table.
 * @param {any} data the compare answer
 */
export function compareRows(data) {
  const unit = typeof data.unit === "string" ? data.unit : "s";
  const branches = /** @type {BranchMatch[]} */ (Array.isArray(data.branches) ? data.branches : []);
  return branches.map((branch) => {
    const changed = new Set(branch.changed ?? []);
    return {
      path: String(branch.path),
      key: branch.key ?? null,
      step: branch.step ?? "",
      label: branch.key != null && branch.key !== "" ? String(branch.key) : String(branch.path),
      match: branch.match,
      depth: branch.path === "" ? 0 : String(branch.path).split(".").length,
      cells: FIELDS.map((field) => ({
        field,
        a: cellText(field, branch.a, unit),
        b: cellText(field, branch.b, unit),
        // Added and missing rows differ as a whole: their cells are not marked one by one.
        changed: branch.match === "both" && changed.has(field),
      })),
    };
  });
}

/**
 * The counts over the table: "4 branches matched · 1 added in b · 0 missing from b · 2 changed".
 * @param {any} data the compare answer
 */
export function countsLine(data) {
  const branches = /** @type {BranchMatch[]} */ (Array.isArray(data.branches) ? data.branches : []);
  let both = 0;
  let changed = 0;
  for (const b of branches) {
    if (b.match !== "both") continue;
    both += 1;
    if (b.changed && b.changed.length) changed += 1;
  }
  const added = Array.isArray(data.added) ? data.added.length : branches.filter((b) => b.match === "only_b").length;
  const missing = Array.isArray(data.missing) ? data.missing.length : branches.filter((b) => b.match === "only_a").length;
  return `${both} branch${both === 1 ? "" : "es"} in both (${changed} changed) · ${added} only in b (added) · ${missing} only in a (missing from b)`;
}

/**
 * When a run started, in ms since the epoch (summaries say it as an ISO instant, the compare
 * answer in seconds); 0 when not known.
 * @param {unknown} value
 */
export function startedMs(value) {
  if (typeof value === "number") return Number.isFinite(value) ? value * 1000 : 0;
  if (typeof value === "string") {
    const t = Date.parse(value);
    return Number.isFinite(t) ? t : 0;
  }
  return 0;
}

/**
 * Two picked runs as a compare page's a and b: the one started first is a ("before").
 * @param {{id: string, started_at?: unknown}[]} runs
 * @returns {[string, string]}
 */
export function compareOrder(runs) {
  const [x, y] = [...runs].sort((p, q) => startedMs(p.started_at) - startedMs(q.started_at));
  return [x.id, y.id];
}

/**
 * The other runs of `flow` a run page offers to compare with: newest first, not `self`.
 * @param {any[]} runs summaries from `GET /api/runs?flow=` @param {string} self
 */
export function compareChoices(runs, self) {
  return runs
    .filter((r) => r && typeof r.id === "string" && r.id !== self)
    .sort((x, y) => startedMs(y.started_at) - startedMs(x.started_at))
    .map((r) => ({
      id: /** @type {string} */ (r.id),
      label: `${r.status ?? "?"} · ${r.message ? preview(String(r.message), 40, true) : "—"} · ${String(r.id).slice(0, 8)}`,
    }));
}
