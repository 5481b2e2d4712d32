// @ts-check
/**
 * The runs list (DOM): runs newest first, filtered by flow, status, session and "has
 * conflicts" (the filters live in the query string, so a filtered list can be linked),
 * kept live by the `/ws/runs/` websocket (a summary whenever a run starts or finishes;
 * HTTP polling of `/api/runs` when websockets fail), and the form that starts a run and
 * goes to its page.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-status[data-state=open|connecting|closed]   connection badge
 *   .pf-run-row[data-run-id][data-status]          one per listed run
 *   #pf-runs-body                                  the table body of the list
 *   #pf-filters select[name=flow|status], input[name=session|conflicts]
 *   #pf-start-form with select[name=flow], textarea[name=message], select[name=session],
 *     button[type=submit]; errors show in #pf-start-form .pf-form-error
 */

import { ApiError, requestJson, runPageUrl, sessionPageUrl, wsUrl } from "./api.js";
import { append, badge, h, setAttr, setText } from "./dom.js";
import { formatClock, formatDuration, interruptionText, preview, runStatusKind } from "./format.js";
import { createFeed } from "./socket.js";
import { createStore } from "./store.js";

const POLL_MS = 4000;

/**
 * @typedef {{flow: string, status: string, session: string, conflicts: boolean}} Filters
 */

/** Whether a run summary passes the filters. @param {any} run @param {Filters} f */
export function matches(run, f) {
  if (f.flow && run.flow !== f.flow) return false;
  if (f.status && run.status !== f.status) return false;
  if (f.session && run.session_id !== f.session) return false;
  if (f.conflicts && !run.has_conflicts) return false;
  return true;
}

/** @param {Filters} f */
function query(f) {
  const params = new URLSearchParams();
  if (f.flow) params.set("flow", f.flow);
  if (f.status) params.set("status", f.status);
  if (f.session) params.set("session", f.session);
  if (f.conflicts) params.set("conflicts", "1");
  return params.toString();
}

/** @param {HTMLElement} root */
export function mountRunsPage(root) {
  const body = /** @type {HTMLElement} */ (document.getElementById("pf-runs-body"));
  const empty = /** @type {HTMLElement} */ (document.getElementById("pf-runs-empty"));
  const status = /** @type {HTMLElement} */ (document.getElementById("pf-status"));
  const filtersForm = /** @type {HTMLFormElement} */ (document.getElementById("pf-filters"));
  const startForm = /** @type {HTMLFormElement} */ (document.getElementById("pf-start-form"));

  const initialParams = new URLSearchParams(location.search);
  /** @type {Filters} */
  const filters = {
    flow: initialParams.get("flow") || "", status: initialParams.get("status") || "",
    session: initialParams.get("session") || "", conflicts: initialParams.get("conflicts") === "1",
  };
  const field = (/** @type {string} */ name) => /** @type {any} */ (filtersForm.elements.namedItem(name));
  field("flow").value = filters.flow;
  field("status").value = filters.status;
  field("session").value = filters.session;
  field("conflicts").checked = filters.conflicts;

  const store = createStore({
    /** @type {Map<string, any>} */
    runs: new Map(),
    filters,
    conn: { state: "connecting", mode: "ws" },
    loaded: false,
    version: 0,
  });

  let loading = 0;
  const load = async () => {
    const ticket = ++loading;
    const f = store.get().filters;
    const data = await requestJson(`/api/runs${query(f) ? `?${query(f)}` : ""}`);
    if (ticket !== loading) return;
    const runs = new Map();
    for (const run of data.runs || []) runs.set(run.id, run);
    store.set({ runs, loaded: true, version: store.get().version + 1 });
  };

  const readFilters = () => {
    const next = {
      flow: field("flow").value, status: field("status").value,
      session: field("session").value.trim(), conflicts: field("conflicts").checked,
    };
    store.set({ filters: next });
    const q = query(next);
    history.replaceState(null, "", q ? `?${q}` : location.pathname);
    load().catch(() => {});
  };
  filtersForm.addEventListener("change", readFilters);
  filtersForm.addEventListener("submit", (event) => { event.preventDefault(); readFilters(); });
  let sessionTimer = 0;
  field("session").addEventListener("input", () => {
    window.clearTimeout(sessionTimer);
    sessionTimer = window.setTimeout(readFilters, 250);
  });

  // Live: summaries over the socket; after a reconnect the list is reloaded (it may have
  // missed some), and while polling the list is simply reloaded.
  let everOpen = false;
  const feed = createFeed({
    url: () => wsUrl("/ws/runs/"),
    onMessage(message) {
      if (message.type !== "run" || !message.run) return;
      const s = store.get();
      const runs = new Map(s.runs);
      if (matches(message.run, s.filters)) {
        if (!runs.has(message.run.id)) {
          const fresh = new Map([[message.run.id, message.run]]);
          for (const [id, run] of runs) fresh.set(id, run);
          store.set({ runs: fresh, version: s.version + 1 });
          return;
        }
        runs.set(message.run.id, message.run);
      } else runs.delete(message.run.id);
      store.set({ runs, version: s.version + 1 });
    },
    onState(state, info) {
      store.set({ conn: { state, ...info } });
      if (state === "open" && info.mode === "ws") {
        if (everOpen) load().catch(() => {});
        everOpen = true;
      }
    },
    async poll() {
      await load();
      return { messages: [] };
    },
    pollInterval: POLL_MS,
  });
  feed.start();
  load().catch((error) => {
    if (error instanceof ApiError && error.status === 401) location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
  });

  // Start a run.
  const flowSelect = /** @type {HTMLSelectElement} */ (startForm.elements.namedItem("flow"));
  const sessionSelect = /** @type {HTMLSelectElement} */ (startForm.elements.namedItem("session"));
  const errorBox = /** @type {HTMLElement} */ (startForm.querySelector(".pf-form-error"));
  const submit = /** @type {HTMLButtonElement} */ (startForm.querySelector("button[type=submit]"));
  const syncSessions = () => {
    // Sessions belong to one flow: offer only the chosen flow's.
    for (const option of Array.from(sessionSelect.options)) {
      if (!option.value) continue;
      option.hidden = option.dataset.flow !== flowSelect.value;
    }
    const chosen = sessionSelect.selectedOptions[0];
    if (chosen && chosen.hidden) sessionSelect.value = "";
  };
  flowSelect.addEventListener("change", syncSessions);
  syncSessions();
  startForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    errorBox.hidden = true;
    const message = /** @type {HTMLTextAreaElement} */ (startForm.elements.namedItem("message")).value;
    const body = { flow: flowSelect.value, message, session_id: sessionSelect.value || undefined };
    submit.disabled = true;
    setText(submit, "Starting…");
    try {
      const data = await requestJson("/api/runs", { method: "POST", body });
      location.assign(runPageUrl(data.run.id));
    } catch (error) {
      errorBox.hidden = false;
      setText(errorBox, error instanceof Error ? error.message : String(error));
      submit.disabled = false;
      setText(submit, "Start");
    }
  });
  startForm.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) startForm.requestSubmit();
  });

  // Render: keyed rows, rebuilt only when their summary changed.
  /** @type {Map<string, {el: HTMLElement, sig: string}>} */
  const rowEls = new Map();
  let renderedVersion = -1;
  const render = () => {
    const s = store.get();
    setAttr(status, "data-state", s.conn.state);
    setAttr(status, "data-mode", s.conn.mode);
    setText(status, s.conn.state === "open" ? (s.conn.mode === "polling" ? "live (polling)" : "live") : s.conn.state === "connecting" ? "connecting" : "offline");
    if (s.version === renderedVersion) return;
    renderedVersion = s.version;
    const ordered = [...s.runs.values()];
    const seen = new Set();
    let previous = null;
    for (const run of ordered) {
      seen.add(run.id);
      const sig = JSON.stringify(run);
      let item = rowEls.get(run.id);
      if (!item || item.sig !== sig) {
        const el = runRow(run);
        if (item) item.el.replaceWith(el);
        item = { el, sig };
        rowEls.set(run.id, item);
      }
      const wanted = previous ? previous.nextSibling : body.firstChild;
      if (wanted !== item.el) body.insertBefore(item.el, wanted);
      previous = item.el;
    }
    for (const [id, item] of rowEls) {
      if (!seen.has(id)) {
        item.el.remove();
        rowEls.delete(id);
      }
    }
    empty.hidden = !(s.loaded && ordered.length === 0);
  };
  store.subscribe(render);
  store.touch();
  void root;
  return { store, feed };
}

/** @param {any} run */
function runRow(run) {
  const tr = h("tr", `pf-run-row pf-status-${run.status}`);
  tr.dataset.runId = run.id;
  tr.dataset.status = run.status;
  const link = (/** @type {string} */ text, /** @type {string} */ cls = "") => {
    const a = h("a", `pf-link ${cls}`.trim(), text);
    a.setAttribute("href", runPageUrl(run.id));
    return a;
  };
  const statusCell = h("td");
  append(statusCell, badge(run.status, runStatusKind(run.status)), run.has_conflicts ? badge("conflict", "conflict") : null);
  const flowCell = h("td");
  flowCell.appendChild(link(run.flow, "pf-strong"));
  // Where it ran: runs shipped from another process name it (host and pid).
  if (run.origin && run.origin.kind === "remote") {
    const origin = h("span", "pf-origin pf-muted", `remote · ${run.origin.label ?? "unknown"}`);
    origin.title = "Shipped from another process to /api/ingest";
    flowCell.append(h("br"), origin);
  }
  const messageCell = h("td", "pf-clip");
  messageCell.appendChild(link(run.message ? preview(run.message, 90, true) : "—"));
  // An interrupted run has no reply: it says why it ended (the summary's interruption, if
  // the server sends one).
  const replyText = run.reply && typeof run.reply.message === "string" ? preview(run.reply.message, 110, true)
    : run.status === "running" ? "…"
      : run.status === "interrupted" ? preview(interruptionText(run.interruption), 110, true) : "";
  const replyCell = h("td", `pf-clip pf-muted${run.status === "interrupted" ? " pf-interrupted-note" : ""}`, replyText);
  const sessionCell = h("td");
  if (run.session_id) {
    const a = h("a", "pf-link pf-mono", run.session_id.length > 12 ? `${run.session_id.slice(0, 12)}…` : run.session_id);
    a.setAttribute("href", sessionPageUrl(run.session_id));
    a.title = run.session_id;
    sessionCell.appendChild(a);
  } else sessionCell.appendChild(h("span", "pf-muted", "new"));
  const started = run.started_at ? Date.parse(run.started_at) : NaN;
  const finished = run.finished_at ? Date.parse(run.finished_at) : NaN;
  const duration = Number.isFinite(started) && Number.isFinite(finished) ? formatDuration((finished - started) / 1000) : run.status === "running" ? "running" : "—";
  append(tr, statusCell, flowCell, messageCell, replyCell, sessionCell,
    h("td", "pf-num pf-mono", String(run.event_count ?? 0)),
    h("td", "pf-num pf-mono", String(run.branch_count ?? 0)),
    h("td", "pf-mono", formatClock(run.started_at)),
    h("td", "pf-num pf-mono", duration));
  return tr;
}

const root = typeof document === "undefined" ? null : document.getElementById("pf-runs");
if (root) mountRunsPage(root);
