// @ts-check
/**
 * The run page's "What if" view (DOM): the run's recorded schedule and the same work under
 * graph-wide supersteps and under local barriers (`GET /api/runs/<id>/whatif`), one lane
 * set each on one shared time axis; waits drawn as hatched gaps that name whom they waited
 * for; the critical path marked; a sentence per schedule stating the difference. The
 * compare page draws its two runs' timings with the same lane sets (`laneSets`).
 *
 * Data: whatif.js. Keys, paths and labels go in as text only.
 *
 * Hooks: `#pf-whatif[data-state=loading|ready|error]`; `.pf-wi-schedule[data-schedule]`
 * (`data-total`) with `.pf-wi-sentence`, rows `.pf-wi-row[data-path][data-key]`
 * (`.pf-wi-critical`), bars `.pf-wi-bar[data-start][data-end]`, gaps
 * `.pf-wi-gap[data-at][data-from][data-to]` holding `.pf-wi-gap-label`; `.pf-wi-summary li`;
 * `.pf-wi-inferred li`;
 * `.pf-wi-hidden` when lanes are left out; tabs `.pf-view-tab[data-view=lanes|whatif]`.
 */

import { ApiError, requestJson, whatIfUrl } from "./api.js";
import { append, h, setText } from "./dom.js";
import { ticks } from "./layout.js";
import { SCHEDULE_RULES, SCHEDULE_TITLES, axisX, laneModel, scheduleSentence, shiftLabel } from "./whatif.js";

/** A run still running is asked again at most this often while the view is open. */
const REFRESH_MS = 2000;
/** Below this share of the axis a gap's label goes beside it, not inside. */
const NARROW_GAP = 0.16;

/** @param {number} x 0..1 */
const pct = (x) => `${(x * 100).toFixed(3)}%`;

/**
 * The shared axis's tick row.
 * @param {{start: number, end: number}} bounds
 */
function axisRow(bounds) {
  const row = h("div", "pf-wi-row pf-wi-axis-row");
  const axis = h("div", "pf-wi-track pf-wi-axis");
  axis.dataset.start = String(bounds.start);
  axis.dataset.end = String(bounds.end);
  for (const t of ticks(bounds, 8)) {
    const tick = h("span", "pf-tick", t.label);
    tick.style.left = pct(t.x);
    axis.appendChild(tick);
  }
  return append(row, h("div", "pf-wi-label pf-muted", "time"), axis);
}

/**
 * One lane of one schedule.
 * @param {import("./whatif.js").Lane} lane @param {string} name
 * @param {{start: number, end: number}} bounds @param {string} base @param {string} unit
 */
function laneRow(lane, name, bounds, base, unit) {
  const slot = lane.slots[name];
  const row = h("div", `pf-wi-row${slot && slot.critical ? " pf-wi-critical" : ""}${lane.kind === "work" ? " pf-wi-work" : ""}`);
  row.dataset.path = lane.path;
  row.dataset.key = lane.label;
  const label = h("div", "pf-wi-label");
  label.style.paddingLeft = `${0.4 + lane.depth * 0.9}rem`;
  const nameEl = h("span", "pf-wi-name", lane.label);
  nameEl.title = `${lane.label}${lane.step ? ` · ${lane.step}` : ""}${lane.path ? ` · ${lane.path}` : ""}`;
  label.appendChild(nameEl);
  const track = h("div", "pf-wi-track");
  if (!slot) {
    label.appendChild(h("span", "pf-wi-shift pf-muted", "not in this schedule"));
    return append(row, label, track);
  }
  if (slot.critical) {
    const mark = h("span", "pf-wi-crit-mark", "critical");
    mark.title = "On the critical path: this branch sets the total";
    label.appendChild(mark);
  }
  if (name !== base) {
    const shift = shiftLabel(slot.shift, unit, bounds.end - bounds.start);
    if (shift) {
      const badge = h("span", `pf-wi-shift ${slot.shift !== null && slot.shift > 0 ? "pf-wi-later" : "pf-wi-earlier"}`, shift);
      badge.title = `starts ${shift.startsWith("+") ? "later" : "earlier"} than ${SCHEDULE_TITLES[base] ? SCHEDULE_TITLES[base].toLowerCase() : base}`;
      label.appendChild(badge);
    }
  }
  const span = h("i", "pf-wi-span");
  span.style.left = pct(axisX(bounds, slot.start));
  span.style.width = pct(Math.max(0, axisX(bounds, slot.end) - axisX(bounds, slot.start)));
  track.appendChild(span);
  for (const [from, to] of slot.parts) {
    const bar = h("i", "pf-wi-bar");
    bar.dataset.start = String(from);
    bar.dataset.end = String(to);
    bar.style.left = pct(axisX(bounds, from));
    bar.style.width = `max(2px, ${pct(Math.max(0, axisX(bounds, to) - axisX(bounds, from)))})`;
    bar.title = `${lane.label}: ${from.toFixed(3)}–${to.toFixed(3)} ${unit}${slot.superstep !== null ? ` · superstep ${slot.superstep}` : ""}`;
    track.appendChild(bar);
  }
  for (const gap of slot.gaps) {
    const el = h("span", `pf-wi-gap pf-wi-gap-${gap.at}`);
    el.dataset.at = gap.at;
    el.dataset.from = String(gap.from);
    el.dataset.to = String(gap.to);
    const width = Math.max(0, axisX(bounds, gap.to) - axisX(bounds, gap.from));
    el.style.left = pct(axisX(bounds, gap.from));
    el.style.width = `max(2px, ${pct(width)})`;
    el.title = `${lane.label} ${gap.label}`;
    // A narrow gap's label goes beside it, over the empty track; an unexplained idle
    // stretch that narrow says itself in its title only (beside it, it would cover bars).
    if (width >= NARROW_GAP || gap.at !== "unexplained") {
      const text = h("span", `pf-wi-gap-label${width < NARROW_GAP ? " pf-wi-gap-label-out" : ""}`, gap.label);
      // Past the middle a label beside its gap goes to its left, or it would leave the track.
      if (width < NARROW_GAP && axisX(bounds, gap.from) > 0.55) text.classList.add("pf-wi-gap-label-before");
      el.appendChild(text);
    }
    track.appendChild(el);
  }
  return append(row, label, track);
}

/**
 * Lane sets of `model` (one per schedule, each headed by its title, total and sentence).
 * @param {import("./whatif.js").LaneModel} model
 * @param {{titles: Record<string, string>, rules?: Record<string, string>, sentences: Record<string, string>, totals: Record<string, number>, base: string, unit: string, onlyPresent?: boolean}} text
 *   `onlyPresent`: a set leaves out the lanes its schedule does not have (two runs' sets)
 */
export function laneSets(model, text) {
  const wrap = h("div", "pf-wi-sets");
  for (const name of model.names) {
    const set = h("section", "pf-wi-schedule");
    set.dataset.schedule = name;
    set.dataset.total = String(text.totals[name]);
    const head = h("h3", "pf-wi-title", text.titles[name] ?? name);
    const rule = text.rules?.[name];
    if (rule) head.appendChild(h("span", "pf-wi-rule pf-muted", ` · ${rule}`));
    head.appendChild(h("span", "pf-wi-total pf-mono", `${Number(text.totals[name]).toFixed(3)} ${text.unit}`));
    const sentence = text.sentences[name] ? h("p", "pf-wi-sentence", text.sentences[name]) : null;
    const lanes = h("div", "pf-wi-lanes");
    lanes.appendChild(axisRow(model.bounds));
    for (const lane of model.lanes) {
      if (text.onlyPresent && !lane.slots[name]) continue;
      lanes.appendChild(laneRow(lane, name, model.bounds, text.base, text.unit));
    }
    wrap.appendChild(append(set, head, sentence, lanes));
  }
  return wrap;
}

/** "Showing the 60 branches …; 9,940 more are hidden." or null. @param {import("./whatif.js").LaneModel} model */
export function hiddenNote(model) {
  if (!model.hidden) return null;
  return h("p", "pf-wi-hidden",
    `${model.total.toLocaleString("en-US")} lanes: showing the ${model.lanes.length} whose timing differs most between the schedules; `
    + `${model.hidden.toLocaleString("en-US")} more are hidden.`);
}

/**
 * The view, in `root` (a hidden `#pf-whatif` section of the run page).
 * @param {HTMLElement} root @param {string} runId
 */
export function createWhatIfView(root, runId) {
  /** @type {any} */
  let data = null;
  let loading = false;
  let fetchedSeq = -2;
  let fetchedAt = 0;
  let shown = false;
  /** @type {number | null} */
  let limit = null;
  let ended = false;
  let lastSeq = -1;
  let timer = 0;

  const bar = h("div", "pf-wi-bar-top");
  const intro = h("p", "pf-wi-intro",
    "The same work, computed from the recorded events alone: as it ran, under graph-wide supersteps (a flat graph: "
    + "every ready operation waits for the superstep's slowest) and under local barriers (each coordinator goes on "
    + "as soon as its own join completes).");
  const limitInput = /** @type {HTMLInputElement} */ (h("input", "pf-input pf-input-small pf-wi-limit"));
  limitInput.type = "number";
  limitInput.min = "1";
  limitInput.placeholder = "no limit";
  limitInput.setAttribute("aria-label", "max_concurrency of the supersteps schedule");
  const limitLabel = append(h("label", "pf-wi-limit-label"), h("span", "pf-label", "Supersteps max_concurrency"), limitInput);
  const refresh = h("button", "pf-button pf-button-small", "Refresh");
  refresh.setAttribute("type", "button");
  const status = h("span", "pf-wi-status pf-muted");
  status.setAttribute("role", "status");
  append(bar, limitLabel, refresh, status);
  const body = h("div", "pf-wi-body");
  root.replaceChildren(intro, bar, body);
  root.dataset.state = "idle";

  const draw = () => {
    if (!data || !data.schedules) return;
    const unit = typeof data.unit === "string" ? data.unit : "s";
    const schedules = data.schedules;
    const model = laneModel(schedules, { unit, base: "recorded" });
    /** @type {Record<string, string>} */
    const sentences = {};
    /** @type {Record<string, number>} */
    const totals = {};
    for (const name of model.names) {
      sentences[name] = scheduleSentence(schedules, name, unit);
      totals[name] = Number(schedules[name].total);
    }
    const notes = Array.isArray(data.inferred) && data.inferred.length
      ? append(h("div", "pf-wi-inferred"), h("span", "pf-label", "Assumed"),
        append(h("ul"), ...data.inferred.map((/** @type {any} */ s) => h("li", "", String(s)))))
      : null;
    // The server's own sentences (what `python -m runtime whatif` prints), compared between
    // the two computed models, so the recording's scheduling noise does not move them.
    const summary = Array.isArray(data.summary) && data.summary.length
      ? append(h("div", "pf-wi-summary"), h("span", "pf-label", "In short"),
        append(h("ul"), ...data.summary.map((/** @type {any} */ s) => h("li", "", String(s)))))
      : null;
    const partial = data.complete === false
      ? h("p", "pf-wi-partial", "The run is still going: these schedules are computed from the events so far.") : null;
    body.replaceChildren(...[partial, summary, notes, hiddenNote(model),
      laneSets(model, { titles: SCHEDULE_TITLES, rules: SCHEDULE_RULES, sentences, totals, base: "recorded", unit })]
      .filter((n) => n !== null));
  };

  const load = async () => {
    if (loading) return;
    loading = true;
    const seq = lastSeq;
    fetchedAt = Date.now();
    if (!data) root.dataset.state = "loading";
    setText(status, "computing…");
    try {
      data = await requestJson(whatIfUrl(runId, limit));
      fetchedSeq = seq;
      root.dataset.state = "ready";
      setText(status, "");
      draw();
    } catch (error) {
      fetchedSeq = seq;
      root.dataset.state = "error";
      const message = error instanceof ApiError ? `${error.message} (${error.status})` : String(error);
      setText(status, "");
      body.replaceChildren(h("p", "pf-wi-error", `The schedules could not be computed: ${message}`));
    } finally {
      loading = false;
    }
    // The run may have moved on while this was asked.
    view.sync({ ended, lastSeq });
  };

  refresh.addEventListener("click", () => { void load(); });
  limitInput.addEventListener("change", () => {
    const n = Number(limitInput.value);
    limit = Number.isInteger(n) && n > 0 ? n : null;
    void load();
  });

  const view = {
    /** Show or hide the view; shown, it loads (again when the run moved on). @param {boolean} on */
    show(on) {
      shown = on;
      root.hidden = !on;
      if (on) view.sync({ ended, lastSeq });
    },
    get shown() {
      return shown;
    },
    /**
     * The run moved on: a shown view of a run that was still running asks again (not more
     * often than every REFRESH_MS, and once more when the run ends).
     * @param {{ended: boolean, lastSeq: number}} run
     */
    sync(run) {
      ended = run.ended;
      lastSeq = run.lastSeq;
      if (!shown || loading) return;
      // The server computes from every stored event: a complete answer of an ended run is final.
      if (data && data.complete !== false && ended) return;
      if (fetchedSeq === lastSeq) return;
      const wait = data ? REFRESH_MS - (Date.now() - fetchedAt) : 0;
      if (wait > 0) {
        if (!timer) timer = window.setTimeout(() => { timer = 0; view.sync({ ended, lastSeq }); }, wait);
        return;
      }
      void load();
    },
  };
  return view;
}
