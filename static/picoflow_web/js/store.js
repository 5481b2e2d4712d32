// @ts-check
/**
 * The page's one mutable state, and the render schedule. No DOM: the frame scheduler is
 * injected (requestAnimationFrame in the browser), so node tests drive it.
 *
 * - `createStore`: get / set / subscribe (speedscope's atom idea). Any number of `set`s
 *   and `touch`es between two frames cause ONE call of each subscriber, in the next frame.
 * - `createRunStore`: a store whose state holds a run model; `applyBatch(events)` folds a
 *   live batch in incrementally, `restart()` starts it over (the server replaced the
 *   run's events), and `view()` is the model the page draws: the live one, or the replay
 *   cursor's fold moved to the pinned seq (`fold/undo.js`).
 */

import { appliedOf, applyEvents, createCursor, createRun, shareStrings } from "./fold.js";

/**
 * @template S
 * @param {S} initial
 * @param {{frame?: (fn: () => void) => any}} [options]
 */
export function createStore(initial, options = {}) {
  const frame = options.frame ?? ((fn) => globalThis.requestAnimationFrame(fn));
  let state = initial;
  let scheduled = false;
  let frames = 0;
  /** @type {Set<(state: S) => void>} */
  const subscribers = new Set();

  const flush = () => {
    scheduled = false;
    frames += 1;
    for (const fn of [...subscribers]) fn(state);
  };
  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    frame(flush);
  };

  return {
    get: () => state,
    /** Merge `patch` into the state and schedule a render. @param {Partial<S>} patch */
    set(patch) {
      state = { ...state, ...patch };
      schedule();
    },
    /** Schedule a render without changing anything (the model was mutated in place). */
    touch: schedule,
    /** @param {(state: S) => void} fn @returns {() => void} */
    subscribe(fn) {
      subscribers.add(fn);
      return () => subscribers.delete(fn);
    },
    /** Render now if one is scheduled (tests, and before reading the DOM). */
    flushNow() {
      if (scheduled) flush();
    },
    /** How many renders ran so far. */
    get frames() {
      return frames;
    },
  };
}

/**
 * @typedef {object} RunState
 * @property {import("./fold.js").Run} run  the live fold of every event received
 * @property {any} summary  the run summary the server sent last
 * @property {{state: string, mode: string, retryIn?: number, reason?: string}} conn
 * @property {string | null} selected  invocation path ("" is the turn itself)
 * @property {string | null} selectedBarrier
 * @property {number | null} seq  the pinned seq (null: follow the end)
 * @property {Set<string>} collapsed
 * @property {Map<string, number>} shown
 * @property {string} query
 * @property {string} status
 * @property {{start: number, end: number} | null} zoom  the time axis window (null: the whole run)
 * @property {number} receivedAt  local ms time when the last batch arrived
 * @property {number} received  events received so far (duplicates included)
 * @property {number | null} generation  the run's generation the folded events belong to
 *   (null: not told yet); a rebuild on the server counts it
 */

/**
 * Index now what each canonical join of `events` applied (`appliedOf`), in the task that
 * folds the join: the fold leaves it to the first reader, which is the next frame's branch
 * counts, and a join of a wide fork would make that one frame long.
 * @param {import("./fold.js").Run} run @param {any[]} events
 */
function indexJoins(run, events) {
  for (const event of events) {
    if (event.type !== "join.published" || event.target !== "canonical") continue;
    const barrier = run.barriers.get(event.barrier);
    if (barrier && barrier.joinedSeq === event.seq) appliedOf(barrier);
  }
}

/**
 * @param {{frame?: (fn: () => void) => any, now?: () => number, summary?: any}} [options]
 */
export function createRunStore(options = {}) {
  const now = options.now ?? (() => Date.now());
  /** @type {RunState} */
  const initial = {
    run: createRun(),
    summary: options.summary ?? null,
    conn: { state: "connecting", mode: "ws" },
    selected: null,
    selectedBarrier: null,
    seq: null,
    collapsed: new Set(),
    shown: new Map(),
    query: "",
    status: "",
    zoom: null,
    receivedAt: now(),
    received: 0,
    generation: null,
  };
  const store = createStore(initial, options);
  /** The replay fold, moved to the pinned seq (created at the first pin). */
  let cursor = /** @type {ReturnType<typeof createCursor> | null} */ (null);
  /** The live fold the cursor reads. */
  let cursorOf = /** @type {import("./fold.js").Run | null} */ (null);
  /** One copy of each string the run's events repeat (`shareStrings`). */
  const strings = new Map();

  /**
   * Start the run over: its record was replaced on the server (a trace's run derived
   * again from its spans, `{"type": "rebuilt"}` on the socket) and its events follow
   * from seq 0. The selection, collapsed rows and zoom stay; a pinned seq goes, since it
   * named an event of the old record.
   * @param {number | null} [generation]  the new record's generation, when told
   */
  const restart = (generation = null) => {
    cursor = null;
    cursorOf = null;
    strings.clear();
    const run = createRun();
    // The page's caches key on the version: the new fold's count goes on from the old.
    run.version = store.get().run.version + 1;
    store.set({ run, seq: null, receivedAt: now(), received: 0,
      generation: generation ?? store.get().generation });
  };

  return {
    ...store,
    /**
     * Fold a batch into the live model; returns how many events were new. One render is
     * scheduled however many batches arrive before the next frame.
     * @param {any[]} events
     */
    applyBatch(events) {
      const state = store.get();
      shareStrings(events, strings);
      const applied = applyEvents(state.run, events);
      indexJoins(state.run, events);
      store.set({ receivedAt: now(), received: state.received + events.length });
      return applied;
    },
    restart,
    /**
     * Note the run's generation a summary or an events page names. Another one than the
     * folded events belong to means the run's record was replaced since: the run starts
     * over (`restart`) and true is returned; what came with that generation after the
     * page's last seq is not to be folded.
     * @param {unknown} generation
     */
    adoptGeneration(generation) {
      if (typeof generation !== "number") return false;
      const known = store.get().generation;
      if (known === generation) return false;
      if (known === null) {
        store.set({ generation });
        return false;
      }
      restart(generation);
      return true;
    },
    /**
     * The model to draw: live, or stopped at the pinned seq. A pinned view is one fold
     * moved from seq to seq (a step costs the events stepped over): it is valid until the
     * next call at another seq, so keep copies of its parts, not the parts.
     */
    view() {
      const state = store.get();
      const live = state.run;
      if (state.seq === null || state.seq >= live.lastSeq) return live;
      if (!cursor || cursorOf !== live) {
        cursor = createCursor(live);
        cursorOf = live;
      }
      return cursor.moveTo(state.seq);
    },
    /** Seconds since the run started, by the local clock since the last batch (live runs). */
    nowOffset() {
      const state = store.get();
      return state.run.endOffset + Math.max(0, (now() - state.receivedAt) / 1000);
    },
  };
}
