// @ts-check
/**
 * The replay cursor: one fold that moves to any seq of a run, forward by applying events
 * and back by undoing them, so a scrubber step costs the events stepped over, not a fold
 * from event 0. Pure (no DOM).
 *
 * While it folds, `applyEventUndoable` writes how to undo each event onto a flat log:
 * records of `(target, key, old..., kind)` with the kind last, so the log is read from its
 * end; `marks[i]` is where the log stood before the i-th undoable event. Undoing an event
 * restores, newest first, what it changed: a property's value, an array's length (the
 * fold's arrays only ever grow), a map entry, an own field (present or absent), and the
 * run's seq, version, events, end offset and anomalies. Event values are shared with the
 * live fold, never copied.
 *
 * Only the last `window` events (10,000 by default) stay undoable, so the log's memory is
 * bounded however long the run: a jump back past them folds afresh from event 0, as does
 * a jump back longer than the way from event 0. A move never costs more than a fresh fold.
 */

import { applyEvent, applyEventUndoable } from "./apply.js";
import { UNDO } from "./log.js";
import { createRun } from "./model.js";

/** @typedef {import("./model.js").Run} Run */

/**
 * A cursor over `source` (the live fold, whose `events` only grow; read, never changed).
 * @param {{events: any[]}} source @param {{window?: number}} [options]
 */
export function createCursor(source, options = {}) {
  const window = Math.max(1, options.window ?? 10_000);
  let run = createRun();
  /** @type {any[]} */
  let log = [];
  /** @type {number[]} */
  let marks = [];
  /** How many of `source.events` this fold has applied. */
  let applied = 0;
  /** The first applied event that can be undone (the ones before it were not logged). */
  let floor = 0;
  /** Fresh folds so far (tests read it: a step must not refold). */
  let folds = 0;

  const reset = () => {
    run = createRun();
    log = [];
    marks = [];
    applied = 0;
    floor = 0;
    folds += 1;
  };

  const forward = (/** @type {number} */ target) => {
    const events = source.events;
    const stop = Math.max(applied, target - window);
    if (applied < stop) {
      // Events folded without a log cannot be undone, nor can anything before them.
      log = [];
      marks = [];
      for (; applied < stop; applied += 1) applyEvent(run, events[applied]);
      floor = applied;
    }
    for (; applied < target; applied += 1) {
      marks.push(log.length);
      applyEventUndoable(run, events[applied], log);
    }
    if (marks.length > 2 * window) {
      // Forget the oldest undo records: the log keeps at most two windows.
      const cut = marks.length - window;
      const base = marks[cut];
      log.splice(0, base);
      marks = marks.slice(cut).map((m) => m - base);
      floor += cut;
    }
  };

  const back = (/** @type {number} */ target) => {
    for (; applied > target; applied -= 1) undoTo(log, /** @type {number} */ (marks.pop()));
  };

  return {
    /**
     * The fold of every event up to and including `seq` (the same object, moved).
     * @param {number} seq @returns {Run}
     */
    moveTo(seq) {
      const events = source.events;
      if (applied > events.length || (applied > 0 && events[applied - 1] !== run.events[applied - 1])) {
        reset(); // the source is not the one folded so far: start again
      }
      const target = countUpTo(events, seq);
      if (target < floor || (applied > target && applied - target >= target)) reset();
      back(target);
      forward(target);
      return run;
    },
    /** The fold as it stands. */
    get run() {
      return run;
    },
    /** Events applied, how many can be undone, the log's length, and fresh folds so far. */
    get size() {
      return { applied, undoable: marks.length, log: log.length, folds };
    },
  };
}

/**
 * How many of `events` (in seq order) have a seq at or below `seq` (bisection).
 * @param {any[]} events @param {number} seq
 */
function countUpTo(events, seq) {
  let lo = 0;
  let hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (events[mid].seq <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Undo the log's records back to length `mark`, newest first.
 * @param {any[]} log @param {number} mark
 */
export function undoTo(log, mark) {
  let i = log.length;
  while (i > mark) {
    const kind = log[i - 1];
    if (kind === UNDO.PROP) {
      log[i - 4][log[i - 3]] = log[i - 2];
      i -= 4;
    } else if (kind === UNDO.LENGTH) {
      log[i - 3].length = log[i - 2];
      i -= 3;
    } else if (kind === UNDO.ENTRY || kind === UNDO.FIELD) {
      const [target, key, had, old] = [log[i - 5], log[i - 4], log[i - 3], log[i - 2]];
      if (kind === UNDO.ENTRY) {
        if (had) target.set(key, old);
        else target.delete(key);
      } else if (had) target[key] = old;
      else delete target[key];
      i -= 5;
    } else if (kind === UNDO.RUN) {
      /** @type {Run} */
      const run = log[i - 4];
      run.events.length -= 1; // one applied event, one entry, one version
      run.pathPrev.length = run.events.length;
      run.version -= 1;
      run.lastSeq = run.events.length ? run.events[run.events.length - 1].seq : -1;
      run.endOffset = log[i - 3];
      run.anomalies.length = log[i - 2];
      i -= 4;
    } else {
      throw new Error(`undo log corrupt at record ending ${i - 1}`);
    }
  }
  log.length = mark;
}
