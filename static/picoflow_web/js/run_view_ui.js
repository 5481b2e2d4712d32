// @ts-check
/**
 * One turn drawn at one moment (DOM): the conflict cards, the barrier tree with its lanes
 * (activity rows included, so sequential work shows), and the inspector. The run page
 * draws its one run with it; the session replay draws whichever turn the scrubber is in,
 * so `current()` names the store to draw and may change between frames.
 *
 * Markup: templates/picoflow_web/_workspace.html (plus a `#pf-conflicts` container).
 */

import { syncStreams } from "./calls_ui.js";
import { conflictOf, writerPaths } from "./conflict.js";
import { h, on } from "./dom.js";
import { barrierPublicationOf, publicationOf } from "./fold.js";
import { conflictCard, renderInspector } from "./inspector_ui.js";
import { ROW_HEIGHT, axisMarkers, panWindow, revealPath, scrollToRow, ticks, timeBounds, treeRows, zoomWindow } from "./layout.js";
import { barrierNameOf } from "./labels.js";
import { mountSplitters } from "./resize_ui.js";
import { createRowsView } from "./rows_ui.js";
import { cancelTitle, timeMarkers } from "./time_marks.js";
import { createCriticalHighlight, timeMarkElements } from "./timing_ui.js";
import { turnSignature } from "./turn_signature.js";

const INSPECTOR_LIVE_MS = 300;

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * @typedef {ReturnType<typeof import("./store.js").createRunStore>} RunStore
 * @typedef {{current: () => RunStore, onPin: (seq: number | null) => void}} RunViewOptions
 */

/** @param {RunViewOptions} options */
export function createRunView(options) {
  const { current, onPin } = options;
  const els = {
    conflicts: byId("pf-conflicts"), viewport: byId("pf-viewport"), sizer: byId("pf-sizer"),
    axis: byId("pf-axis"), inspector: byId("pf-inspector"), find: /** @type {HTMLInputElement} */ (byId("pf-find")),
    statusFilter: /** @type {HTMLSelectElement} */ (byId("pf-status-filter")),
  };
  const rowsView = createRowsView(els.viewport, els.sizer);
  const critical = createCriticalHighlight();
  mountSplitters(byId("pf-workspace"));
  /** @type {Map<string, boolean>} */
  const openSections = new Map();
  /** @type {string | null} a selection from a link, revealed once its row exists */
  let pendingReveal = null;

  /** @type {import("./layout.js").Row[]} */
  let rows = [];
  /** @type {any} */
  let rowsFor = null;
  const computeRows = (/** @type {import("./fold.js").Run} */ view) => {
    const s = current().get();
    const key = [view, view.version, s.collapsed, s.shown, s.query, s.status];
    if (!rowsFor || key.some((k, i) => k !== rowsFor[i])) {
      rows = treeRows(view, { collapsed: s.collapsed, shown: s.shown, query: s.query, status: s.status, activity: true });
      rowsFor = key;
    }
    return rows;
  };

  /** @param {string} path */
  const selectPath = (path) => {
    current().set({ selected: path, selectedBarrier: null });
    pendingReveal = path;
  };
  /** @param {string} id */
  const selectBarrier = (id) => {
    current().set({ selected: null, selectedBarrier: id });
    pendingReveal = `barrier:${id}`;
  };

  on(els.viewport, "click", ".pf-row", (event, row) => {
    const target = /** @type {HTMLElement} */ (event.target);
    const store = current();
    const s = store.get();
    if (row.classList.contains("pf-more")) {
      const button = target.closest("[data-more]");
      if (!button) return;
      const id = /** @type {string} */ (row.dataset.barrier);
      const shown = new Map(s.shown);
      const count = rows.filter((r) => r.kind === "branch" && r.inv.barrier === id).length;
      shown.set(id, /** @type {HTMLElement} */ (button).dataset.more === "all" ? Infinity : count + 500);
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
    if (row.classList.contains("pf-activity")) {
      // A call row is a moment: show its invocation as it was when the call began.
      selectPath(/** @type {string} */ (row.dataset.path));
      onPin(Number(row.dataset.seq));
    } else if (row.classList.contains("pf-branch")) selectPath(/** @type {string} */ (row.dataset.path));
    else if (row.classList.contains("pf-root")) selectPath("");
    els.viewport.focus({ preventScroll: true });
  });
  els.viewport.addEventListener("scroll", () => current().touch(), { passive: true });
  window.addEventListener("resize", () => current().touch());

  on(els.inspector, "click", "[data-select-path],[data-select-barrier],[data-pin-seq]", (_event, el) => {
    if (el.dataset.selectPath !== undefined) selectPath(el.dataset.selectPath);
    else if (el.dataset.selectBarrier !== undefined) selectBarrier(el.dataset.selectBarrier);
    else if (el.dataset.pinSeq !== undefined) onPin(Number(el.dataset.pinSeq));
  });
  on(els.inspector, "click", "[data-critical-barrier]", (_event, el) => {
    critical.toggle(/** @type {string} */ (el.dataset.criticalBarrier));
    current().touch();
  });
  // The overview's counts: show that set of a barrier's branches in the tree, all of them
  // (the tree draws only the rows in view, so 100,000 cost what 50 do).
  on(els.inspector, "click", "[data-show-barrier]", (_event, el) => {
    const id = /** @type {string} */ (el.dataset.showBarrier);
    const status = el.dataset.showStatus ?? "";
    const s = current().get();
    const collapsed = new Set(s.collapsed);
    collapsed.delete(id);
    const shown = new Map(s.shown);
    shown.set(id, Infinity);
    els.statusFilter.value = status;
    current().set({ collapsed, shown, status });
    pendingReveal = `barrier:${id}`;
  });
  /** @type {WeakMap<RunStore, Set<string>>} the cards a reader opened, per turn (ids repeat across turns) */
  const openCardsOf = new WeakMap();
  const openCards = () => {
    const store = current();
    let open = openCardsOf.get(store);
    if (!open) openCardsOf.set(store, (open = new Set()));
    return open;
  };
  /** @param {string} id @param {boolean} open */
  const setCardOpen = (id, open) => {
    const cards = openCards();
    if (cards.has(id) === open) return;
    if (open) cards.add(id);
    else cards.delete(id);
    conflictsKey = "";
    current().touch();
  };
  on(els.conflicts, "click", ".pf-conflict", (event, card) => {
    const target = /** @type {HTMLElement} */ (event.target);
    const id = /** @type {string} */ (card.dataset.barrier);
    const toggle = /** @type {HTMLElement | null} */ (target.closest("[data-conflict-toggle]"));
    if (toggle) {
      setCardOpen(id, !openCards().has(id));
      return;
    }
    const el = /** @type {HTMLElement | null} */ (target.closest("[data-select-path],[data-select-barrier],[data-pin-seq]"));
    if (el && el.dataset.selectPath !== undefined) selectPath(el.dataset.selectPath);
    else if (el && el.dataset.pinSeq !== undefined) {
      // The barrier stays selected, so its card and its writers' marks stay while the
      // scrubber shows the moment of the write (before the join).
      if (current().get().selectedBarrier !== id) selectBarrier(id);
      onPin(Number(el.dataset.pinSeq));
    } else if (el && el.dataset.selectBarrier !== undefined) selectBarrier(el.dataset.selectBarrier);
    else if (!target.closest("button, a, summary, pre")) {
      // A click on the card's line selects its barrier and opens the card where it is.
      selectBarrier(id);
      setCardOpen(id, true);
    }
  });

  // -- zooming the time axis ----------------------------------------------------------------
  // The window is kept per store (a replay's turns each have their own); `lastFull` is the
  // whole span as last drawn, so events between frames zoom against what the reader sees.
  /** @type {{start: number, end: number}} */
  let lastFull = { start: 0, end: 1 };
  /** @returns {{start: number, end: number}} */
  const shownWindow = () => current().get().zoom ?? lastFull;
  /** @param {{start: number, end: number} | null} zoom */
  const setZoom = (zoom) => current().set({ zoom });
  /** The time under a pointer's x, if it is over the lanes. @param {number} clientX */
  const timeAt = (clientX) => {
    const rect = els.axis.getBoundingClientRect();
    if (clientX < rect.left || clientX > rect.right || !rect.width) return null;
    const w = shownWindow();
    return w.start + ((clientX - rect.left) / rect.width) * (w.end - w.start);
  };
  /** Where a key zoom centres: the selected branch's start when it is in view. */
  const keyFocus = () => {
    const w = shownWindow();
    const s = current().get();
    const inv = s.selected ? current().view().invocations.get(s.selected) : null;
    const t = inv ? inv.started ?? null : null;
    return t !== null && t >= w.start && t <= w.end ? t : (w.start + w.end) / 2;
  };
  /** @param {number} factor @param {number} focus */
  const zoomBy = (factor, focus) => setZoom(zoomWindow(lastFull, shownWindow(), focus, factor));
  /** @param {number} fraction  of the window's span */
  const panBy = (fraction) => {
    const w = current().get().zoom;
    if (w) setZoom(panWindow(lastFull, w, fraction * (w.end - w.start)));
  };
  /** @param {WheelEvent} event */
  const onWheel = (event) => {
    // Over the axis the wheel zooms; over the lanes only with Ctrl (plain wheel scrolls rows).
    const overAxis = event.currentTarget === els.axis.parentElement;
    if (!overAxis && !event.ctrlKey) return;
    const t = timeAt(event.clientX);
    if (t === null) return;
    event.preventDefault();
    if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) panBy((event.deltaX || event.deltaY) / 400);
    else zoomBy(Math.exp(event.deltaY * 0.002), t);
  };
  els.viewport.addEventListener("wheel", onWheel, { passive: false });
  /** @type {HTMLElement} */ (els.axis.parentElement).addEventListener("wheel", onWheel, { passive: false });
  /** @type {{x: number, window: {start: number, end: number}} | null} */
  let drag = null;
  els.axis.addEventListener("pointerdown", (event) => {
    const w = current().get().zoom;
    if (!w) return;
    drag = { x: event.clientX, window: w };
    els.axis.setPointerCapture(event.pointerId);
  });
  els.axis.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const width = els.axis.clientWidth || 1;
    const span = drag.window.end - drag.window.start;
    setZoom(panWindow(lastFull, drag.window, -((event.clientX - drag.x) / width) * span));
  });
  const endDrag = () => { drag = null; };
  els.axis.addEventListener("pointerup", endDrag);
  els.axis.addEventListener("pointercancel", endDrag);
  const resetZoom = document.getElementById("pf-zoom-reset");
  if (resetZoom) resetZoom.addEventListener("click", () => setZoom(null));

  let findTimer = 0;
  els.find.addEventListener("input", () => {
    window.clearTimeout(findTimer);
    findTimer = window.setTimeout(() => current().set({ query: els.find.value }), 120);
  });
  els.statusFilter.addEventListener("change", () => current().set({ status: els.statusFilter.value }));
  byId("pf-expand-all").addEventListener("click", () => {
    const shown = new Map();
    for (const id of current().get().run.barriers.keys()) shown.set(id, Infinity);
    current().set({ collapsed: new Set(), shown });
  });
  byId("pf-collapse-all").addEventListener("click", () => {
    current().set({ collapsed: new Set(current().get().run.barriers.keys()), shown: new Map() });
  });

  /** Tree keys (j/k, arrows); true when the key was one. @param {KeyboardEvent} event */
  const treeKey = (event) => {
    const target = /** @type {HTMLElement} */ (event.target);
    if (!els.viewport.contains(target) && target !== document.body) return false;
    const store = current();
    const s = store.get();
    const index = rows.findIndex((r) => (r.kind === "barrier" ? s.selectedBarrier === r.id : s.selectedBarrier === null && (r.kind === "branch" || r.kind === "root") && r.path === s.selected));
    const move = (/** @type {number} */ delta) => {
      let i = index;
      do i += delta; while (i >= 0 && i < rows.length && (rows[i].kind === "more" || rows[i].kind === "activity"));
      const row = rows[i];
      if (!row) return;
      if (row.kind === "barrier") selectBarrier(row.id);
      else if (row.kind === "branch" || row.kind === "root") selectPath(row.path);
    };
    if (event.key === "j" || event.key === "ArrowDown") move(1);
    else if (event.key === "k" || event.key === "ArrowUp") move(-1);
    else if ((event.key === "ArrowLeft" || event.key === "ArrowRight") && index >= 0 && rows[index].kind === "barrier") {
      const row = /** @type {any} */ (rows[index]);
      const collapsed = new Set(s.collapsed);
      if (event.key === "ArrowLeft") collapsed.add(row.id);
      else collapsed.delete(row.id);
      store.set({ collapsed });
    } else return false;
    return true;
  };

  let inspectorKey = "";
  let inspectorAt = 0;
  let inspectorTimer = 0;
  let conflictsKey = "";
  /** the selection the inspector shows, to tell a new one from a redraw of it */
  let inspectedSelection = "";
  let axisKey = "";
  let writersKey = "";
  /** @type {Map<string, string>} the writers of the selected invalidated barrier */
  let writers = new Map();
  /** @type {RunStore | null} */
  let drawn = null;

  /**
   * Draw `current()` at its position. Returns false when it scheduled another frame
   * instead (a linked selection had to be revealed first).
   * @param {{running: boolean, now: number | null}} frame
   */
  const render = (frame) => {
    const store = current();
    if (store !== drawn) {
      // Another turn: nothing drawn so far belongs to it.
      drawn = store;
      inspectorKey = "";
      inspectedSelection = "";
      conflictsKey = "";
      axisKey = "";
      critical.toggle(null);
      if (els.find.value !== store.get().query) els.find.value = store.get().query;
      els.statusFilter.value = store.get().status;
    }
    const s = store.get();
    const live = s.run;
    const view = store.view();
    const pinned = view !== live;
    const scrollTop = els.viewport.scrollTop;
    const viewportHeight = els.viewport.clientHeight;
    const axisWidth = els.axis.clientWidth;
    const inspectorScroll = els.inspector.scrollTop;

    // A selected invalidated barrier keeps its card when the scrubber goes back before its
    // join (a write link took it there); other cards follow the scrubber.
    const focus = s.selectedBarrier !== null && live.conflicts.includes(s.selectedBarrier) ? s.selectedBarrier : null;
    const held = focus !== null && !view.conflicts.includes(focus) ? focus : null;
    const cKey = `${view.conflicts.join("|")}#${pinned ? view.lastSeq : "live"}#${focus}#${live.version}`;
    if (cKey !== conflictsKey) {
      conflictsKey = cKey;
      const at = pinned ? view.lastSeq : null;
      const open = openCards();
      const cards = [...new Set(view.conflicts)].map((id) => conflictCard(view, /** @type {any} */ (view.barriers.get(id)), { at, collapsible: true, expanded: open.has(id) }));
      if (held !== null) cards.push(conflictCard(live, /** @type {any} */ (live.barriers.get(held)), { at, ahead: true, collapsible: true, expanded: open.has(held) }));
      for (const card of cards) card.classList.toggle("pf-conflict-selected", card.dataset.barrier === focus);
      els.conflicts.replaceChildren(...cards);
    }
    if (`${focus}#${live.version}` !== writersKey) {
      writersKey = `${focus}#${live.version}`;
      writers = writerPaths(focus !== null ? conflictOf(live, focus) : null);
    }

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
        const next = treeRows(view, { ...opened, query: s.query, status: s.status, activity: true });
        const index = next.findIndex((r) => (barrierId !== null ? r.kind === "barrier" && r.id === barrierId : (r.kind === "branch" || r.kind === "root") && r.path === target));
        if (index >= 0) {
          const top = scrollToRow(index, scrollTop, viewportHeight, ROW_HEIGHT);
          // The sizer still has the height of the rows before the reveal; a row revealed
          // beyond it (branch 5,000 of a group that showed 50) needs the room first, or the
          // browser clamps the scroll short of it.
          if (top !== scrollTop) {
            els.sizer.style.height = `${next.length * ROW_HEIGHT}px`;
            els.viewport.scrollTop = top;
          }
        }
        return false;
      }
    }

    const shownRows = computeRows(view);
    const full = timeBounds(live, frame.running ? store.nowOffset() : null);
    lastFull = full;
    const bounds = s.zoom ? panWindow(full, s.zoom, 0) : full;
    rowsView.render(shownRows, { scrollTop, viewport: viewportHeight, run: view, bounds, now: frame.now, selected: s.selected, selectedBarrier: s.selectedBarrier, writers, critical: critical.paths(view) });
    const markers = axisMarkers(view, bounds);
    const clockMarks = timeMarkers(view, bounds).length;
    const aKey = `${bounds.start}|${s.zoom ? bounds.end : bounds.end.toFixed(3)}|${axisWidth}|${markers.length}|${clockMarks}`;
    if (aKey !== axisKey) {
      axisKey = aKey;
      const count = Math.max(2, Math.floor(axisWidth / 90));
      els.axis.dataset.start = String(bounds.start);
      els.axis.dataset.end = String(bounds.end);
      if (s.zoom) els.axis.dataset.zoomed = "1";
      else delete els.axis.dataset.zoomed;
      if (resetZoom) resetZoom.hidden = !s.zoom;
      // Past a few hundred, fork/join marks of nested barriers are a solid bar: the
      // zoom that would separate them shows fewer.
      const shownMarks = markers.length <= 400 ? markers : [];
      els.axis.replaceChildren(...ticks(bounds, count).map((t) => {
        const tick = h("span", "pf-tick", t.label);
        tick.style.left = `${(t.x * 100).toFixed(3)}%`;
        return tick;
      }), ...shownMarks.map((m) => {
        const mark = h("i", `pf-axis-mark pf-axis-mark-${m.kind}`);
        mark.dataset.kind = m.kind;
        mark.dataset.barrier = m.barrier;
        mark.title = m.kind === "cancel" ? cancelTitle(view, m.barrier, m.t) : `${m.kind} · ${barrierNameOf(view, m.barrier)} · ${m.t.toFixed(6)}s`;
        mark.style.left = `${(m.x * 100).toFixed(3)}%`;
        return mark;
      }), ...(clockMarks <= 400 ? timeMarkElements(view, bounds) : []));
    }

    // Rebuilt when what it shows changed; at most every INSPECTOR_LIVE_MS while live. A
    // run that has ended is drawn at once: held back, its last batch (the only one of a run
    // opened after it ended) would leave the panel showing the fold before it, "running".
    const key = inspectorSignature(view, s);
    const selectionKey = `${s.selected}|${s.selectedBarrier}|${pinned ? view.lastSeq : "live"}`;
    if (key !== inspectorKey) {
      const sameSelection = inspectorKey.startsWith(`${selectionKey}#`);
      const wait = INSPECTOR_LIVE_MS - (performance.now() - inspectorAt);
      if (sameSelection && wait > 0 && view.status === "running") {
        if (!inspectorTimer) inspectorTimer = window.setTimeout(() => { inspectorTimer = 0; current().touch(); }, wait);
      } else {
        inspectorKey = key;
        inspectorAt = performance.now();
        if (s.selected !== null || s.selectedBarrier !== null) {
          // Another invocation or barrier opens at its head; the same one (live, or at
          // another seq of a replay) stays where the reader scrolled it.
          const chosen = `${s.selected}|${s.selectedBarrier}`;
          renderInspector(els.inspector, { view, path: s.selected, barrier: s.selectedBarrier, open: openSections, pinned },
            chosen === inspectedSelection ? inspectorScroll : 0);
          if (chosen !== inspectedSelection && inspectorScroll) els.inspector.scrollTop = 0;
          inspectedSelection = chosen;
        }
      }
    }
    // The text a model is writing follows every frame; the rest of the panel waits.
    if (s.selected !== null && s.selectedBarrier === null) syncStreams(els.inspector, view.invocations.get(s.selected));
    critical.sync(els.inspector, els.axis);
    return true;
  };

  /** The critical path of the selected barrier (or of the selected branch's). */
  const toggleCritical = () => {
    const s = current().get();
    const inv = s.selected ? current().view().invocations.get(s.selected) : null;
    const id = s.selectedBarrier ?? (inv ? inv.barrier : null);
    if (id === null && critical.barrier === null) return;
    critical.toggle(id ?? critical.barrier);
    current().touch();
  };

  /** The view's own shortcuts, for the page's keyboard sheet. @type {import("./keys_ui.js").Shortcut[]} */
  const shortcuts = [
    { keys: ["/"], label: "Find a branch", run: () => { els.find.focus(); els.find.select(); } },
    { keys: ["j", "ArrowDown"], label: "Next row of the tree (tree focused)", run: treeKey },
    { keys: ["k", "ArrowUp"], label: "Previous row of the tree (tree focused)", run: treeKey },
    { keys: ["ArrowLeft", "ArrowRight"], label: "Collapse / expand a barrier (tree focused)", run: treeKey },
    { keys: ["+", "="], label: "Zoom the time axis in (around the selected branch's start); also Ctrl+wheel over the lanes, wheel over the axis", run: () => zoomBy(0.5, keyFocus()) },
    { keys: ["-"], label: "Zoom the time axis out", run: () => zoomBy(2, keyFocus()) },
    { keys: ["0"], label: "Show the whole run on the time axis", run: () => setZoom(null) },
    { keys: ["c"], label: "Highlight the critical path of the selected barrier's join (again: clear it)", run: toggleCritical },
    { keys: ["h", "l"], label: "Pan the zoomed time axis left / right (or drag the axis)", run: (event) => panBy(event.key === "h" ? -0.25 : 0.25) },
  ];

  return {
    render,
    shortcuts,
    selectPath,
    /** Reveal a selection that came from a link once its row exists. @param {string | null} what */
    reveal(what) {
      pendingReveal = what;
    },
  };
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
  if (s.selected === "") return `${head}${turnSignature(view)}`;
  const inv = view.invocations.get(s.selected);
  if (!inv) return `${head}none`;
  const b = inv.barrier !== null ? view.barriers.get(inv.barrier) : undefined;
  let siblings = 0;
  if (b) for (const p of b.branches) siblings += view.invocations.get(p)?.drafts.length ?? 0;
  let caller = 0;
  if (b && b.base !== "canonical") caller = view.invocations.get(b.base)?.changes.length ?? 0;
  const pub = publicationOf(view, inv.path);
  return `${head}${inv.eventCount}|${inv.changes.length}|${pub ? `${pub.state}|${pub.reason}` : ""}|${b?.outcome}|${b?.joinedSeq}|${siblings}|${caller}|${inv.interrupted}`;
}

/**
 * Branch totals of a fold (at whatever position it stopped), for a header.
 * @param {import("./fold.js").Run} run
 */
export function countBranches(run) {
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

/**
 * The header's branch line: "4 (3 ✓ · 1 ✗ · 1 running)".
 * @param {import("./fold.js").Run} run
 */
export function branchLine(run) {
  const b = countBranches(run);
  const runningLabel = run.status === "interrupted" ? "interrupted" : "running";
  const dropped = b.discarded ? ` · ${b.discarded} discarded` : "";
  return run.branchCount ? `${run.branchCount} (${b.fulfilled} ✓ · ${b.rejected} ✗${b.running ? ` · ${b.running} ${runningLabel}` : ""}${dropped})` : "0";
}
