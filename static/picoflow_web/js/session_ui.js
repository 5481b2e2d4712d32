// @ts-check
/**
 * The session page (DOM): a replay of the whole session. Every turn's events (one run
 * each) are loaded and put on one axis (timeline.js); one scrubber walks all of them, and
 * at every position the header, the barrier tree with its lanes, the inspector and the
 * canonical state are those of that moment of that turn (drawn by run_view_ui.js, the
 * run page's own code). Nothing is re-run: it is the stored event log read back.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-session[data-loaded=0|1][data-turn][data-seq]  the page root; data-turn is 1-based
 *   #pf-seq (range over every event of every turn), #pf-seq-label, #pf-play, #pf-speed
 *   #pf-session-turn, -message, -cursor, -revision, -events, -tokens, #pf-run-branches
 *   .pf-run-row[data-turn][data-current]                one row per turn
 *   #pf-diff-step, #pf-diff-marks: .pf-diff-row[data-kind][data-place]
 *   #pf-mark-a, #pf-mark-b, #pf-state (.pf-state-step[data-step]; a stopped turn's
 *   fields published in memory but never saved: .pf-unsaved .pf-unsaved-row[data-step][data-field])
 *   .pf-run-row[data-live]                              a turn followed live
 *   #pf-session-new-turn                                a later turn started (reload)
 * Deep links: #turn=<n>&seq=<s>&inv=<path> (no seq: the end of turn n); the diff marks as
 * &a=<turn>.<seq>&b=<turn>.<seq>, so a reload keeps them.
 *
 * Live: a turn still queued or running is followed over its run socket (its events join
 * the axis as they come; a page at the end stays at the end), and a new turn of the
 * session, announced on the runs list's socket, reloads a page that follows the end
 * (elsewhere it offers to).
 */

import { runSocketUrl, streamStoredEvents, wsUrl } from "./api.js";
import { append, badge, h, jsonBlock, on, setAttr, setText } from "./dom.js";
import { conflictOf, problemWord } from "./conflict.js";
import { diffCounts, diffState, differencePlace } from "./diff.js";
import { describeEvent, preview, runStatusKind } from "./format.js";
import { bindKeys } from "./keys_ui.js";
import { createFeed } from "./socket.js";
import { branchLine, createRunView } from "./run_view_ui.js";
import { createRunStore } from "./store.js";
import { SESSION_FACT_NOTES, conversationOf, createTimeline, formatMark, nearestMark, nearestTurn, parseMark, revisionOf, stateAtPosition } from "./timeline.js";

const DIFF_ROWS = 300;

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @param {HTMLElement} root */
export async function mountSessionPage(root) {
  const rowsEls = /** @type {HTMLElement[]} */ ([...root.querySelectorAll(".pf-run-row[data-run-id]")]);
  const runIds = rowsEls.map((r) => /** @type {string} */ (r.dataset.runId));
  if (!runIds.length) return;
  const els = {
    seq: /** @type {HTMLInputElement} */ (byId("pf-seq")), seqLabel: byId("pf-seq-label"),
    play: byId("pf-play"), speed: /** @type {HTMLSelectElement} */ (byId("pf-speed")),
    markKind: /** @type {HTMLSelectElement} */ (byId("pf-mark-kind")), ticks: byId("pf-turn-ticks"),
    turn: byId("pf-session-turn"), message: byId("pf-session-message"), cursor: byId("pf-session-cursor"),
    revision: byId("pf-session-revision"), events: byId("pf-session-events"), tokens: byId("pf-session-tokens"),
    branches: byId("pf-run-branches"), status: byId("pf-session-status"), replayFlag: byId("pf-replay-flag"),
    reply: byId("pf-reply"), replyText: byId("pf-reply-text"),
    diffStep: byId("pf-diff-step"), diffStepLabel: byId("pf-diff-step-label"), diffMarks: byId("pf-diff-marks"),
    markALabel: byId("pf-mark-a-label"), markBLabel: byId("pf-mark-b-label"),
    state: byId("pf-state"), stateAt: byId("pf-state-at"),
  };

  // One store per turn, drawn through the run page's code; `aux` stores answer "the state
  // at another position" (previous event, marks) without moving the drawn one.
  let scheduled = false;
  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; render(); });
  };
  const stores = runIds.map(() => createRunStore({ frame: (fn) => fn() }));
  /** @type {(ReturnType<typeof createRunStore> | null)[]} */
  const aux = runIds.map(() => null);
  for (const store of stores) store.subscribe(schedule);

  let g = 0;
  let timeline = createTimeline([]);
  /** @type {number | null} */
  let markA = null;
  /** @type {number | null} */
  let markB = null;
  let playTimer = 0;
  let loaded = false;

  const turnOf = () => timeline.positionAt(g);
  const current = () => stores[turnOf().turn];
  /** Move the drawn position (clamped), pinning that turn's store at its seq. @param {number} to */
  const go = (to) => {
    if (!timeline.total) return;
    g = Math.max(0, Math.min(timeline.total - 1, to));
    const { turn, seq } = turnOf();
    const store = stores[turn];
    const last = store.get().run.lastSeq;
    store.set({ seq: seq >= last ? null : seq, selected: store.get().selected ?? (store.get().selectedBarrier === null ? "" : null) });
    schedule();
  };
  const runView = createRunView({
    current,
    onPin: (seq) => go(timeline.globalOf(turnOf().turn, seq ?? Infinity)),
  });

  /**
   * The canonical state, cursor and tokens at position `at` (a turn's fold before its
   * `session.loaded` stands for the session as the turn before left it).
   * @param {number} at
   */
  /** @type {Map<number, any>} a few recent positions: one step asks for g and g-1 */
  const factsCache = new Map();
  const factsAt = (at) => {
    if (at < 0) return { state: {}, cursor: null, tokens: {}, revision: null, conversation: null, message: null, reply: null, events: [] };
    const cached = factsCache.get(at);
    if (cached) return cached;
    const facts = computeFacts(at);
    factsCache.set(at, facts);
    if (factsCache.size > 16) factsCache.delete(/** @type {number} */ (factsCache.keys().next().value));
    return facts;
  };
  /** @param {number} at */
  const computeFacts = (at) => {
    const { turn, seq } = timeline.positionAt(at);
    let store = aux[turn];
    if (!store) {
      store = createRunStore({ frame: () => {} });
      store.applyBatch(stores[turn].get().run.events);
      aux[turn] = store;
    }
    store.set({ seq });
    const view = store.view();
    const previous = turn > 0 ? stores[turn - 1].get().run : null;
    const loadedHere = view.events.some((e) => e.type === "session.loaded");
    const revision = revisionOf(view.events);
    // The view is one fold moved from position to position: keep copies, not its parts
    // (state is copy-on-write per step, so a shallow copy is a snapshot).
    return {
      state: { ...stateAtPosition(view, previous ? previous.state : {}) },
      cursor: loadedHere ? view.cursor : previous ? previous.cursor : null,
      tokens: loadedHere || !previous ? view.tokens : previous.tokens,
      revision: revision ?? (previous ? revisionOf(previous.events) : null),
      conversation: conversationOf(view.events) ?? (turn > 0 ? factsAt(timeline.endOf(turn - 1)).conversation : null),
      message: view.message,
      reply: view.reply ? view.reply.message : null,
      unsaved: [...view.unsaved],
      revisionKept: view.cancellation ? view.cancellation.revision : null,
    };
  };

  // -- loading ------------------------------------------------------------------------------
  const load = async () => {
    for (let t = 0; t < runIds.length; t += 1) {
      const store = stores[t];
      await streamStoredEvents(runIds[t], store.get().run.lastSeq, (events) => store.applyBatch(events));
      setText(els.seqLabel, `loading events: turn ${t + 1} of ${runIds.length}`);
    }
    timeline = createTimeline(stores.map((s, i) => ({ runId: runIds[i], events: s.get().run.events })));
    els.seq.max = String(Math.max(0, timeline.total - 1));
    drawTurnTicks();
    nameTurnProblems();
    loaded = true;
    root.dataset.loaded = "1";
    applyHash();
  };

  // The server only knows a turn had an invalidated join; its events say which kind.
  const nameTurnProblems = () => {
    rowsEls.forEach((row, t) => {
      const flag = /** @type {HTMLElement | null} */ (row.querySelector(".pf-badge-conflict"));
      const run = stores[t].get().run;
      const word = flag ? problemWord([...new Set(run.conflicts)].map((id) => conflictOf(run, id))) : null;
      if (flag && word) setText(flag, word);
    });
  };
  const drawTurnTicks = () => {
    const span = Math.max(1, timeline.total - 1);
    els.ticks.replaceChildren(...timeline.starts.map((start, i) => {
      const tick = h("span", "pf-turn-tick", String(i + 1));
      tick.style.left = `${((start / span) * 100).toFixed(3)}%`;
      tick.title = `turn ${i + 1}`;
      return tick;
    }));
  };

  // -- deep links ---------------------------------------------------------------------------
  let writtenHash = location.hash;
  const applyHash = (hash = location.hash) => {
    const params = new URLSearchParams(hash.replace(/^#/, ""));
    const turnText = params.get("turn");
    const seqText = params.get("seq");
    const turn = turnText && /^\d+$/.test(turnText) ? Math.max(0, Number(turnText) - 1) : runIds.length - 1;
    const seq = seqText && /^\d+$/.test(seqText) ? Number(seqText) : Infinity;
    go(timeline.globalOf(turn, seq));
    // A link without marks (the turn list's, a hand-typed one) keeps the marks set here.
    if (params.has("a")) markA = parseMark(timeline, params.get("a"));
    if (params.has("b")) markB = parseMark(timeline, params.get("b"));
    const inv = params.get("inv");
    if (inv !== null) {
      current().set({ selected: inv, selectedBarrier: null });
      runView.reveal(inv);
    }
  };
  // The hash navigated to, from the event: the page's own write of its position (a frame
  // later) may already have replaced it in the address bar, and must not undo the move.
  window.addEventListener("hashchange", (event) => {
    const hash = new URL(event.newURL).hash;
    if (hash !== writtenHash && loaded) applyHash(hash);
  });

  // -- controls -----------------------------------------------------------------------------
  const stopPlaying = () => {
    window.clearInterval(playTimer);
    playTimer = 0;
    setText(els.play, "▶ Play");
  };
  const togglePlay = () => {
    if (playTimer) return stopPlaying();
    if (g >= timeline.total - 1) go(0);
    const rate = Number(els.speed.value) || 8;
    playTimer = window.setInterval(() => {
      if (g >= timeline.total - 1) stopPlaying();
      else go(g + 1);
    }, 1000 / rate);
    setText(els.play, "❚❚ Pause");
  };
  els.speed.addEventListener("change", () => { if (playTimer) { stopPlaying(); togglePlay(); } });
  const jumpTurn = (/** @type {1 | -1} */ dir) => {
    const to = nearestTurn(timeline, g, dir);
    if (to !== null) go(to);
  };
  const jumpMark = (/** @type {1 | -1} */ dir) => {
    const to = nearestMark(timeline, els.markKind.value, g, dir);
    if (to !== null) go(to);
    else setText(els.seqLabel, `no ${dir > 0 ? "later" : "earlier"} ${els.markKind.value}`);
  };
  const mark = (/** @type {"a" | "b"} */ which) => {
    if (which === "a") markA = g;
    else markB = g;
    schedule();
  };
  els.seq.addEventListener("input", () => go(Number(els.seq.value)));
  els.play.addEventListener("click", togglePlay);
  byId("pf-seq-prev").addEventListener("click", () => go(g - 1));
  byId("pf-seq-next").addEventListener("click", () => go(g + 1));
  byId("pf-turn-prev").addEventListener("click", () => jumpTurn(-1));
  byId("pf-turn-next").addEventListener("click", () => jumpTurn(1));
  byId("pf-mark-prev").addEventListener("click", () => jumpMark(-1));
  byId("pf-mark-next").addEventListener("click", () => jumpMark(1));
  byId("pf-mark-a").addEventListener("click", () => mark("a"));
  byId("pf-mark-b").addEventListener("click", () => mark("b"));
  on(root, "click", ".pf-run-row", (event, row) => {
    if (/** @type {HTMLElement} */ (event.target).closest("a")) return;
    go(timeline.endOf(Number(row.dataset.turn) - 1));
  });
  bindKeys([
    { keys: [" "], label: "Play / pause", run: togglePlay },
    { keys: [","], label: "Previous event", run: () => go(g - 1) },
    { keys: ["."], label: "Next event", run: () => go(g + 1) },
    { keys: ["["], label: "Previous turn (its start)", run: () => jumpTurn(-1) },
    { keys: ["]"], label: "Next turn (its start)", run: () => jumpTurn(1) },
    { keys: ["Home"], label: "Start of the session", run: () => go(0) },
    { keys: ["End"], label: "End of the session", run: () => go(timeline.total - 1) },
    { keys: ["p"], label: "Previous fork / join / conflict / … (the kind chosen)", run: () => jumpMark(-1) },
    { keys: ["n"], label: "Next fork / join / conflict / … (the kind chosen)", run: () => jumpMark(1) },
    { keys: ["a"], label: "Mark this position as A", run: () => mark("a") },
    { keys: ["b"], label: "Mark this position as B", run: () => mark("b") },
    ...runView.shortcuts,
  ]);

  // -- render -------------------------------------------------------------------------------
  let diffKey = "";
  let marksKey = "";
  let stateKey = "";
  /** @param {number} at */
  const positionName = (at) => {
    const p = timeline.positionAt(at);
    return `turn ${p.turn + 1} #${p.seq}`;
  };

  const render = () => {
    if (!loaded || !timeline.total) return;
    const { turn, seq } = turnOf();
    const store = stores[turn];
    const s = store.get();
    const view = store.view();
    const atEnd = g === timeline.total - 1;
    const facts = factsAt(g);

    setAttr(root, "data-turn", String(turn + 1));
    setAttr(root, "data-seq", String(seq));
    setText(els.turn, `${turn + 1} of ${runIds.length}`);
    setText(els.message, view.message ?? "—");
    setText(els.cursor, facts.cursor ?? "—");
    const revision = revisionOf(view.events);
    setText(els.revision, revision === null ? "—" : String(revision));
    setText(els.events, `${view.events.length} of ${s.run.events.length}`);
    setText(els.tokens, String(facts.tokens.total_tokens ?? 0));
    setText(els.branches, branchLine(view));
    // The turn's status, named as the turn's: the session goes on after a turn finishes.
    setText(els.status, `turn ${turn + 1} ${view.status}`);
    els.status.className = `pf-badge pf-badge-${runStatusKind(view.status)}`;
    els.replayFlag.hidden = atEnd;
    if (!atEnd) setText(els.replayFlag, `replay at ${positionName(g)}`);
    const reply = view.reply?.message ?? (view.error ? view.error.message : null);
    els.reply.hidden = reply === null || reply === undefined;
    if (reply !== null && reply !== undefined) setText(els.replyText, reply);

    if (document.activeElement !== els.seq || els.seq.value !== String(g)) els.seq.value = String(g);
    const event = view.events.length ? view.events[view.events.length - 1] : null;
    setText(els.seqLabel, `turn ${turn + 1}/${runIds.length} · #${seq} of ${s.run.lastSeq}${event ? ` · ${event.type}${event.path ? ` @${event.path}` : ""} · ${describeEvent(event)}` : ""}`);
    for (const row of rowsEls) row.toggleAttribute("data-current", Number(row.dataset.turn) === turn + 1);

    runView.render({ running: false, now: null });

    if (diffKey !== `${g}`) {
      diffKey = `${g}`;
      const before = factsAt(g - 1);
      const after = factsAt(g);
      setText(els.diffStepLabel, event ? `(#${seq} ${event.type}${g > 0 && seq === 0 ? `, against the end of turn ${turn}` : ""})` : "");
      renderDiff(els.diffStep, before, after, "This event changed no canonical state.");
    }
    const mKey = `${markA}|${markB}`;
    if (mKey !== marksKey) {
      marksKey = mKey;
      setText(els.markALabel, markA === null ? "—" : positionName(markA));
      setText(els.markBLabel, markB === null ? "—" : positionName(markB));
      if (markA !== null && markB !== null) {
        renderDiff(els.diffMarks, factsAt(Math.min(markA, markB)), factsAt(Math.max(markA, markB)), "No canonical state differs between the two marks.");
      }
    }
    if (stateKey !== `${g}`) {
      stateKey = `${g}`;
      setText(els.stateAt, `(at ${positionName(g)})`);
      const state = factsAt(g).state;
      const steps = Object.keys(state);
      els.state.replaceChildren(...(steps.length ? steps.map((step) => {
        const d = /** @type {HTMLDetailsElement} */ (h("details", "pf-section pf-state-step"));
        d.dataset.step = step;
        d.open = true;
        const summary = h("summary", "pf-section-title");
        append(summary, h("span", "pf-mono", step), step === facts.cursor ? badge("cursor", "running") : null);
        append(d, summary, jsonBlock(state[step]));
        return d;
      }) : [h("p", "pf-empty", "No step state at this point.")]));
      const { unsaved, revisionKept } = factsAt(g);
      if (unsaved && unsaved.length) els.state.appendChild(unsavedBlock(unsaved, revisionKept));
    }

    const marks = `${markA !== null ? `&a=${formatMark(timeline, markA)}` : ""}${markB !== null ? `&b=${formatMark(timeline, markB)}` : ""}`;
    const hash = `#turn=${turn + 1}${atEnd || seq >= s.run.lastSeq ? "" : `&seq=${seq}`}${s.selected ? `&inv=${encodeURIComponent(s.selected)}` : ""}${marks}`;
    if (hash !== writtenHash) {
      writtenHash = hash;
      history.replaceState(null, "", hash);
    }
  };

  // -- live ---------------------------------------------------------------------------------
  const following = () => g >= timeline.total - 1;
  let rebuildQueued = false;
  const rebuild = () => {
    rebuildQueued = false;
    const atEnd = following();
    timeline = createTimeline(stores.map((s, i) => ({ runId: runIds[i], events: s.get().run.events })));
    els.seq.max = String(Math.max(0, timeline.total - 1));
    drawTurnTicks();
    factsCache.clear();
    if (atEnd) go(timeline.total - 1);
    else schedule();
  };
  /** @param {number} t */
  const followTurn = (t) => {
    const row = rowsEls[t];
    row.dataset.live = "1";
    createFeed({
      url: () => runSocketUrl(runIds[t], stores[t].get().run.lastSeq),
      onMessage(message) {
        if (message.type === "run" && message.run) {
          row.dataset.status = message.run.status;
          const status = row.querySelector(".pf-badge");
          if (status) {
            setText(/** @type {HTMLElement} */ (status), message.run.status);
            status.className = `pf-badge pf-badge-${runStatusKind(message.run.status)}`;
          }
        } else if (message.type === "events" && Array.isArray(message.events)
          && stores[t].applyBatch(message.events)) {
          aux[t] = null;  // its second store folded the old end
          if (!rebuildQueued) {
            rebuildQueued = true;
            requestAnimationFrame(rebuild);
          }
        }
      },
    }).start();
  };
  const watchNewTurns = () => {
    const sessionId = root.dataset.sessionId;
    let offered = false;
    createFeed({
      url: () => wsUrl("/ws/runs/"),
      onMessage(message) {
        const run = message.type === "run" ? message.run : null;
        if (!run || run.session_id !== sessionId || runIds.includes(run.id)) return;
        if (following() && !offered) {
          // Once: without the position in the hash, the page opens at the new end.
          offered = true;
          location.replace(location.pathname + location.search);
          return;
        }
        if (offered) return;
        offered = true;
        const note = h("p", "pf-hint pf-session-new-turn", "A new turn of this session started. ");
        note.id = "pf-session-new-turn";
        const reload = h("button", "pf-button pf-button-small", "Reload to include it");
        reload.setAttribute("type", "button");
        reload.addEventListener("click", () => location.reload());
        note.appendChild(reload);
        els.seqLabel.after(note);
      },
    }).start();
  };

  await load().catch((error) => {
    setText(els.seqLabel, `could not load the session's events: ${error && error.message ? error.message : error}`);
  });
  if (loaded) {
    rowsEls.forEach((row, t) => {
      if (row.dataset.status === "running" || row.dataset.status === "queued") followTurn(t);
    });
    watchNewTurns();
  }
  return { stores, go: (/** @type {number} */ to) => go(to) };
}

/**
 * What the session was at a position, beside its step state: the facts a turn changes
 * even when no step field moves (a chat turn often only adds to the conversation).
 * @param {any} facts
 */
function sessionFacts(facts) {
  return {
    cursor: facts.cursor, revision: facts.revision, message: facts.message, reply: facts.reply,
    conversation: facts.conversation,
    tokens: { ...facts.tokens },
  };
}

/**
 * The differences between two positions: session facts first (`session.*`), then the
 * canonical state per step and field.
 * @param {HTMLElement} container @param {any} before @param {any} after @param {string} empty
 */
function renderDiff(container, before, after, empty) {
  const session = diffState({ session: { facts: sessionFacts(before) } }, { session: { facts: sessionFacts(after) } });
  const diffs = diffState(before.state, after.state);
  const rows = [];
  for (const d of session) {
    const place = `session.${d.path.join(".")}`;
    const note = SESSION_FACT_NOTES[/** @type {keyof typeof SESSION_FACT_NOTES} */ (String(d.path[0]))];
    rows.push(diffRow(d.kind, place, d.before, d.after, note));
  }
  for (const d of diffs.slice(0, DIFF_ROWS)) {
    rows.push(diffRow(d.kind, differencePlace(d), d.before, d.after));
  }
  if (!diffs.length && !session.length) {
    container.replaceChildren(h("p", "pf-empty", empty));
    return;
  }
  const c = diffCounts(diffs);
  const summary = h("p", "pf-diff-summary pf-small", `state: ${c.added} added · ${c.removed} removed · ${c.changed} changed${diffs.length > DIFF_ROWS ? ` (first ${DIFF_ROWS} shown)` : ""}; session: ${session.length} changed`);
  container.replaceChildren(summary, ...rows);
}

/**
 * @param {string} kind @param {string} place @param {any} before @param {any} after
 * @param {string} [note]  what the place means, when its name alone misleads
 */
function diffRow(kind, place, before, after, note) {
  const row = h("div", `pf-diff-row pf-diff-${kind}`);
  row.dataset.kind = kind;
  row.dataset.place = place;
  const value = (/** @type {any} */ v, /** @type {string} */ cls) => h("code", `pf-value ${cls}`, v === undefined ? "" : preview(v, 200, true));
  append(row, h("span", `pf-diff-kind pf-diff-kind-${kind}`, kind), h("span", "pf-diff-place pf-mono", place),
    kind === "added" ? h("span") : value(before, "pf-diff-before"),
    kind === "removed" ? h("span") : value(after, "pf-diff-after"));
  if (note) {
    row.title = `${place}: ${note}`;
    row.appendChild(h("span", "pf-diff-note pf-muted pf-small", note));
  }
  return row;
}

const root = typeof document === "undefined" ? null : document.getElementById("pf-session");
if (root) mountSessionPage(root);

/**
 * A stopped turn's fields published in memory but never saved: shown beside the state the
 * session holds, never as part of it.
 * @param {{step: string, field: string, value: any, deleted: boolean}[]} unsaved
 * @param {number | null} revision  the revision the session stays at
 */
function unsavedBlock(unsaved, revision) {
  const box = h("div", "pf-section pf-unsaved");
  append(box,
    append(h("p", "pf-unsaved-title"), h("strong", "", "Published in memory, not saved: the turn was stopped")),
    h("p", "pf-hint", `The session stays${revision !== null ? ` at revision ${revision}` : ""}; these values never reached it.`));
  for (const u of unsaved) {
    const row = h("div", "pf-unsaved-row");
    row.dataset.step = u.step;
    row.dataset.field = u.field;
    append(row, h("code", "pf-mono", `${u.step}.${u.field}`), u.deleted ? h("span", "pf-muted", " removed in memory") : jsonBlock(u.value));
    box.appendChild(row);
  }
  return box;
}
