// @ts-check
/**
 * Live batches folded a slice at a time, within a time budget per task.
 *
 * A live run's socket can deliver batches faster than one task should fold them: a wide
 * fork's pages of requests, a join's lists of every branch. Folding each message whole in
 * its `onmessage` makes one long task of it, and the page stops answering while it runs.
 * `createPump` queues the batches in order and folds them in slices of a few events,
 * giving the thread back (a new task) once a task has used its budget; an idle pump folds
 * what arrives at once, so the first rows of a run are drawn within a frame of their
 * events. No DOM: the clock and the scheduler are injected (node tests drive them).
 */

/**
 * Roughly what folding `event` costs, in events: one, and one more for each item of the
 * list it carries (a page of a wide fork's requests, of a join's inputs). Counted as one
 * event each, a slice of such pages would make an invocation for every request in them
 * before the pump looks at the clock again.
 * @param {any} event
 */
export function eventWeight(event) {
  if (event === null || typeof event !== "object") return 1; // the fold says what is wrong with it
  const list = event.requests ?? event.items ?? event.inputs;
  return Array.isArray(list) ? 1 + list.length : 1;
}

/**
 * @param {{
 *   apply: (events: any[]) => void,
 *   budget?: number,
 *   slice?: number,
 *   weight?: (event: any) => number,
 *   now?: () => number,
 *   later?: (fn: () => void) => void,
 * }} options  `apply` folds a slice (in order); `budget`: ms of folding per task; `slice`:
 *   the weight of events folded between two looks at the clock (at least one event);
 *   `weight`: an event's (`eventWeight`); `later` runs its function in a new task.
 */
export function createPump(options) {
  const { apply } = options;
  const budget = options.budget ?? 8;
  const slice = options.slice ?? 64;
  const weight = options.weight ?? eventWeight;
  const now = options.now ?? (() => Date.now());
  const later = options.later ?? ((fn) => { globalThis.setTimeout(fn, 0); });
  /** @type {(any[] | (() => void))[]} */
  const queue = [];
  let offset = 0; // events of queue[0] already folded
  let waiting = 0; // events queued and not folded yet
  let scheduled = false;
  let running = false;

  const run = () => {
    scheduled = false;
    running = true;
    const start = now();
    try {
      while (queue.length) {
        const head = queue[0];
        if (typeof head === "function") { // what waited for the batches before it
          queue.shift();
          head();
          continue;
        }
        let take = 0;
        for (let held = 0; offset + take < head.length && (take === 0 || held < slice); take += 1) {
          held += weight(head[offset + take]);
          if (held > slice && take > 0) break; // the next one waits for the next slice
        }
        const part = offset === 0 && take === head.length ? head : head.slice(offset, offset + take);
        offset += take;
        waiting -= take;
        if (offset >= head.length) {
          queue.shift();
          offset = 0;
        }
        apply(part);
        if (queue.length && now() - start >= budget) break;
      }
    } finally {
      running = false;
      if (queue.length) schedule();
    }
  };
  const schedule = () => {
    if (scheduled) return;
    scheduled = true;
    later(run);
  };

  return {
    /** Queue a batch; folded now if nothing waits, else after what came before. @param {any[]} events */
    push(events) {
      if (!events.length) return;
      queue.push(events);
      waiting += events.length;
      if (!scheduled && !running) run();
    },
    /** Run `fn` once every batch queued before it is folded (now, if none waits).
     * @param {() => void} fn */
    after(fn) {
      if (!queue.length && !running) {
        fn();
        return;
      }
      queue.push(fn);
      if (!scheduled && !running) run();
    },
    /** Drop what waits (the run's record was replaced: its events are not to be folded). */
    clear() {
      queue.length = 0;
      offset = 0;
      waiting = 0;
    },
    /** Events received and not folded yet. */
    get waiting() {
      return waiting;
    },
  };
}
