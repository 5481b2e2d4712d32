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
 *   #pf-resume, #pf-run-reuse                       Resume button, a resumed run's reuse counts (resume_ui.js)
 *   .pf-branch[data-path][data-status]              one per materialised branch row
 *   .pf-barrier[data-barrier]                       one per materialised barrier row
 *   .pf-more[data-barrier]                          "+N more" row of a capped sibling group
 *   .pf-lane[data-path]                             the lane of a branch row
 *   #pf-inspector[data-path]                        inspector (data-barrier for a barrier)
 *   .pf-visible-state, .pf-invisible, .pf-published, .pf-conflict (.pf-conflict-row)
 *   #pf-seq (range), #pf-seq-live                   scrubber; #pf-conflicts holds conflict cards
 * Deep links: /runs/<id>/#inv=<path>&seq=<n> (or #barrier=<id>) select and fold up to n;
 * without one, the turn itself ("" path) is selected. `view=whatif` (or a bare `#whatif`)
 * opens the What if view (whatif_ui.js) instead of the lanes; the tabs
 * `.pf-view-tab[data-view=lanes|whatif]` and "w" switch, `#pf-run[data-view]` says which.
 * `#pf-compare-with` lists the flow's other runs to compare with (compare_ui.js).
 * Keys: "?" lists them all; j/k or arrows (tree focused) move the selection, left/right
 * collapse/expand; "," and "." step the scrubber, Home/End jump to the first/last event;
 * "/" focuses find.
 * The header (status, counts, tokens, duration, reply) follows the scrubber: pinned at
 * seq n it says what the run had done by event n.
 */

import { createCoordinatorPanel } from "./concurrent_ui.js";
import { eventsUrl, requestJson, requestJsonSoon, runApiUrl, runSocketUrl, sessionPageUrl, streamStoredEvents } from "./api.js";
import { readJsonScript, setAttr, setText } from "./dom.js";
import { describeEvent, formatDuration, formatHash, interruptionText, parseHash, runStatusKind } from "./format.js";
import { bindKeys } from "./keys_ui.js";
import { conflictOf, problemWord } from "./conflict.js";
import { branchLine, createRunView } from "./run_view_ui.js";
import { createPump } from "./pump.js";
import { createFeed } from "./socket.js";
import { createResumeControl } from "./resume_ui.js";
import { createStopControl } from "./stop_ui.js";
import { ENDING_EVENTS, isEnded, mergeSummary, originText, runStatus, staleSummary } from "./stopping.js";
import { createRunStore } from "./store.js";
import { mountComparePicker } from "./compare_ui.js";
import { hashWithView, viewOfHash } from "./whatif.js";
import { createWhatIfView } from "./whatif_ui.js";

/** Events a poll asks for at a time (no websocket). */
const PAGE = 5000;
const LIVE_TICK_MS = 250;

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
    scrubber: byId("pf-scrubber"), origin: byId("pf-origin"),
  };
  const stop = createStopControl({ runId, store });
  const resume = createResumeControl({ runId, store });
  // The socket sends the run's summary once, when it connects: one the events have made
  // stale (a worker took the queued run, the run ended) is asked for again, a few times
  // while the server has not caught up with the events.
  let staleAsked = "";
  let staleTries = 0;
  const refreshStaleSummary = () => {
    const s = store.get();
    const why = staleSummary(s.run, s.summary);
    if (!why || why === staleAsked || staleTries >= 10) return;
    staleAsked = why;
    staleTries += 1;
    requestJsonSoon(runApiUrl(runId)).then((data) => {
      if (data && data.run) store.set({ summary: mergeSummary(store.get().summary, data.run) });
    }).catch(() => {}).finally(() => {
      // Still stale (its end is recorded a moment after its last event): ask again soon.
      window.setTimeout(() => { staleAsked = ""; store.touch(); }, 500 * staleTries);
    });
  };
  const children = createCoordinatorPanel(byId("pf-children"));
  /** @param {number | null} seq */
  const pin = (seq) => {
    const last = store.get().run.lastSeq;
    store.set({ seq: seq === null || seq >= last ? null : Math.max(0, seq) });
  };
  const runView = createRunView({ current: () => store, onPin: pin });
  const whatIf = createWhatIfView(byId("pf-whatif"), runId);
  const compareWith = document.getElementById("pf-compare-with");
  if (compareWith instanceof HTMLSelectElement) mountComparePicker(compareWith, runId);
  /** The view shown: "whatif", or null for the lanes (the deep link's `view=`). @type {string | null} */
  let shownView = null;
  const tabs = /** @type {HTMLElement[]} */ (Array.from(document.querySelectorAll(".pf-view-tab[data-view]")));
  /** @param {string | null} view */
  const showView = (view) => {
    shownView = view === "whatif" ? "whatif" : null;
    for (const tab of tabs) tab.setAttribute("aria-selected", String((tab.dataset.view === "whatif") === (shownView === "whatif")));
    byId("pf-workspace").hidden = shownView === "whatif";
    els.scrubber.hidden = shownView === "whatif";
    root.dataset.view = shownView ?? "lanes";
    whatIf.show(shownView === "whatif");
    // The lanes were not drawn while hidden (no size to draw at).
    store.touch();
  };
  for (const tab of tabs) tab.addEventListener("click", () => showView(tab.dataset.view === "whatif" ? "whatif" : null));

  // -- deep links -------------------------------------------------------------------------
  const applyHash = (hash = location.hash) => {
    const link = parseHash(hash);
    store.set({
      // No link: the turn itself (its canonical state) is selected.
      selected: link.barrier !== null ? null : link.inv ?? "",
      selectedBarrier: link.barrier,
      seq: link.seq,
    });
    runView.reveal(link.inv ?? (link.barrier !== null ? `barrier:${link.barrier}` : null));
    const view = viewOfHash(hash);
    if (view !== shownView || whatIf.shown !== (view === "whatif")) showView(view);
  };
  let writtenHash = location.hash;
  // The hash navigated to, from the event: the page's own write of the selection (a frame
  // later) may already have replaced it in the address bar, and must not undo the link.
  window.addEventListener("hashchange", (event) => {
    const hash = new URL(event.newURL).hash;
    if (hash !== writtenHash) applyHash(hash);
  });
  applyHash();

  // -- the feed ---------------------------------------------------------------------------
  // Live batches are folded a slice at a time (pump.js): a wide fork's pages or a join's
  // lists never hold the page in one long task. A summary waits for the batches before it.
  const pump = createPump({ apply: (events) => store.applyBatch(events) });
  let queuedUpTo = -1; // the last seq handed to the pump
  /** Where the next poll starts: after what is folded, or queued to be. */
  const readUpTo = () => Math.max(store.get().run.lastSeq, pump.waiting ? queuedUpTo : -1);
  const feed = createFeed({
    // The server compares the generation: a record replaced while the page was not
    // subscribed comes again from seq 0, and the hello (its generation) restarts the page.
    url: () => runSocketUrl(runId, store.get().run.lastSeq, store.get().generation),
    onMessage(message) {
      if (message.type === "run") {
        pump.after(() => {
          store.adoptGeneration(message.run?.generation);
          store.set({ summary: mergeSummary(store.get().summary, message.run) });
        });
      } else if (message.type === "events" && Array.isArray(message.events)) {
        const last = message.events.at(-1);
        if (typeof last?.seq === "number") queuedUpTo = Math.max(queuedUpTo, last.seq);
        pump.push(message.events);
      }
      // The server replaced the run's events (a trace's run derived again from its spans):
      // the page folds it anew from the batch that follows, from seq 0.
      else if (message.type === "rebuilt") {
        pump.clear();
        queuedUpTo = -1;
        store.restart(typeof message.generation === "number" ? message.generation : null);
      }
    },
    onState(state, info) {
      store.set({ conn: { state, ...info } });
    },
    async poll() {
      const after = readUpTo();
      const data = await requestJson(eventsUrl(runId, after, PAGE));
      // Events of another record than the one folded: the run starts over, from seq 0.
      if (store.adoptGeneration(data.generation)) return { messages: [], again: true, done: false };
      const events = Array.isArray(data.events) ? data.events : [];
      /** @type {any[]} */
      const messages = [{ type: "events", events }];
      const full = events.length >= PAGE;
      let done = false;
      if (!full) {
        const info = await requestJson(runApiUrl(runId));
        // Replaced since this page of events was read: the summary restarts the run, and
        // the events (of the old record) are not folded.
        if (typeof info.run?.generation === "number" && typeof data.generation === "number"
          && info.run.generation !== data.generation) {
          return { messages: [{ type: "run", run: info.run }], again: true, done: false };
        }
        messages.unshift({ type: "run", run: info.run });
        const ended = events.some((e) => ENDING_EVENTS.includes(e.type)) || isEnded(store.get().run.status);
        // A queued run is not over: it waits for a worker.
        done = ended || isEnded(info.run.status);
      }
      return { messages, again: full, done };
    },
  });
  // Stored events come first over HTTP, as one stream folded as it arrives (a big stored
  // run can hold single messages larger than a websocket frame may be); the socket then
  // resumes after the last of them and follows the run live.
  const catchUp = async () => {
    store.set({ conn: { state: "connecting", mode: "http", reason: "loading" } });
    await streamStoredEvents(runId, store.get().run.lastSeq, (events) => store.applyBatch(events),
      { onGeneration: (generation) => store.adoptGeneration(generation) });
  };
  catchUp().catch(() => {}).finally(() => feed.start());

  // -- interaction ------------------------------------------------------------------------
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
  bindKeys([
    { keys: [","], label: "Previous event", run: () => step(-1) },
    { keys: ["."], label: "Next event", run: () => step(1) },
    { keys: ["Home"], label: "First event", run: () => pin(0) },
    { keys: ["End"], label: "Last event (follow the run)", run: () => pin(null) },
    { keys: ["w"], label: "Switch between the lanes and the What if view", run: () => showView(shownView === "whatif" ? null : "whatif") },
    ...runView.shortcuts,
  ]);

  // -- render -----------------------------------------------------------------------------
  let ticker = 0;
  let conflictFlagKey = "";

  const render = () => {
    const s = store.get();
    const live = s.run;
    const view = store.view();
    const pinned = view !== live;

    // The root's data-status is the run's (a hook); what the header says follows the
    // scrubber, so a pinned replay never shows the end of the story early.
    const liveStatus = runStatus(live, s.summary);
    const running = liveStatus === "running";
    const status = pinned ? view.status : liveStatus;
    setAttr(root, "data-status", liveStatus);
    setText(els.runStatus, status);
    els.runStatus.className = `pf-badge pf-badge-${runStatusKind(status)}`;
    els.conflictFlag.hidden = !(view.conflicts.length || (!pinned && s.summary?.has_conflicts));
    // The flag names the kind: a reducer that failed is no conflict between writers.
    const flagKey = `${view.conflicts.join("|")}#${view.version}`;
    if (flagKey !== conflictFlagKey) {
      conflictFlagKey = flagKey;
      const word = problemWord([...new Set(view.conflicts)].map((id) => conflictOf(view, id))) ?? "conflict";
      setText(els.conflictFlag, word);
      els.conflictFlag.title = view.conflicts.length ? `Invalidated join${view.conflicts.length > 1 ? "s" : ""}: ${word} (see the card below)` : "A join was invalidated";
    }
    setAttr(els.status, "data-state", s.conn.state);
    setAttr(els.status, "data-mode", s.conn.mode);
    setText(els.status, connText(s.conn));
    if (live.flow) setText(els.flow, live.flow);
    setText(els.lastSeq, view.lastSeq);
    setText(els.eventCount, view.events.length);
    setText(els.branches, branchLine(view));
    setText(els.tokens, String(view.tokens.total_tokens ?? 0));
    const now = running && !pinned ? store.nowOffset() : null;
    setText(els.duration, formatDuration(running && !pinned ? store.nowOffset() : view.endOffset));
    // No reply: a failed turn shows its error, an interrupted run why it was declared so.
    const summaryReply = pinned ? null : s.summary;
    const reply = view.reply?.message ?? summaryReply?.reply?.message ?? (view.error ? view.error.message
      : status === "interrupted" ? interruptionText(view.interruption ?? summaryReply?.interruption) : null);
    els.reply.hidden = reply === null || reply === undefined;
    if (reply !== null && reply !== undefined) setText(els.replyText, reply);
    els.reply.classList.toggle("pf-reply-failed", status === "failed");
    els.reply.classList.toggle("pf-reply-interrupted", status === "interrupted");
    els.reply.classList.toggle("pf-reply-cancelled", status === "cancelled");
    stop.render();
    resume.render();
    refreshStaleSummary();
    const origin = originText(s.summary);
    if (origin && els.origin) {
      setText(els.origin, origin);
      setAttr(els.origin, "data-kind", s.summary.origin.kind);
    }
    children.render(view);
    whatIf.sync({ ended: isEnded(liveStatus), lastSeq: live.lastSeq });
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

    if (!runView.render({ running: running && !pinned, now })) return; // it scheduled the next frame

    // Deep link in the address bar.
    const hash = hashWithView(formatHash({ inv: s.selected === "" ? null : s.selected, barrier: s.selectedBarrier, seq: s.seq }), shownView);
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
