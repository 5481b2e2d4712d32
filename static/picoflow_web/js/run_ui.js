// @ts-check
/**
 * The run page (DOM): header, conflict cards, the seq scrubber, the barrier tree with its
 * lanes, and the inspector. It follows a live run over the run websocket (HTTP polling
 * when websockets fail) and replays a finished one from its stored events: one code path,
 * since the socket first sends every stored event after `?after=`.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-status[data-state=open|connecting|closed]  connection badge (data-mode=ws|polling|done)
 *   #pf-run[data-run-id][data-status]               the page root; data-status is the run's
 *   #pf-last-seq                                    text: last applied seq (-1 before any)
 *   #pf-event-count                                 text: events applied
 *   #pf-run-status, #pf-reply-text                  status badge, reply text
 *   #pf-stop, #pf-ended                             Stop button, why-it-ended panel (stop_ui.js)
 *   .pf-branch[data-path][data-status]              one per materialised branch row
 *   .pf-barrier[data-barrier]                       one per materialised barrier row
 *   .pf-more[data-barrier]                          "+N more" row of a capped sibling group
 *   .pf-lane[data-path]                             the lane of a branch row
 *   #pf-inspector[data-path]                        inspector (data-barrier for a barrier)
 *   .pf-visible-state, .pf-invisible, .pf-published, .pf-conflict (.pf-conflict-row)
 *   #pf-seq (range), #pf-seq-live                   scrubber; #pf-conflicts holds conflict cards
 * Deep links: /runs/<id>/#inv=<path>&seq=<n> (or #barrier=<id>) select and fold up to n;
 * without one, the turn itself ("" path) is selected.
 * Keys (tree focused): j/k or arrows move the selection; left/right collapse/expand;
 * "," and "." step the scrubber.
 */

import { eventsUrl, requestJson, runApiUrl, runSocketUrl, sessionPageUrl } from "./api.js";
import { h, on, readJsonScript, setAttr, setText } from "./dom.js";
import { barrierPublicationOf, publicationOf } from "./fold.js";
import { describeEvent, formatDuration, formatHash, interruptionText, parseHash, runStatusKind } from "./format.js";
import { conflictCard, renderInspector } from "./inspector_ui.js";
import { ROW_HEIGHT, revealPath, scrollToRow, ticks, timeBounds, treeRows } from "./layout.js";
import { createRowsView } from "./rows_ui.js";
import { createFeed } from "./socket.js";
import { createStopControl } from "./stop_ui.js";
import { ENDING_EVENTS, isEnded, mergeSummary, runStatus } from "./stopping.js";
import { createRunStore } from "./store.js";

const PAGE = 5000;
const LIVE_TICK_MS = 250;
const INSPECTOR_LIVE_MS = 300;

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @param {HTMLElement} root */
export function mountRunPage(root) {
  const runId = /** @type {string} */ (root.dataset.runId);
  const summary = readJsonScript("pf-run-summary");
  const store = createRunStore({ summary });
  const els = {
    status: byId("pf-status"), runStatus: byId("pf-run-status"), conflictFlag: byId("pf-run-conflict-flag"),
    flow: byId("pf-run-flow"), lastSeq: byId("pf-last-seq"), eventCount: byId("pf-event-count"),
    branches: byId("pf-run-branches"), tokens: byId("pf-run-tokens"), duration: byId("pf-run-duration"),
    reply: byId("pf-reply"), replyText: byId("pf-reply-text"), conflicts: byId("pf-conflicts"),
    session: /** @type {HTMLAnchorElement} */ (byId("pf-run-session")), replayFlag: byId("pf-replay-flag"),
    seq: /** @type {HTMLInputElement} */ (byId("pf-seq")), seqLabel: byId("pf-seq-label"),
    seqLive: byId("pf-seq-live"), seqPrev: byId("pf-seq-prev"), seqNext: byId("pf-seq-next"),
    scrubber: byId("pf-scrubber"), viewport: byId("pf-viewport"), sizer: byId("pf-sizer"),
    axis: byId("pf-axis"), inspector: byId("pf-inspector"), find: /** @type {HTMLInputElement} */ (byId("pf-find")),
    statusFilter: /** @type {HTMLSelectElement} */ (byId("pf-status-filter")),
  };
  const rowsView = createRowsView(els.viewport, els.sizer);
  const stop = createStopControl({ runId, store });
  /** @type {Map<string, boolean>} */
  const openSections = new Map();

  // -- deep links -------------------------------------------------------------------------
  const applyHash = () => {
    const link = parseHash(location.hash);
    store.set({
      // No link: the turn itself (its canonical state) is selected.
      selected: link.barrier !== null ? null : link.inv ?? "",
      selectedBarrier: link.barrier,
      seq: link.seq,
    });
    pendingReveal = link.inv ?? (link.barrier !== null ? `barrier:${link.barrier}` : null);
  };
  /** @type {string | null} a selection from a link, revealed once its row exists */
  let pendingReveal = null;
  let writtenHash = location.hash;
  window.addEventListener("hashchange", () => {
    if (location.hash !== writtenHash) applyHash();
  });
  applyHash();

  // -- the feed ---------------------------------------------------------------------------
  const feed = createFeed({
    url: () => runSocketUrl(runId, store.get().run.lastSeq),
    onMessage(message) {
      if (message.type === "run") store.set({ summary: mergeSummary(store.get().summary, message.run) });
      else if (message.type === "events" && Array.isArray(message.events)) store.applyBatch(message.events);
    },
    onState(state, info) {
      store.set({ conn: { state, ...info } });
    },
    async poll() {
      const after = store.get().run.lastSeq;
      const data = await requestJson(eventsUrl(runId, after, PAGE));
      const events = Array.isArray(data.events) ? data.events : [];
      /** @type {any[]} */
      const messages = [{ type: "events", events }];
      const full = events.length >= PAGE;
      let done = false;
      if (!full) {
        const info = await requestJson(runApiUrl(runId));
        messages.unshift({ type: "run", run: info.run });
        const ended = events.some((e) => ENDING_EVENTS.includes(e.type)) || isEnded(store.get().run.status);
        // A queued run is not over: it waits for a worker.
        done = ended || isEnded(info.run.status);
      }
      return { messages, again: full, done };
    },
  });
  // Stored events come first over HTTP, in pages applied as they arrive (a big stored run
  // can hold single messages larger than a websocket frame may be); the socket then
  // resumes after the last of them and follows the run live.
  const catchUp = async () => {
    store.set({ conn: { state: "connecting", mode: "http", reason: "loading" } });
    for (;;) {
      const data = await requestJson(eventsUrl(runId, store.get().run.lastSeq, PAGE));
      const events = Array.isArray(data.events) ? data.events : [];
      if (events.length) store.applyBatch(events);
      if (events.length < PAGE) return;
    }
  };
  catchUp().catch(() => {}).finally(() => feed.start());

  // -- rows -------------------------------------------------------------------------------
  /** @type {import("./layout.js").Row[]} */
  let rows = [];
  /** @type {any} */
  let rowsFor = null;
  const computeRows = (/** @type {import("./fold.js").Run} */ view) => {
    const s = store.get();
    const key = [view, view.version, s.collapsed, s.shown, s.query, s.status];
    if (!rowsFor || key.some((k, i) => k !== rowsFor[i])) {
      rows = treeRows(view, { collapsed: s.collapsed, shown: s.shown, query: s.query, status: s.status });
      rowsFor = key;
    }
    return rows;
  };

  // -- interaction ------------------------------------------------------------------------
  /** @param {string} path */
  const selectPath = (path) => {
    store.set({ selected: path, selectedBarrier: null });
    pendingReveal = path;
  };
  /** @param {string} id */
  const selectBarrier = (id) => {
    store.set({ selected: null, selectedBarrier: id });
    pendingReveal = `barrier:${id}`;
  };
  /** @param {number | null} seq */
  const pin = (seq) => {
    const last = store.get().run.lastSeq;
    store.set({ seq: seq === null || seq >= last ? null : Math.max(0, seq) });
  };

  on(els.viewport, "click", ".pf-row", (event, row) => {
    const target = /** @type {HTMLElement} */ (event.target);
    const s = store.get();
    if (row.classList.contains("pf-more")) {
      const button = target.closest("[data-more]");
      if (!button) return;
      const id = /** @type {string} */ (row.dataset.barrier);
      const shown = new Map(s.shown);
      const current = rows.filter((r) => r.kind === "branch" && r.inv.barrier === id).length;
      shown.set(id, /** @type {HTMLElement} */ (button).dataset.more === "all" ? Infinity : current + 500);
      store.set({ shown });
      return;
    }
    if (row.classList.contains("pf-barrier")) {
      const id = /** @type {string} */ (row.dataset.barrier);
      if (target.closest(".pf-twisty")) {
        const collapsed = new Set(s.collapsed);
        if (collapsed.has(id)) collapsed.delete(id);
        else collapsed.add(id);
        store.set({ collapsed });
      } else selectBarrier(id);
      return;
    }
    if (row.classList.contains("pf-branch")) selectPath(/** @type {string} */ (row.dataset.path));
    else if (row.classList.contains("pf-root")) selectPath("");
    els.viewport.focus({ preventScroll: true });
  });
  els.viewport.addEventListener("scroll", () => store.touch(), { passive: true });
  window.addEventListener("resize", () => store.touch());

  on(els.inspector, "click", "[data-select-path],[data-select-barrier],[data-pin-seq]", (_event, el) => {
    if (el.dataset.selectPath !== undefined) selectPath(el.dataset.selectPath);
    else if (el.dataset.selectBarrier !== undefined) selectBarrier(el.dataset.selectBarrier);
    else if (el.dataset.pinSeq !== undefined) pin(Number(el.dataset.pinSeq));
  });
  on(els.conflicts, "click", "[data-select-path],[data-select-barrier]", (_event, el) => {
    if (el.dataset.selectPath !== undefined) selectPath(el.dataset.selectPath);
    else if (el.dataset.selectBarrier !== undefined) selectBarrier(el.dataset.selectBarrier);
  });

  els.seq.addEventListener("input", () => pin(Number(els.seq.value)));
  els.replyText.addEventListener("click", () => els.reply.classList.toggle("pf-reply-open"));
  els.seqLive.addEventListener("click", () => pin(null));
  const step = (/** @type {number} */ delta) => {
    const s = store.get();
    const current = s.seq ?? s.run.lastSeq;
    pin(Math.min(s.run.lastSeq, Math.max(0, current + delta)));
  };
  els.seqPrev.addEventListener("click", () => step(-1));
  els.seqNext.addEventListener("click", () => step(1));

  let findTimer = 0;
  els.find.addEventListener("input", () => {
    window.clearTimeout(findTimer);
    findTimer = window.setTimeout(() => store.set({ query: els.find.value }), 120);
  });
  els.statusFilter.addEventListener("change", () => store.set({ status: els.statusFilter.value }));
  byId("pf-expand-all").addEventListener("click", () => {
    const shown = new Map();
    for (const id of store.get().run.barriers.keys()) shown.set(id, Infinity);
    store.set({ collapsed: new Set(), shown });
  });
  byId("pf-collapse-all").addEventListener("click", () => {
    store.set({ collapsed: new Set(store.get().run.barriers.keys()), shown: new Map() });
  });

  document.addEventListener("keydown", (event) => {
    const target = /** @type {HTMLElement} */ (event.target);
    if (target.closest("input, textarea, select") || event.metaKey || event.ctrlKey || event.altKey) return;
    if (event.key === ",") { step(-1); event.preventDefault(); return; }
    if (event.key === ".") { step(1); event.preventDefault(); return; }
    if (!els.viewport.contains(target) && target !== document.body) return;
    const s = store.get();
    const index = rows.findIndex((r) => (r.kind === "barrier" ? s.selectedBarrier === r.id : s.selectedBarrier === null && (r.kind === "branch" || r.kind === "root") && r.path === s.selected));
    const move = (/** @type {number} */ delta) => {
      let i = index;
      do i += delta; while (i >= 0 && i < rows.length && rows[i].kind === "more");
      const row = rows[i];
      if (!row) return;
      if (row.kind === "barrier") selectBarrier(row.id);
      else if (row.kind === "branch" || row.kind === "root") selectPath(row.path);
    };
    if (event.key === "j" || event.key === "ArrowDown") { move(1); event.preventDefault(); }
    else if (event.key === "k" || event.key === "ArrowUp") { move(-1); event.preventDefault(); }
    else if ((event.key === "ArrowLeft" || event.key === "ArrowRight") && index >= 0 && rows[index].kind === "barrier") {
      const row = /** @type {any} */ (rows[index]);
      const collapsed = new Set(s.collapsed);
      if (event.key === "ArrowLeft") collapsed.add(row.id);
      else collapsed.delete(row.id);
      store.set({ collapsed });
      event.preventDefault();
    }
  });

  // -- render -----------------------------------------------------------------------------
  let inspectorKey = "";
  let inspectorAt = 0;
  let inspectorTimer = 0;
  let conflictsKey = "";
  let axisKey = "";
  let ticker = 0;

  const render = () => {
    const s = store.get();
    const live = s.run;
    const view = store.view();
    const pinned = view !== live;
    // Reads first (one layout per frame), then writes.
    const scrollTop = els.viewport.scrollTop;
    const viewportHeight = els.viewport.clientHeight;
    const axisWidth = els.axis.clientWidth;
    const inspectorScroll = els.inspector.scrollTop;

    const status = runStatus(live, s.summary);
    const running = status === "running";
    setAttr(root, "data-status", status);
    setText(els.runStatus, status);
    els.runStatus.className = `pf-badge pf-badge-${runStatusKind(status)}`;
    els.conflictFlag.hidden = !(live.conflicts.length || s.summary?.has_conflicts);
    setAttr(els.status, "data-state", s.conn.state);
    setAttr(els.status, "data-mode", s.conn.mode);
    setText(els.status, connText(s.conn));
    if (live.flow) setText(els.flow, live.flow);
    setText(els.lastSeq, live.lastSeq);
    setText(els.eventCount, live.events.length);
    const b = countBranches(live);
    const runningLabel = live.status === "interrupted" ? "interrupted" : "running";
    const dropped = b.discarded ? ` · ${b.discarded} discarded` : "";
    setText(els.branches, live.branchCount ? `${live.branchCount} (${b.fulfilled} ✓ · ${b.rejected} ✗${b.running ? ` · ${b.running} ${runningLabel}` : ""}${dropped})` : "0");
    setText(els.tokens, String(live.tokens.total_tokens ?? 0));
    const now = running && !pinned ? store.nowOffset() : null;
    setText(els.duration, formatDuration(running ? store.nowOffset() : live.endOffset));
    // No reply: a failed turn shows its error, an interrupted run why it was declared so.
    const reply = live.reply?.message ?? s.summary?.reply?.message ?? (live.error ? live.error.message
      : status === "interrupted" ? interruptionText(live.interruption ?? s.summary?.interruption) : null);
    els.reply.hidden = reply === null || reply === undefined;
    if (reply !== null && reply !== undefined) setText(els.replyText, reply);
    els.reply.classList.toggle("pf-reply-failed", status === "failed");
    els.reply.classList.toggle("pf-reply-interrupted", status === "interrupted");
    els.reply.classList.toggle("pf-reply-cancelled", status === "cancelled");
    stop.render();
    const sessionId = live.sessionId || s.summary?.session_id || "";
    if (sessionId) {
      els.session.hidden = false;
      setAttr(els.session, "href", sessionPageUrl(sessionId));
      setAttr(els.session, "title", sessionId);
      setText(els.session, sessionId.length > 14 ? `${sessionId.slice(0, 13)}…` : sessionId);
    }

    // Scrubber.
    const max = Math.max(0, live.lastSeq);
    if (els.seq.max !== String(max)) els.seq.max = String(max);
    const at = pinned ? view.lastSeq : live.lastSeq;
    if (document.activeElement !== els.seq || els.seq.value !== String(Math.max(0, at))) els.seq.value = String(Math.max(0, at));
    const atEvent = live.events.length ? live.events[Math.max(0, at) - live.events[0].seq] : null;
    setText(els.seqLabel, live.lastSeq < 0 ? "no events yet" : `#${at} of ${live.lastSeq}${atEvent ? ` · ${atEvent.type}${atEvent.path ? ` @${atEvent.path}` : ""} · ${describeEvent(atEvent)}` : ""}`);
    els.scrubber.classList.toggle("pf-pinned", pinned);
    els.seqLive.toggleAttribute("disabled", !pinned);
    root.classList.toggle("pf-replaying", pinned);
    els.replayFlag.hidden = !pinned;
    if (pinned) setText(els.replayFlag, `replay at #${view.lastSeq}`);

    // Conflict cards.
    const cKey = `${view.conflicts.join("|")}#${pinned ? view.lastSeq : "live"}`;
    if (cKey !== conflictsKey) {
      conflictsKey = cKey;
      const cards = [...new Set(view.conflicts)].map((id) => conflictCard(view, /** @type {any} */ (view.barriers.get(id))));
      els.conflicts.replaceChildren(...cards);
    }

    // Reveal a linked selection once it exists.
    if (pendingReveal !== null) {
      const target = pendingReveal.startsWith("barrier:") ? null : pendingReveal;
      const barrierId = pendingReveal.startsWith("barrier:") ? pendingReveal.slice(8) : null;
      const exists = target !== null ? view.invocations.has(target) : view.barriers.has(/** @type {string} */ (barrierId));
      if (exists) {
        const path = target !== null ? target : /** @type {any} */ (view.barriers.get(/** @type {string} */ (barrierId))).caller;
        const opened = revealPath(view, { collapsed: s.collapsed, shown: s.shown }, path);
        if (barrierId !== null) opened.collapsed.delete(barrierId);
        pendingReveal = null;
        store.set(opened);
        const next = treeRows(view, { ...opened, query: s.query, status: s.status });
        const index = next.findIndex((r) => (barrierId !== null ? r.kind === "barrier" && r.id === barrierId : (r.kind === "branch" || r.kind === "root") && r.path === target));
        if (index >= 0) {
          const top = scrollToRow(index, scrollTop, viewportHeight, ROW_HEIGHT);
          if (top !== scrollTop) els.viewport.scrollTop = top;
        }
        return; // the set() above schedules the next frame
      }
    }

    // Rows and lanes.
    const shownRows = computeRows(view);
    const bounds = timeBounds(live, running ? store.nowOffset() : null);
    rowsView.render(shownRows, { scrollTop, viewport: viewportHeight, run: view, bounds, now, selected: s.selected, selectedBarrier: s.selectedBarrier });
    const aKey = `${bounds.end.toFixed(3)}|${axisWidth}`;
    if (aKey !== axisKey) {
      axisKey = aKey;
      const count = Math.max(2, Math.floor(axisWidth / 90));
      els.axis.replaceChildren(...ticks(bounds, count).map((t) => {
        const tick = h("span", "pf-tick", t.label);
        tick.style.left = `${(t.x * 100).toFixed(3)}%`;
        return tick;
      }));
    }

    // Inspector: rebuilt when what it shows changed; at most every INSPECTOR_LIVE_MS live.
    const key = inspectorSignature(view, s);
    const selectionKey = `${s.selected}|${s.selectedBarrier}|${pinned ? view.lastSeq : "live"}`;
    if (key !== inspectorKey) {
      const sameSelection = inspectorKey.startsWith(`${selectionKey}#`);
      const wait = INSPECTOR_LIVE_MS - (performance.now() - inspectorAt);
      if (sameSelection && wait > 0) {
        if (!inspectorTimer) inspectorTimer = window.setTimeout(() => { inspectorTimer = 0; store.touch(); }, wait);
      } else {
        inspectorKey = key;
        inspectorAt = performance.now();
        if (s.selected !== null || s.selectedBarrier !== null) {
          renderInspector(els.inspector, { view, path: s.selected, barrier: s.selectedBarrier, open: openSections, pinned },
            inspectorScroll);
        }
      }
    }

    // Deep link in the address bar.
    const hash = formatHash({ inv: s.selected === "" ? null : s.selected, barrier: s.selectedBarrier, seq: s.seq });
    if (hash !== writtenHash && (hash || location.hash)) {
      writtenHash = hash;
      history.replaceState(null, "", hash || location.pathname + location.search);
    }

    // Running branches grow to "now": redraw a few times a second while live.
    if (running && !pinned && !ticker) {
      ticker = window.setInterval(() => store.touch(), LIVE_TICK_MS);
    } else if ((!running || pinned) && ticker) {
      window.clearInterval(ticker);
      ticker = 0;
    }
  };
  store.subscribe(render);
  store.touch();
  return { store, feed };
}

/**
 * What the inspector shows depends on: the selection, the pinned seq, and the events of
 * the selected invocation, its barrier and its siblings.
 * @param {import("./fold.js").Run} view @param {import("./store.js").RunState} s
 */
function inspectorSignature(view, s) {
  const head = `${s.selected}|${s.selectedBarrier}|${view !== s.run ? view.lastSeq : "live"}#`;
  if (s.selectedBarrier !== null) {
    const b = view.barriers.get(s.selectedBarrier);
    if (!b) return `${head}none`;
    const c = b.counts;
    const pub = barrierPublicationOf(view, b.id);
    return `${head}${b.outcome}|${pub ? `${pub.state}|${pub.reason}` : ""}|${c.running},${c.fulfilled},${c.rejected}|${b.reductions.length}|${b.checkpointRevision}|${b.cancel ? b.cancel.closed.length : -1}|${b.interrupted}|${view.status}`;
  }
  if (s.selected === null) return `${head}none`;
  if (s.selected === "") return `${head}${view.version}`;
  const inv = view.invocations.get(s.selected);
  if (!inv) return `${head}none`;
  const b = inv.barrier !== null ? view.barriers.get(inv.barrier) : undefined;
  let siblings = 0;
  if (b) for (const p of b.branches) siblings += view.invocations.get(p)?.drafts.length ?? 0;
  let caller = 0;
  if (b && b.base !== "canonical") caller = view.invocations.get(b.base)?.changes.length ?? 0;
  const pub = publicationOf(view, inv.path);
  return `${head}${inv.seqs.length}|${inv.changes.length}|${pub ? `${pub.state}|${pub.reason}` : ""}|${b?.outcome}|${b?.joinedSeq}|${siblings}|${caller}|${inv.interrupted}`;
}

/** @param {import("./fold.js").Run} run */
function countBranches(run) {
  const totals = { queued: 0, running: 0, fulfilled: 0, rejected: 0, discarded: 0 };
  for (const b of run.barriers.values()) {
    totals.discarded += barrierPublicationOf(run, b.id)?.counts.discarded ?? 0;
    totals.queued += b.counts.queued;
    totals.running += b.counts.running;
    totals.fulfilled += b.counts.fulfilled;
    totals.rejected += b.counts.rejected;
  }
  return totals;
}

/** @param {{state: string, mode: string, retryIn?: number, reason?: string}} conn */
function connText(conn) {
  if (conn.state === "open") return conn.mode === "polling" ? "live (polling)" : conn.mode === "done" ? "complete" : "live";
  if (conn.state === "connecting") {
    if (conn.reason === "loading") return "loading events";
    return conn.retryIn ? `reconnecting in ${Math.ceil(conn.retryIn / 1000)}s` : "connecting";
  }
  return conn.reason ? `offline: ${conn.reason}` : "offline";
}

const root = typeof document === "undefined" ? null : document.getElementById("pf-run");
if (root) mountRunPage(root);
