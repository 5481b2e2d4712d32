// @ts-check
/**
 * Invocation paths and barrier ids as people read them: the branch keys (or step names) of
 * the invocation and its callers, `Planner › news` for `0.1`, and `Planner › barrier 1`
 * for `0/b0`. Pure (no DOM). The page still shows the path or id beside or under the
 * label, since that is what the events and the API say.
 */

/** @typedef {import("./fold.js").Run} Run */

export const SEPARATOR = " › ";

/**
 * The label of invocation `path` in `run`: the turn is "turn"; a branch is its callers'
 * and its own branch key (its step's name where it has no key), outermost first. A part
 * of the path the run does not know (yet) reads as its path segment.
 * @param {Run} run @param {string} path @returns {string}
 */
export function labelOf(run, path) {
  if (path === "") return "turn";
  const parts = path.split(".");
  const names = [];
  for (let n = 1; n <= parts.length; n += 1) {
    const inv = run.invocations.get(parts.slice(0, n).join("."));
    names.push(inv ? inv.key || inv.step || parts[n - 1] : parts[n - 1]);
  }
  return names.join(SEPARATOR);
}

/**
 * The label of barrier `id`: who forked it, and which of its caller's barriers it is, by
 * the ordinal the schema's id carries (`0/b2` is "Planner › barrier 2"), so the label and
 * the id shown beside it never name two different numbers. A root barrier names the step
 * that called it (the turn itself is no step); an unknown id reads as itself.
 * @param {Run} run @param {string} id @returns {string}
 */
export function barrierLabelOf(run, id) {
  const barrier = run.barriers.get(id);
  if (!barrier) return id;
  const caller = run.invocations.get(barrier.caller);
  const place = caller ? caller.barriers.indexOf(id) : -1;
  if (fromSpans(run)) return spanBarrierLabel(run, barrier, place);
  if (fromLangGraph(run)) {
    // LangGraph's superstep 0 runs `__start__`, which the tracer records as the turn's
    // input, not as a barrier: the first barrier is superstep 1, as LangGraph numbers it.
    // The turn is no node, and the tracer's caller step only keeps the graph's state.
    const name = place >= 0 ? `superstep ${place + 1}` : id;
    return barrier.caller === "" ? name : `${labelOf(run, barrier.caller)}${SEPARATOR}${name}`;
  }
  const who = barrier.caller === "" ? barrier.callerStep || "turn" : labelOf(run, barrier.caller);
  const ordinal = barrierOrdinal(id);
  return `${who}${SEPARATOR}barrier ${ordinal ?? (place >= 0 ? place : id)}`;
}

/**
 * The ordinal a barrier id carries: `b2` and `0.1/b2` are 2; null for an id of another shape.
 * @param {string} id @returns {number | null}
 */
export function barrierOrdinal(id) {
  const found = /(?:^|\/)b(\d+)$/.exec(id);
  return found ? Number(found[1]) : null;
}

/**
 * A barrier named in a sentence: its label with the schema's id beside it,
 * "Planner › barrier 2 (0/b2)"; a LangGraph superstep or a span group likewise.
 * @param {Run} run @param {string} id @returns {string}
 */
export function barrierNameOf(run, id) {
  const label = barrierLabelOf(run, id);
  return label === id ? id : `${label} (${id})`;
}

/**
 * Whether `run` was recorded from LangGraph: `LangGraphTracer` names its turns' flow
 * "LangGraph", or "LangGraph: <graph name>" (the events have no field for their origin).
 * @param {Run} run @returns {boolean}
 */
export function fromLangGraph(run) {
  return /^LangGraph(:|$)/.test(run.flow || "");
}

/**
 * Whether `run` was read from OpenTelemetry spans: the OTLP receiver names a trace's run
 * "OpenTelemetry:<service.name>" (its barrier tree, branches and timings are inferred from
 * span times; spans carry no state, so the run has no state views).
 * @param {Run} run @returns {boolean}
 */
export function fromSpans(run) {
  return /^OpenTelemetry(:|$)/.test(run.flow || "");
}

/**
 * The `service.name` of a run read from spans ("" when the flow names none).
 * @param {Run} run @returns {string}
 */
export function spanService(run) {
  const flow = run.flow || "";
  return flow.startsWith("OpenTelemetry:") ? flow.slice("OpenTelemetry:".length).trim() : "";
}

/**
 * The span an invocation of a span run stands for: its step is the span's name (the root
 * span's is the step the turn entered first).
 * @param {Run} run @param {string} path @returns {string}
 */
function spanNameOf(run, path) {
  if (path === "") {
    const root = run.trail.find((t) => t.path === "" && t.how === "start");
    return root ? root.step : "the root span";
  }
  const inv = run.invocations.get(path);
  return inv ? inv.step || inv.key || path : path;
}

/**
 * A barrier of a span run in span words: the overlapping child spans of its parent span;
 * a parent's later groups of them (sequential after the first) are numbered from 2, so a
 * label drawn while the trace arrives does not change when another group comes.
 * @param {Run} run @param {import("./fold.js").Barrier} barrier @param {number} place
 */
function spanBarrierLabel(run, barrier, place) {
  return `overlapping child spans of ${parentSpanOf(run, barrier)}${place > 0 ? ` (${place + 1})` : ""}`;
}

/** @param {Run} run @param {import("./fold.js").Barrier} barrier @returns {string} */
function parentSpanOf(run, barrier) {
  return barrier.caller === "" ? barrier.callerStep || "the root span" : spanNameOf(run, barrier.caller);
}

/**
 * What the page says instead of state views on a run read from spans, per thing selected:
 * the turn, a barrier (`id`) or a branch (`id` is its path). Pure text, for the inspector.
 * @param {Run} run @param {"turn" | "barrier" | "branch"} what @param {string} [id]
 * @returns {string}
 */
export function spansNotice(run, what, id = "") {
  const service = spanService(run);
  if (what === "barrier") {
    const barrier = run.barriers.get(id);
    const parent = barrier ? parentSpanOf(run, barrier) : "its parent span";
    return `Inferred from spans: its branches are child spans of ${parent} that overlap in time; `
      + "the fork is the first one's start, the join the last one's end. "
      + "Spans carry no state: no reductions, no publication, no state views.";
  }
  if (what === "branch") {
    return `Inferred from spans: this branch is the span ${spanNameOf(run, id)}, its timings the span's start and end. `
      + "No state views: spans carry no state, so there is nothing to show of what this branch could see, wrote, or had published.";
  }
  return `Inferred from OpenTelemetry spans${service ? ` of ${service}` : ""}: the barrier tree, branches and timings are inferred from span times `
    + "(the root span is the turn; overlapping child spans a barrier of branches; GenAI and tool spans model and tool calls). "
    + "No state views: spans carry no state.";
}

/**
 * What invocation `path` runs, in the run's words: its step; for a LangGraph run, the
 * node it ran, or "Send to <node>" for a task a `Send` pushed (the tracer keys those
 * `<node>:<index>`, a node's own task by its name).
 * @param {Run} run @param {string} path @returns {string}
 */
export function taskNounOf(run, path) {
  const inv = run.invocations.get(path);
  if (!inv) return path;
  if (fromSpans(run)) return `span ${inv.step}`;
  if (!fromLangGraph(run)) return inv.step;
  const key = inv.key || "";
  const pushed = key.startsWith(`${inv.step}:`) && /^\d+$/.test(key.slice(inv.step.length + 1));
  return pushed ? `Send to ${inv.step}` : `node ${inv.step}`;
}

/**
 * A state field as the run names it: `step.field`; in a LangGraph run, the channel (the
 * tracer keeps the whole graph state under one step).
 * @param {Run} run @param {string} step @param {string} field @returns {string}
 */
export function fieldLabelOf(run, step, field) {
  return fromLangGraph(run) ? `channel ${field}` : `${step}.${field}`;
}
