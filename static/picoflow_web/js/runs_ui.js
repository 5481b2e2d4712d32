// @ts-check
/**
 * The runs list (DOM): runs newest first, filtered by flow, status, session and "has
 * conflicts", searched (`q`), bounded in start time and sorted by any column (filters
 * and order live in the query string, so a filtered list can be linked; rules in
 * `runs_filter.js`),
 * kept live by the `/ws/runs/` websocket (a summary whenever a run starts or finishes;
 * HTTP polling of `/api/runs` when websockets fail), and the form that starts a run and
 * goes to its page.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-status[data-state=open|connecting|closed]   connection badge
 *   .pf-run-row[data-run-id][data-status]          one per listed run
 *   #pf-runs-body                                  the table body of the list
 *   #pf-filters select[name=flow|status], input[name=session|conflicts|rejected|q|since|until]
 *   .pf-run-problem[href] on a row: links to the run page's conflict cards
 *   .pf-run-pick (a checkbox per row), #pf-compare-runs (enabled with two ticked): compare
 *   #pf-runs-head button.pf-sort[data-sort] (its th has aria-sort)  column sorting
 *   #pf-start-form with select[name=flow], textarea[name=message], select[name=session],
 *     button[type=submit]; errors show in #pf-start-form .pf-form-error;
 *     #pf-start-form[data-ready=1] once the flows' details have loaded
 *   #pf-examples button.pf-example[data-message]   the chosen flow's example messages
 *   #pf-config-fields .pf-config-field[data-field] with [name="config.<field>"] and
 *     .pf-field-error                              the chosen flow's config fields
 */

import { ApiError, comparePageUrl, requestJson, runPageUrl, sessionPageUrl, wsUrl } from "./api.js";
import { fieldsFromSchema, initialValue, readConfig } from "./config_form.js";
import { append, badge, h, on, setAttr, setText } from "./dom.js";
import { formatClock, formatDuration, interruptionText, preview, runStatusKind } from "./format.js";
import { compareOrder } from "./compare.js";
import { createFeed } from "./socket.js";
import { mergeSummary, summaryNote } from "./stopping.js";
import { createStore } from "./store.js";
import { durationOf, filtersFrom, matches, queryOf, sortRuns } from "./runs_filter.js";

const POLL_MS = 4000;

/** @typedef {import("./runs_filter.js").Filters} Filters */

/** Which way a column sorts first: numbers and times biggest first, text A to Z. */
const DESCENDING_FIRST = new Set(["started_at", "events", "branches", "duration"]);

/** @param {HTMLElement} root */
export function mountRunsPage(root) {
  const body = /** @type {HTMLElement} */ (document.getElementById("pf-runs-body"));
  const empty = /** @type {HTMLElement} */ (document.getElementById("pf-runs-empty"));
  const status = /** @type {HTMLElement} */ (document.getElementById("pf-status"));
  const filtersForm = /** @type {HTMLFormElement} */ (document.getElementById("pf-filters"));
  const startForm = /** @type {HTMLFormElement} */ (document.getElementById("pf-start-form"));

  const filters = filtersFrom(new URLSearchParams(location.search));
  const field = (/** @type {string} */ name) => /** @type {any} */ (filtersForm.elements.namedItem(name));
  // datetime-local inputs hold local time without a zone; the query holds ISO instants.
  const toLocal = (/** @type {string} */ iso) => {
    const t = Date.parse(iso);
    if (!Number.isFinite(t)) return "";
    const d = new Date(t - new Date(t).getTimezoneOffset() * 60000);
    return d.toISOString().slice(0, 16);
  };
  const toIso = (/** @type {string} */ local) => (local ? new Date(local).toISOString() : "");
  field("flow").value = filters.flow;
  field("status").value = filters.status;
  field("session").value = filters.session;
  field("conflicts").checked = filters.conflicts;
  field("rejected").checked = filters.rejected;
  field("q").value = filters.q;
  field("since").value = toLocal(filters.since);
  field("until").value = toLocal(filters.until);
  const sortButtons = /** @type {HTMLButtonElement[]} */ (Array.from(document.querySelectorAll("#pf-runs-head button.pf-sort")));

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
    const data = await requestJson(`/api/runs${queryOf(f) ? `?${queryOf(f)}` : ""}`);
    if (ticket !== loading) return;
    const runs = new Map();
    const known = store.get().runs;
    for (const run of data.runs || []) runs.set(run.id, mergeSummary(known.get(run.id), run));
    store.set({ runs, loaded: true, version: store.get().version + 1 });
  };

  const showSort = (/** @type {string} */ sort) => {
    for (const button of sortButtons) {
      const column = button.dataset.sort || "";
      const th = button.closest("th");
      const state = sort === column ? "ascending" : sort === `-${column}` ? "descending" : "none";
      th?.setAttribute("aria-sort", state);
    }
  };
  const applyFilters = (/** @type {Filters} */ next) => {
    store.set({ filters: next, version: store.get().version + 1 });
    showSort(next.sort);
    const q = queryOf(next);
    history.replaceState(null, "", q ? `?${q}` : location.pathname);
    load().catch(() => {});
  };
  const readFilters = () => applyFilters({
    ...store.get().filters,
    flow: field("flow").value, status: field("status").value,
    session: field("session").value.trim(), conflicts: field("conflicts").checked,
    rejected: field("rejected").checked,
    q: field("q").value.trim(), since: toIso(field("since").value), until: toIso(field("until").value),
  });
  filtersForm.addEventListener("change", readFilters);
  filtersForm.addEventListener("submit", (event) => { event.preventDefault(); readFilters(); });
  let typingTimer = 0;
  for (const name of ["session", "q"]) {
    field(name).addEventListener("input", () => {
      window.clearTimeout(typingTimer);
      typingTimer = window.setTimeout(readFilters, 250);
    });
  }
  for (const button of sortButtons) {
    button.addEventListener("click", () => {
      const column = button.dataset.sort || "started_at";
      const current = store.get().filters.sort;
      const first = DESCENDING_FIRST.has(column) ? `-${column}` : column;
      const second = first.startsWith("-") ? column : `-${column}`;
      applyFilters({ ...store.get().filters, sort: current === first ? second : first });
    });
  }
  showSort(filters.sort);

  // Live: summaries over the socket; after a reconnect the list is reloaded (it may have
  // missed some), and while polling the list is simply reloaded.
  let everOpen = false;
  const feed = createFeed({
    url: () => wsUrl("/ws/runs/"),
    onMessage(message) {
      if (message.type !== "run" || !message.run) return;
      const s = store.get();
      const runs = new Map(s.runs);
      // A summary that arrives late must not bring an ended run back to running.
      const summary = mergeSummary(runs.get(message.run.id), message.run);
      if (matches(summary, s.filters)) {
        if (!runs.has(summary.id)) {
          const fresh = new Map([[summary.id, summary]]);
          for (const [id, run] of runs) fresh.set(id, run);
          store.set({ runs: fresh, version: s.version + 1 });
          return;
        }
        runs.set(summary.id, summary);
      } else runs.delete(summary.id);
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

  // Start a run: the chosen flow's example messages and config fields come from
  // /api/flows (its config JSON Schema); the config is checked here, then by the server.
  const flowSelect = /** @type {HTMLSelectElement} */ (startForm.elements.namedItem("flow"));
  const sessionSelect = /** @type {HTMLSelectElement} */ (startForm.elements.namedItem("session"));
  const messageInput = /** @type {HTMLTextAreaElement} */ (startForm.elements.namedItem("message"));
  const errorBox = /** @type {HTMLElement} */ (startForm.querySelector(".pf-form-error"));
  const submit = /** @type {HTMLButtonElement} */ (startForm.querySelector("button[type=submit]"));
  const examplesBox = /** @type {HTMLElement} */ (document.getElementById("pf-examples"));
  const configBox = /** @type {HTMLElement} */ (document.getElementById("pf-config"));
  const configFields = /** @type {HTMLElement} */ (document.getElementById("pf-config-fields"));
  const needsMark = /** @type {HTMLElement} */ (startForm.querySelector(".pf-needs-message"));
  /** @type {Map<string, any>} */
  const flowInfo = new Map();
  /** @type {{fields: import("./config_form.js").FieldSpec[], inputs: Map<string, HTMLInputElement | HTMLSelectElement>, errors: Map<string, HTMLElement>}} */
  let form = { fields: [], inputs: new Map(), errors: new Map() };
  const showError = (/** @type {string} */ text) => {
    errorBox.hidden = !text;
    setText(errorBox, text);
  };
  const markFields = (/** @type {Record<string, string>} */ errors) => {
    for (const [name, box] of form.errors) {
      const text = errors[name] || "";
      box.hidden = !text;
      setText(box, text);
      form.inputs.get(name)?.setAttribute("aria-invalid", text ? "true" : "false");
    }
  };
  const syncForm = () => {
    // Sessions belong to one flow: offer only the chosen flow's.
    for (const option of Array.from(sessionSelect.options)) {
      if (!option.value) continue;
      option.hidden = option.dataset.flow !== flowSelect.value;
    }
    const chosen = sessionSelect.selectedOptions[0];
    if (chosen && chosen.hidden) sessionSelect.value = "";
    const info = flowInfo.get(flowSelect.value);
    needsMark.hidden = !(info && info.needs_message);
    messageInput.required = Boolean(info && info.needs_message);
    // A config is taken by a session's first turn only: no fields for an existing one.
    configBox.hidden = form.fields.length === 0 || Boolean(sessionSelect.value);
  };
  const buildFlowForm = () => {
    const info = flowInfo.get(flowSelect.value);
    examplesBox.replaceChildren(h("span", "pf-label", "Try"));
    for (const example of (info && info.example_messages) || []) {
      const button = h("button", "pf-example", preview(String(example), 40, true));
      button.setAttribute("type", "button");
      button.title = String(example);
      button.dataset.message = String(example);
      button.addEventListener("click", () => {
        messageInput.value = String(example);
        messageInput.focus();
      });
      examplesBox.appendChild(button);
    }
    examplesBox.hidden = !(info && info.example_messages && info.example_messages.length);
    form = { fields: fieldsFromSchema(info ? info.config_schema : null), inputs: new Map(), errors: new Map() };
    configFields.replaceChildren(...form.fields.map((field) => configField(field, form)));
    showError("");
    syncForm();
  };
  flowSelect.addEventListener("change", buildFlowForm);
  sessionSelect.addEventListener("change", syncForm);
  syncForm();
  requestJson("/api/flows").then((data) => {
    for (const info of data.flows || []) flowInfo.set(info.id, info);
    buildFlowForm();
    startForm.dataset.ready = "1";
  }).catch(() => {});
  startForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    showError("");
    const info = flowInfo.get(flowSelect.value);
    const message = messageInput.value;
    messageInput.setAttribute("aria-invalid", "false");
    /** @type {Record<string, any>} */
    const body = { flow: flowSelect.value, message, session_id: sessionSelect.value || undefined };
    // Offered only to users who may run in several projects; a session keeps its own.
    const projectSelect = startForm.querySelector('select[name="project"]');
    if (projectSelect instanceof HTMLSelectElement && !sessionSelect.value) body.project = projectSelect.value;
    if (info && info.needs_message && !message.trim()) {
      messageInput.setAttribute("aria-invalid", "true");
      showError(`${flowSelect.value} needs a message.`);
      return;
    }
    if (!sessionSelect.value && form.fields.length) {
      /** @type {Record<string, string | boolean>} */
      const raws = {};
      for (const [name, input] of form.inputs) {
        raws[name] = input instanceof HTMLInputElement && input.type === "checkbox" ? input.checked : input.value;
      }
      const { config, errors } = readConfig(form.fields, raws);
      markFields(errors);
      if (Object.keys(errors).length) {
        showError("Some config fields need fixing.");
        return;
      }
      body.config = config;
    }
    submit.disabled = true;
    setText(submit, "Starting…");
    try {
      const data = await requestJson("/api/runs", { method: "POST", body });
      location.assign(runPageUrl(data.run.id));
    } catch (error) {
      if (error instanceof ApiError && error.body && error.body.fields) markFields(error.body.fields);
      showError(error instanceof Error ? error.message : String(error));
      submit.disabled = false;
      setText(submit, "Start");
    }
  });
  startForm.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) startForm.requestSubmit();
  });

  // Compare: two ticked runs, the one started first as a.
  /** @type {Set<string>} */
  const picked = new Set();
  const compareButton = /** @type {HTMLButtonElement} */ (document.getElementById("pf-compare-runs"));
  const compareHint = /** @type {HTMLElement} */ (document.getElementById("pf-compare-hint"));
  const syncCompare = () => {
    const runs = [...picked].map((id) => store.get().runs.get(id)).filter(Boolean);
    const flows = new Set(runs.map((r) => r.flow));
    compareButton.disabled = picked.size !== 2;
    setText(compareHint, picked.size === 0 ? "Tick two runs to compare them side by side."
      : picked.size === 1 ? "Tick one more run to compare it with."
        : picked.size > 2 ? "Tick only two runs."
          : flows.size > 1 ? "Two runs of different flows: branches are matched by path and key all the same." : "");
  };
  on(body, "change", ".pf-run-pick", (event, box) => {
    const id = box.closest("tr")?.dataset.runId;
    if (!id) return;
    if (/** @type {HTMLInputElement} */ (box).checked) picked.add(id);
    else picked.delete(id);
    syncCompare();
  });
  compareButton.addEventListener("click", () => {
    if (picked.size !== 2) return;
    const known = store.get().runs;
    const [a, b] = compareOrder([...picked].map((id) => ({ id, started_at: known.get(id)?.started_at })));
    location.assign(comparePageUrl(a, b));
  });
  syncCompare();

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
    const ordered = sortRuns([...s.runs.values()], s.filters.sort);
    const seen = new Set();
    let previous = null;
    for (const run of ordered) {
      seen.add(run.id);
      const sig = JSON.stringify(run);
      let item = rowEls.get(run.id);
      if (!item || item.sig !== sig) {
        const el = runRow(run, picked.has(run.id));
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

/**
 * One config field of the start form: a labelled input for its kind, its hint and a
 * place for its validation message. Hooks: .pf-config-field[data-field], inputs named
 * `config.<field>`, .pf-field-error.
 * @param {import("./config_form.js").FieldSpec} field
 * @param {{inputs: Map<string, HTMLInputElement | HTMLSelectElement>, errors: Map<string, HTMLElement>}} form
 */
function configField(field, form) {
  const wrap = h("label", field.kind === "boolean" ? "pf-field pf-config-field pf-config-field-check" : "pf-field pf-config-field");
  wrap.dataset.field = field.name;
  const label = h("span", "pf-label", field.label + (field.required && !field.hasDefault ? " *" : ""));
  /** @type {HTMLInputElement | HTMLSelectElement} */
  let input;
  const initial = initialValue(field);
  if (field.kind === "enum") {
    const select = /** @type {HTMLSelectElement} */ (h("select", "pf-input"));
    if (field.nullable || !field.hasDefault) select.appendChild(h("option", "", field.nullable ? "—" : "Choose…"));
    for (const option of field.options) {
      const el = /** @type {HTMLOptionElement} */ (h("option", "", String(option)));
      el.value = JSON.stringify(option);
      select.appendChild(el);
    }
    select.value = String(initial);
    input = select;
  } else {
    const el = /** @type {HTMLInputElement} */ (h("input", "pf-input"));
    if (field.kind === "boolean") {
      el.type = "checkbox";
      el.checked = initial === true;
    } else {
      el.type = field.kind === "integer" || field.kind === "number" ? "number" : field.format === "date" ? "date" : "text";
      if (el.type === "number") {
        el.step = field.kind === "integer" ? "1" : "any";
        if (field.minimum !== undefined) el.min = String(field.minimum);
        if (field.maximum !== undefined) el.max = String(field.maximum);
      }
      if (field.maxLength !== undefined) el.maxLength = field.maxLength;
      el.value = String(initial);
      el.placeholder = field.hasDefault && field.default !== null ? `default: ${initial}` : field.nullable ? "default" : "";
    }
    input = el;
  }
  input.name = `config.${field.name}`;
  const error = h("span", "pf-field-error");
  error.hidden = true;
  error.setAttribute("role", "alert");
  form.inputs.set(field.name, input);
  form.errors.set(field.name, error);
  if (field.kind === "boolean") append(wrap, input, label);
  else append(wrap, label, input);
  if (field.description) wrap.appendChild(h("span", "pf-hint", field.description));
  wrap.appendChild(error);
  if (field.description) wrap.title = field.description;
  return wrap;
}

/** @param {any} run @param {boolean} pickedRow  ticked to compare */
function runRow(run, pickedRow) {
  const tr = h("tr", `pf-run-row pf-status-${run.status}`);
  tr.dataset.runId = run.id;
  tr.dataset.status = run.status;
  const link = (/** @type {string} */ text, /** @type {string} */ cls = "") => {
    const a = h("a", `pf-link ${cls}`.trim(), text);
    a.setAttribute("href", runPageUrl(run.id));
    return a;
  };
  const statusCell = h("td");
  append(statusCell, badge(run.status, runStatusKind(run.status)));
  // Straight to what is worth debugging: the run page's conflict cards and rejections.
  const problem = (/** @type {string} */ text, /** @type {string} */ kind, /** @type {string} */ title) => {
    const a = h("a", "pf-run-problem", "");
    a.setAttribute("href", `${runPageUrl(run.id)}#pf-conflicts`);
    a.title = title;
    a.appendChild(badge(text, kind));
    return a;
  };
  // The list knows only that a join was invalidated, not how (a conflict, a reducer that
  // failed, a refused write): the run page's flag and card name the kind.
  if (run.has_conflicts) statusCell.appendChild(problem("join invalidated", "conflict", "A join was invalidated (a conflict, a failed reducer or a refused write): see its card"));
  if (run.rejected_count > 0) {
    statusCell.appendChild(problem(`${run.rejected_count} rejected`, "rejected",
      `${run.rejected_count} branch${run.rejected_count === 1 ? " was" : "es were"} rejected (failed, timed out or cancelled)`));
  }
  const flowCell = h("td");
  flowCell.appendChild(link(run.flow, "pf-strong"));
  // Where it ran: runs shipped from another process name it (host and pid).
  if (run.origin && run.origin.kind === "remote") {
    const origin = h("span", "pf-origin pf-muted", `remote · ${run.origin.label ?? "unknown"}`);
    origin.title = run.origin.source === "OpenTelemetry"
      ? "Sent by another process as OpenTelemetry spans (POST /v1/traces): its tree and timings are inferred from them"
      : "Shipped from another process to /api/ingest";
    flowCell.append(h("br"), origin);
  } else if (run.origin && run.origin.kind === "worker") {
    const origin = h("span", "pf-origin pf-muted", run.origin.label ?? `worker ${run.origin.worker ?? ""}`.trim());
    origin.title = "Executed by a worker process of this dashboard";
    flowCell.append(h("br"), origin);
  } else if (run.origin && run.origin.kind === "import") {
    const origin = h("span", "pf-origin pf-muted", run.origin.label ?? "imported");
    origin.title = "Read from an exported file (POST /api/import, manage.py import_events)";
    flowCell.append(h("br"), origin);
  }
  const messageCell = h("td", "pf-clip");
  messageCell.appendChild(link(run.message ? preview(run.message, 90, true) : "—"));
  // A run without a reply says where it stands: waiting, stopping, stopped (by whom) or
  // interrupted (the summary's interruption, if the server sends one).
  const note = summaryNote(run);
  const replyText = run.reply && typeof run.reply.message === "string" ? preview(run.reply.message, 110, true)
    : note ? preview(note, 110, true)
      : run.status === "running" ? "…"
        : run.status === "interrupted" ? preview(interruptionText(run.interruption), 110, true) : "";
  const noteClass = run.status === "interrupted" ? " pf-interrupted-note" : run.status === "cancelled" || (run.cancel_requested && !run.reply && note) ? " pf-cancelled-note" : "";
  const replyCell = h("td", `pf-clip pf-muted${noteClass}`, replyText);
  const sessionCell = h("td");
  if (run.session_id) {
    const a = h("a", "pf-link pf-mono", run.session_id.length > 12 ? `${run.session_id.slice(0, 12)}…` : run.session_id);
    a.setAttribute("href", sessionPageUrl(run.session_id));
    a.title = run.session_id;
    sessionCell.appendChild(a);
  } else sessionCell.appendChild(h("span", "pf-muted", "new"));
  const seconds = durationOf(run);
  const duration = seconds !== null ? formatDuration(seconds) : run.status === "running" || run.status === "queued" ? run.status : "—";
  const pick = /** @type {HTMLInputElement} */ (h("input", "pf-run-pick"));
  pick.type = "checkbox";
  pick.checked = pickedRow;
  pick.setAttribute("aria-label", `Pick this ${run.flow} run to compare`);
  append(tr, append(h("td", "pf-pick-col"), pick), statusCell, flowCell, messageCell, replyCell, sessionCell,
    h("td", "pf-num pf-mono", String(run.event_count ?? 0)),
    h("td", "pf-num pf-mono", String(run.branch_count ?? 0)),
    h("td", "pf-mono", formatClock(run.started_at)),
    h("td", "pf-num pf-mono", duration));
  return tr;
}

const root = typeof document === "undefined" ? null : document.getElementById("pf-runs");
if (root) mountRunsPage(root);
