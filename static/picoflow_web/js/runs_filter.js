// @ts-check
/**
 * The runs list's filters and order (data, no DOM): what `GET /api/runs` is asked for,
 * and the same rules applied to summaries that arrive live over the websocket, so a run
 * that starts while the list is filtered or sorted lands where a reload would put it.
 *
 * - `q` searches message, reply and flow (any case). The server also searches branch
 *   keys, which a live summary does not carry: a run found only by a branch key shows
 *   after the next reload.
 * - `session` is an id prefix; `since` / `until` bound the start time (ISO 8601).
 * - `sort` is a column (`started_at`, `flow`, `status`, `message`, `events`, `branches`,
 *   `duration`), `-` first for descending; unknown durations sort last either way.
 */

/**
 * @typedef {{flow: string, status: string, session: string, conflicts: boolean,
 *   rejected: boolean, q: string, since: string, until: string, sort: string}} Filters
 */

export const DEFAULT_SORT = "-started_at";
export const SORTS = ["started_at", "flow", "status", "message", "events", "branches", "duration"];

/** Filters from a query string (unknown sorts fall back to newest first). @param {URLSearchParams} params @returns {Filters} */
export function filtersFrom(params) {
  const sort = params.get("sort") || DEFAULT_SORT;
  return {
    flow: params.get("flow") || "", status: params.get("status") || "",
    session: params.get("session") || "", conflicts: params.get("conflicts") === "1",
    rejected: params.get("rejected") === "1",
    q: params.get("q") || "", since: params.get("since") || "", until: params.get("until") || "",
    sort: SORTS.includes(sort.replace(/^-/, "")) ? sort : DEFAULT_SORT,
  };
}

/** The query string of `f` (defaults left out, so plain lists keep plain URLs). @param {Filters} f */
export function queryOf(f) {
  const params = new URLSearchParams();
  if (f.flow) params.set("flow", f.flow);
  if (f.status) params.set("status", f.status);
  if (f.session) params.set("session", f.session);
  if (f.conflicts) params.set("conflicts", "1");
  if (f.rejected) params.set("rejected", "1");
  if (f.q) params.set("q", f.q);
  if (f.since) params.set("since", f.since);
  if (f.until) params.set("until", f.until);
  if (f.sort && f.sort !== DEFAULT_SORT) params.set("sort", f.sort);
  return params.toString();
}

/** @param {any} run */
function replyText(run) {
  if (!run.reply) return "";
  return typeof run.reply.message === "string" ? run.reply.message : JSON.stringify(run.reply);
}

/** Whether a run summary passes the filters. @param {any} run @param {Filters} f */
export function matches(run, f) {
  if (f.flow && run.flow !== f.flow) return false;
  if (f.status && run.status !== f.status) return false;
  if (f.session && !String(run.session_id || "").startsWith(f.session)) return false;
  if (f.conflicts && !run.has_conflicts) return false;
  if (f.rejected && !(run.rejected_count > 0)) return false;
  const started = run.started_at ? Date.parse(run.started_at) : NaN;
  if (f.since && !(started >= Date.parse(f.since))) return false;
  if (f.until && !(started <= Date.parse(f.until))) return false;
  if (f.q) {
    const needle = f.q.toLowerCase();
    const hay = [run.message || "", run.flow || "", replyText(run)];
    if (!hay.some((text) => text.toLowerCase().includes(needle))) return false;
  }
  return true;
}

/**
 * Seconds a run took by its events (as its page shows it), or null while unknown; older
 * summaries without `duration` fall back to start and finish times.
 * @param {any} run
 */
export function durationOf(run) {
  if (typeof run.duration === "number") return run.duration;
  if (run.duration === null) return null;
  const started = run.started_at ? Date.parse(run.started_at) : NaN;
  const finished = run.finished_at ? Date.parse(run.finished_at) : NaN;
  return Number.isFinite(started) && Number.isFinite(finished) ? (finished - started) / 1000 : null;
}

/** @param {any} run @param {string} column */
function keyOf(run, column) {
  switch (column) {
    case "started_at": { const t = Date.parse(run.started_at); return Number.isFinite(t) ? t : null; }
    case "events": return run.event_count ?? 0;
    case "branches": return run.branch_count ?? 0;
    case "duration": return durationOf(run);
    default: return String(run[column] ?? "");
  }
}

/**
 * Runs in the order `sort` asks for, as the server orders them (ties: the greater id first).
 * @param {any[]} runs @param {string} sort
 */
export function sortRuns(runs, sort) {
  const descending = sort.startsWith("-");
  const column = sort.replace(/^-/, "");
  const keyed = runs.map((run) => ({ run, key: keyOf(run, column) }));
  keyed.sort((a, b) => {
    if (a.key === null || b.key === null) {
      if (a.key !== b.key) return a.key === null ? 1 : -1;  // unknown last, either way
    } else if (a.key !== b.key) {
      const order = a.key < b.key ? -1 : 1;
      return descending ? -order : order;
    }
    return a.run.id < b.run.id ? 1 : a.run.id > b.run.id ? -1 : 0;
  });
  return keyed.map((item) => item.run);
}
