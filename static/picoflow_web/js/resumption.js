// @ts-check
/**
 * Resuming a run, as data (no DOM; node tests import it): what the run page's Resume
 * button shows, how a resumed run's header counts the branches it reused (restored from
 * the ledger, `branch.reused`) against those it executed, and the tokens the reused ones
 * saved, and where a reused branch ran.
 *
 * The counts come from the folded run (an invocation with `reused`); whether a run may be
 * resumed comes from the server (`resumable` in `GET /api/runs/<id>`), which alone knows
 * the session's branch ledger.
 */

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */

/** Statuses of a run whose turn may have left a branch ledger to resume. */
export const RESUMABLE_STATUSES = ["interrupted", "failed", "cancelled"];

/**
 * Reused and executed branches of the run (its turn's own invocation aside), and the
 * tokens the reused ones spent where they ran: what resuming saved.
 * @param {Run} run
 * @returns {{reused: number, executed: number, tokensSaved: number}}
 */
export function reuseCounts(run) {
  let reused = 0;
  let executed = 0;
  let tokensSaved = 0;
  for (const inv of run.invocations.values()) {
    if (inv.path === "") continue;
    if (inv.reused) {
      reused += 1;
      tokensSaved += inv.reused.tokens || 0;
    } else if (inv.startedSeq !== null) {
      executed += 1;
    }
  }
  return { reused, executed, tokensSaved };
}

/**
 * The header's line of a resumed run: "3 reused · 3 executed · 45 tokens saved"; "" for a
 * run that reused nothing and resumes none.
 * @param {Run} run
 */
export function reuseLine(run) {
  // Every frame of a live run asks; only a run that reused or resumes has a line, and only
  // then are its invocations counted.
  if (!run.reusedBranches && !run.resumes) return "";
  const c = reuseCounts(run);
  if (!c.reused && !run.resumes) return "";
  return `${c.reused} reused · ${c.executed} executed · ${c.tokensSaved.toLocaleString("en-US")} tokens saved`;
}

/**
 * Where a reused branch ran: the original run's page at the event that fulfilled it.
 * @param {{runId: string, seq: number | null}} reused
 */
export function reusedHref(reused) {
  const seq = reused.seq === null ? "" : `#seq=${reused.seq}`;
  return `/runs/${encodeURIComponent(reused.runId)}/${seq}`;
}

/**
 * What a reused branch's chip says when hovered.
 * @param {{runId: string, seq: number | null, tokens: number}} reused
 */
export function reusedTitle(reused) {
  const at = reused.seq === null ? "" : ` (event #${reused.seq})`;
  return `Reused from the branch ledger: it ran in run ${reused.runId}${at} and spent ${reused.tokens} tokens there; not run again`;
}

/**
 * @typedef {{pending: boolean, error: string}} ResumeRequest
 * @typedef {{entries: number, tokens: number} | null} Resumable
 */

/**
 * The Resume button: shown to whoever may run turns in the run's project, on a run that
 * ended interrupted, failed or stopped while the server says it may be resumed (its
 * session's ledgered turn names it as the turn's latest run).
 * @param {string} status the run's status
 * @param {Resumable} resumable from the run's detail
 * @param {boolean} canRun
 * @param {ResumeRequest} request
 */
export function resumeControl(status, resumable, canRun, request) {
  const visible = canRun && RESUMABLE_STATUSES.includes(status) && !!resumable;
  const entries = resumable ? resumable.entries : 0;
  const tokens = resumable ? resumable.tokens : 0;
  return {
    visible,
    label: request.pending ? "Resuming…" : "Resume",
    disabled: request.pending,
    note: visible ? `reuses ${entries} ${entries === 1 ? "branch" : "branches"} · saves ${tokens.toLocaleString("en-US")} tokens` : "",
    title: `Run the turn again from where it began, reusing the ${entries} fulfilled ${entries === 1 ? "branch" : "branches"} its branch ledger holds (their models are not called again)`,
    error: request.error,
  };
}

/**
 * A run's detail as the page keeps it: what `GET /api/runs/<id>` says of resuming it.
 * @param {any} run the API's run
 * @returns {{resumable: Resumable, resumedBy: string | null}}
 */
export function resumeDetail(run) {
  const r = run && run.resumable;
  const resumable = r && typeof r.entries === "number" && typeof r.tokens === "number" ? { entries: r.entries, tokens: r.tokens } : null;
  return { resumable, resumedBy: run && typeof run.resumed_by === "string" ? run.resumed_by : null };
}
