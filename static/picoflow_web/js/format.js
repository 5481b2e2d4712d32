// @ts-check
/**
 * Pure text formatting for values, events and times (no DOM; node tests import it).
 * Everything here returns strings that the DOM modules set with `textContent`.
 */

import { jsonPrefix } from "./json_prefix.js";

/** Longest pretty JSON the page shows before offering "show all". */
export const PRETTY_LIMIT = 20_000;

/**
 * Whether `value` is the runtime's marker for a value too large to carry in an event.
 * @param {any} value
 */
export function isTruncated(value) {
  return !!value && typeof value === "object" && value.truncated === true && typeof value.size === "number";
}

/**
 * Pretty JSON, cut at `limit` characters (`cut`: there is more). Only what is shown is
 * written: a wide join's result is megabytes of it, and the panel showing it is drawn
 * again as a live run goes on.
 * @param {any} value @param {number} [limit]
 * @returns {{text: string, cut: boolean}}
 */
export function pretty(value, limit = PRETTY_LIMIT) {
  let text;
  if (value === undefined) text = "undefined";
  else if (isTruncated(value)) {
    text = `(too large for an event: ${formatBytes(value.size)} of JSON)\n${value.preview || ""}…`;
  } else {
    try {
      const prefix = jsonPrefix(value, limit, 2);
      if (prefix.cut) return { text: /** @type {string} */ (prefix.text), cut: true };
      text = prefix.text;
    } catch {
      text = String(value);
    }
  }
  if (text === undefined) text = String(value);
  if (text.length > limit) return { text: text.slice(0, limit), cut: true };
  return { text, cut: false };
}

/** Characters of JSON a value may have to be shown on one line in a table cell. */
const CELL_LINE = 60;

/**
 * How a table cell shows a value: on one line (`line`) when its one-line JSON is shorter
 * than `CELL_LINE` characters, else as a block of pretty JSON (`block`, as `pretty` gives
 * it). Every line of the pretty JSON keeps a character in the one-line JSON, so a value
 * with that many lines or more is a block: decided off the block's text, a wide value (a
 * join's record of every branch) has its keys read once, not once for the line and once
 * for the block.
 * @param {any} value
 * @returns {{line: string} | {block: {text: string, cut: boolean}}}
 */
export function cellOf(value) {
  let block;
  if (value !== null && typeof value === "object" && !isTruncated(value)) {
    block = pretty(value);
    if (block.cut || linesReach(block.text, CELL_LINE)) return { block };
  }
  const line = preview(value, 400);
  if (line.length < CELL_LINE && !line.includes("\n")) return { line };
  return { block: block ?? pretty(value) };
}

/** Whether `text` has `n` lines or more. @param {string} text @param {number} n */
function linesReach(text, n) {
  let lines = 1;
  for (let at = text.indexOf("\n"); at >= 0 && lines < n; at = text.indexOf("\n", at + 1)) lines += 1;
  return lines >= n;
}

/**
 * One line of JSON, for tables and lists: strings unquoted if `bare`, cut at `limit`.
 * @param {any} value @param {number} [limit] @param {boolean} [bare]
 */
export function preview(value, limit = 120, bare = false) {
  let text;
  if (isTruncated(value)) text = `(${formatBytes(value.size)} truncated) ${value.preview || ""}`;
  else if (bare && typeof value === "string") text = value;
  else {
    try {
      // Only the line's worth of the JSON: a wide join's result is megabytes of it.
      const prefix = jsonPrefix(value, limit);
      text = prefix.cut ? `${prefix.text}…` : prefix.text;
    } catch {
      text = String(value);
    }
    if (text === undefined) text = String(value);
  }
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

/** @param {number} n */
export function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** @param {number} n */
export function formatCount(n) {
  return n.toLocaleString("en-US");
}

/**
 * A duration in seconds for people ("—" when unknown).
 * @param {number | null | undefined} seconds
 */
export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  if (seconds < 1) return `${Math.round(seconds * 1000)}ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)}s`;
  const m = Math.floor(seconds / 60);
  return `${m}m ${String(Math.round(seconds - m * 60)).padStart(2, "0")}s`;
}

/**
 * A wall-clock time (ISO-8601 text, or Unix seconds as events carry it) as local
 * "HH:MM:SS", with the date too when not today.
 * @param {string | number | null | undefined} when @param {Date} [today]
 */
export function formatClock(when, today = new Date()) {
  if (when === null || when === undefined || when === "") return "—";
  const d = typeof when === "number" ? new Date(when * 1000) : new Date(when);
  if (Number.isNaN(d.getTime())) return String(when);
  const time = d.toLocaleTimeString("en-GB", { hour12: false });
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.toISOString().slice(0, 10)} ${time}`;
}

/**
 * How a run can stand, as the folds and the runs list name them. Each is also the badge
 * kind it shows as (`pf-badge-<status>`, `pf-dot-<status>`, `pf-status-<status>`).
 */
export const RUN_STATUSES = ["queued", "running", "finished", "failed", "interrupted", "cancelled"];

/**
 * The badge kind of a run status: the status itself when known, else "muted".
 * @param {string | null | undefined} status
 */
export function runStatusKind(status) {
  return status && RUN_STATUSES.includes(status) ? status : "muted";
}

/**
 * What the page says about an interrupted run: its executor stopped reporting, and the
 * reason the dashboard gave (`run.interrupted`'s, as the fold keeps it in
 * `run.interruption`), if known.
 * @param {{reason?: string | null} | null | undefined} interruption
 */
export function interruptionText(interruption) {
  const reason = interruption && typeof interruption.reason === "string" ? interruption.reason.trim() : "";
  return reason ? `Interrupted: the executor stopped reporting (${reason}).` : "Interrupted: the executor stopped reporting.";
}

/**
 * An error's name for a chip: its type, since a flow's own exception (`SoldOutError`)
 * arrives with the generic code `internal`, which says nothing.
 * @param {any} error
 */
export function errorLabel(error) {
  return String(error?.type || error?.code || "Error");
}

/**
 * An error in one line: `Type: message`, with its code when the code says more than
 * `internal`.
 * @param {any} error
 */
export function errorText(error) {
  const code = error?.code && error.code !== "internal" && error.code !== error?.type ? ` [${error.code}]` : "";
  const message = error?.message ? `: ${error.message}` : "";
  return `${errorLabel(error)}${message}${code}`;
}

/**
 * A request's place in its barrier, counted from 1 for people ("1 of 3"); paths and
 * indices in events stay zero-based.
 * @param {number} index @param {number} total
 */
export function requestOrdinal(index, total) {
  return `${index + 1} of ${total}`;
}

/**
 * The paths an event's list names; a paged one's first page, then how many in all.
 * @param {any} e @param {string} name
 */
function pathsOf(e, name) {
  const paths = (e[name] || []).join(", ");
  const total = e.counts?.[name];
  return total > (e[name] || []).length ? `${paths} … (${total} in all)` : paths;
}

/**
 * A one-line summary of an event for event lists.
 * @param {any} e
 */
export function describeEvent(e) {
  switch (e.type) {
    case "turn.started": return `${e.flow}: ${preview(e.message, 80, true)}${e.resumes ? ` (resumes run ${e.resumes})` : ""}`;
    case "turn.finished": return `${e.success ? "replied" : "failed"}: ${preview(e.message, 80, true)}`;
    case "turn.failed": return errorText(e.error);
    case "turn.cancelled": return `${e.reason || "stopped"}${e.requested_by ? ` (by ${e.requested_by})` : ""}${typeof e.revision === "number" ? `, session stays at revision ${e.revision}` : ""}`;
    case "session.loaded": return `revision ${e.revision}${e.new_session ? " (new)" : ""}, cursor ${e.current_step ?? "—"}`;
    case "session.saved": return `revision ${e.revision} (${e.reason})`;
    case "step.entered": return `${e.step} (${e.how}, level ${e.level})`;
    case "step.exited": return e.step;
    case "cursor.moved": return `${e.from_step ?? "—"} → ${e.to_step}`;
    case "model.started": return `${e.step} call ${e.call}.${e.attempt}, ${(e.messages || []).length} messages`;
    case "model.finished": return `${e.total_tokens} tokens, ${(e.tool_calls || []).length ? `tools: ${e.tool_calls.map((/** @type {any} */ t) => t.name).join(", ")}` : preview(e.content, 60, true)}`;
    case "model.delta": return `${e.step} call ${e.call}.${e.attempt}: ${[e.text ? preview(e.text, 60, true) : "", ...(e.tool_calls || []).map((/** @type {any} */ t) => `${t.name ? `${t.name} ` : ""}args +${String(t.arguments ?? "").length} chars`)].filter(Boolean).join(", ") || "(nothing)"}`;
    case "model.failed": return `${errorText(e.error)}${e.retrying ? " (retrying)" : ""}`;
    case "tool.started": return `${e.name}(${preview(e.args, 60)})`;
    case "tool.finished": return `${e.name}: ${e.status}${e.transition ? ` → ${e.transition.kind}` : ""}`;
    case "state.replaced": return `${e.step}.${e.field} = ${preview(e.value, 60)}${e.draft ? " (draft)" : ""}`;
    case "state.removed": return `${e.step}.${e.field} removed${e.draft ? " (draft)" : ""}`;
    case "state.contributed": return `${e.step}.${e.field} += ${preview(e.value, 60)}${e.draft ? " (draft)" : ""}`;
    case "barrier.forked": return `${e.barrier}: ${e.count ?? (e.requests || []).length} branches, ${e.policy}`;
    case "barrier.requested": return `${e.barrier}: ${(e.requests || []).length} more ${(e.requests || []).length === 1 ? "request" : "requests"} from request ${e.first + 1}`;
    case "branch.started": return `${e.key} (${e.step})${e.rerun ? `, run again: ${e.rerun}` : ""}`;
    case "branch.reused": return `${e.key}: reused from run ${e.original_run_id}${typeof e.original_seq === "number" ? ` #${e.original_seq}` : ""}, ${e.total_tokens} tokens saved`;
    case "branch.fulfilled": return `${e.key}: ${preview(e.output, 60)}`;
    case "branch.rejected": return `${e.key}: ${errorText(e.error)}${e.cancelled ? " (cancelled)" : ""}`;
    case "branch.direct_result": return `${e.tool}: ${preview(e.value, 60)}`;
    case "join.reduced": return `${e.barrier} ${e.step}.${e.field} (${e.channel}, ${e.counts?.inputs ?? (e.inputs || []).length} inputs)`;
    case "join.published": return `${e.barrier} → ${e.target}: ${(e.fields || []).length} fields, ${e.counts?.discarded ?? (e.discarded || []).length} discarded`;
    case "join.invalidated": return `${e.barrier}: ${e.error?.code}`;
    case "cancel.requested": return `${e.barrier}: ${e.reason}`;
    case "cancel.propagated": return `${e.barrier}: running ${pathsOf(e, "running") || "—"}; queued ${pathsOf(e, "queued") || "—"}`;
    case "cancel.grace_expired": return `${e.barrier}: closed ${pathsOf(e, "closed")}`;
    case "list.continued": return `${e.barrier} ${e.of}: ${(e.items || []).length} more ${e.name} from ${e.first + 1}`;
    case "checkpoint.saved": return `${e.barrier}: revision ${e.revision}`;
    case "checkpoint.failed": return `${e.barrier}: ${e.error?.message}`;
    case "concurrent.batch_started": return `${e.group} batch ${e.batch + 1} of ${e.batches}: items ${(e.items || []).join(", ")} of ${e.total} → ${e.flow}`;
    case "concurrent.child_started": return `${e.group} item ${e.item} → run ${e.child_run_id}${e.attempt > 1 ? ` (attempt ${e.attempt})` : ""}`;
    case "concurrent.child_finished": return `${e.group} item ${e.item}: ${String(e.status).replace("_", " ")}${e.error ? ` (${e.error.message})` : e.reply !== null && e.reply !== undefined ? `: ${preview(e.reply, 60, true)}` : ""}`;
    case "concurrent.batch_finished": return `${e.group} batch ${e.batch + 1}: ${e.fulfilled} fulfilled, ${e.failed} not`;
    case "sink.overflowed": return `${e.sink} dropped ${e.dropped} (seq ${e.first_seq}–${e.last_seq})`;
    case "run.interrupted": return `${e.reason} (silent for ${formatDuration(e.silent_for)})${e.worker ? `, worker ${e.worker}` : ""}`;
    default: return "";
  }
}

/**
 * The text of a chat message's content (strings as they are, parts joined).
 * @param {any} content
 */
export function messageText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    // A part is a string, `{text}` (OpenAI, LangChain) or `{type, content}` (the OTel GenAI
    // conventions' message parts, as a trace's model call carries them).
    return content.map((part) => (typeof part === "string" ? part
      : part && typeof part.text === "string" ? part.text
        : part && typeof part.content === "string" ? part.content : JSON.stringify(part))).join("\n");
  }
  return content === null || content === undefined ? "" : JSON.stringify(content, null, 2);
}

/**
 * Parse the run page's deep-link hash: `#inv=<path>&seq=<n>` or `#barrier=<id>&seq=<n>`.
 * @param {string} hash
 * @returns {{inv: string | null, barrier: string | null, seq: number | null}}
 */
export function parseHash(hash) {
  const params = new URLSearchParams(hash.replace(/^#/, ""));
  const seqText = params.get("seq");
  const seq = seqText !== null && /^\d+$/.test(seqText) ? Number(seqText) : null;
  return { inv: params.get("inv"), barrier: params.get("barrier"), seq };
}

/**
 * The deep-link hash for a selection and a pinned seq ("" when neither).
 * @param {{inv?: string | null, barrier?: string | null, seq?: number | null}} link
 */
export function formatHash(link) {
  const params = new URLSearchParams();
  if (link.barrier !== null && link.barrier !== undefined) params.set("barrier", link.barrier);
  else if (link.inv !== null && link.inv !== undefined) params.set("inv", link.inv);
  if (link.seq !== null && link.seq !== undefined) params.set("seq", String(link.seq));
  const text = params.toString();
  return text ? `#${text}` : "";
}
