// @ts-check
/**
 * A session's turns on one time axis. Pure (no DOM): node imports it for the tests.
 *
 * Every event of every turn is one position: turn 1's seqs 0..n1-1, then turn 2's, and so
 * on, so one scrubber walks the whole session and "the previous position" of a turn's
 * first event is the end of the turn before. Positions that matter while debugging (a
 * fork, a join, a conflict, an error, a cancellation, an interruption) are indexed by
 * kind, straight from the recorded event types, for jump-to-next/previous.
 */

/** Event types per kind of mark; one event can be more than one kind (a conflict is a join). */
export const MARK_KINDS = /** @type {const} */ (["fork", "join", "conflict", "error", "cancellation", "interruption"]);

/**
 * The kinds of mark an event is.
 * @param {any} event @returns {string[]}
 */
export function markKinds(event) {
  switch (event && event.type) {
    case "barrier.forked": return ["fork"];
    case "join.published": return ["join"];
    case "join.invalidated": return ["join", "conflict"];
    case "checkpoint.failed": return ["conflict"];
    case "turn.failed":
    case "model.failed": return ["error"];
    case "branch.rejected": return event.cancelled ? ["cancellation"] : ["error"];
    case "tool.finished": return event.status && event.status !== "success" ? ["error"] : [];
    case "cancel.requested":
    case "turn.cancelled": return ["cancellation"];
    case "run.interrupted": return ["interruption"];
    default: return [];
  }
}

/**
 * @typedef {{runId: string, events: any[]}} Turn
 * @typedef {{turn: number, seq: number}} Position
 */

/**
 * The axis of `turns` (in turn order; each turn's events in seq order, from seq 0).
 * @param {Turn[]} turns
 */
export function createTimeline(turns) {
  /** @type {number[]} first global position of each turn */
  const starts = [];
  /** @type {number[]} */
  const lengths = [];
  /** @type {Record<string, number[]>} */
  const marks = Object.fromEntries(MARK_KINDS.map((k) => [k, []]));
  let total = 0;
  turns.forEach((turn) => {
    starts.push(total);
    const events = turn.events || [];
    const length = events.length ? events[events.length - 1].seq + 1 : 0;
    lengths.push(length);
    for (const event of events) {
      for (const kind of markKinds(event)) marks[kind].push(total + event.seq);
    }
    total += length;
  });
  return {
    total,
    starts,
    lengths,
    marks,
    /** @param {number} g @returns {Position} */
    positionAt(g) {
      const at = Math.max(0, Math.min(total - 1, g));
      // The last non-empty turn starting at or before `at` (empty turns own no position).
      let lo = Math.max(0, lengths.findIndex((n) => n > 0));
      for (let t = lo; t < starts.length; t += 1) {
        if (starts[t] > at) break;
        if (lengths[t] > 0) lo = t;
      }
      return { turn: lo, seq: Math.max(0, at - starts[lo]) };
    },
    /** @param {number} turn @param {number} seq */
    globalOf(turn, seq) {
      const t = Math.max(0, Math.min(starts.length - 1, turn));
      return starts[t] + Math.max(0, Math.min(lengths[t] - 1, seq));
    },
    /** The last position of a turn. @param {number} turn */
    endOf(turn) {
      return starts[turn] + Math.max(0, lengths[turn] - 1);
    },
  };
}

/** @typedef {ReturnType<typeof createTimeline>} Timeline */

/**
 * The nearest mark of `kind` strictly after (`dir` 1) or before (`dir` -1) position `g`.
 * @param {Timeline} timeline @param {string} kind @param {number} g @param {1 | -1} dir
 * @returns {number | null}
 */
export function nearestMark(timeline, kind, g, dir) {
  const list = timeline.marks[kind] || [];
  if (dir > 0) {
    for (const m of list) if (m > g) return m;
    return null;
  }
  for (let i = list.length - 1; i >= 0; i -= 1) if (list[i] < g) return list[i];
  return null;
}

/**
 * The start of the turn after (`dir` 1) or before (`dir` -1) the one `g` is in; going back
 * from inside a turn lands on its own start first, as a media player's "previous" does.
 * @param {Timeline} timeline @param {number} g @param {1 | -1} dir @returns {number | null}
 */
export function nearestTurn(timeline, g, dir) {
  const { turn } = timeline.positionAt(g);
  if (dir > 0) {
    for (let t = turn + 1; t < timeline.starts.length; t += 1) if (timeline.lengths[t] > 0) return timeline.starts[t];
    return null;
  }
  if (g > timeline.starts[turn]) return timeline.starts[turn];
  for (let t = turn - 1; t >= 0; t -= 1) if (timeline.lengths[t] > 0) return timeline.starts[t];
  return null;
}

/**
 * The canonical state a position stands for. Before a turn's `session.loaded` its fold
 * has no state yet, but the session does: the state the turn before ended with.
 * @param {{state: any, events: any[]}} view  the turn's fold at the position
 * @param {any} carried  the previous turn's final state ({} for the first turn)
 */
export function stateAtPosition(view, carried) {
  return view.events.some((e) => e.type === "session.loaded") ? view.state : carried;
}

/**
 * The session revision at a position: the last `session.loaded` / `session.saved` up to it.
 * @param {any[]} events  the turn's applied events @returns {number | null}
 */
export function revisionOf(events) {
  for (let i = events.length - 1; i >= 0; i -= 1) {
    const e = events[i];
    if ((e.type === "session.saved" || e.type === "session.loaded") && typeof e.revision === "number") return e.revision;
  }
  return null;
}

/**
 * A diff mark (A or B) in the page's address: `<turn>.<seq>`, the turn counted from 1, so a
 * reload or a shared link keeps the marks. Seqs, not positions: a turn still growing live
 * moves no earlier position.
 * @param {{positionAt: (g: number) => Position}} timeline @param {number} g @returns {string}
 */
export function formatMark(timeline, g) {
  const p = timeline.positionAt(g);
  return `${p.turn + 1}.${p.seq}`;
}

/**
 * A diff mark back from the address; null for text of another shape or a turn the session
 * does not have (a seq past its turn's end reads as that end).
 * @param {{globalOf: (turn: number, seq: number) => number, lengths: number[]}} timeline
 * @param {string | null} text @returns {number | null}
 */
export function parseMark(timeline, text) {
  const found = text ? /^(\d+)\.(\d+)$/.exec(text) : null;
  if (!found) return null;
  const turn = Number(found[1]) - 1;
  if (turn < 0 || turn >= timeline.lengths.length || !timeline.lengths[turn]) return null;
  return timeline.globalOf(turn, Math.min(Number(found[2]), timeline.lengths[turn] - 1));
}

/**
 * What the session facts of "What changed" mean where their name alone misleads.
 * `conversation` is no stored conversation: the events carry none, only each model call's
 * request, which is one step's memory (runtime/runner.py `build_request`).
 */
export const SESSION_FACT_NOTES = Object.freeze({
  conversation: "messages the latest model call up to here was sent: the history of that step's memory namespace "
    + "(each step keeps its own; a branch calls with a private copy), not one session-wide conversation, "
    + "so the count falls when a step with a shorter history calls the model",
});

/**
 * How long the conversation was that the last model call up to a position was sent (its
 * request's message count), or null before any call. A chat turn that changes no step
 * field still grows this, so a diff between two turns has something true to say.
 * @param {any[]} events  the turn's applied events @returns {number | null}
 */
export function conversationOf(events) {
  for (let i = events.length - 1; i >= 0; i -= 1) {
    const e = events[i];
    if (e.type === "model.started" && Array.isArray(e.messages)) return e.messages.length;
  }
  return null;
}
