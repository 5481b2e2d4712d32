// @ts-check
/**
 * Events as they arrive from files and the API: JSON Lines parsed, a mixed list grouped by
 * run, repeated strings shared. Pure (no DOM); `../fold.js` re-exports it.
 */

/**
 * Group a mixed event list by run id, keeping order.
 * @param {any[]} events @returns {Map<string, any[]>}
 */
export function runsOf(events) {
  const grouped = new Map();
  for (const event of events) {
    if (!grouped.has(event.run_id)) grouped.set(event.run_id, []);
    grouped.get(event.run_id).push(event);
  }
  return grouped;
}

/**
 * Parse JSON Lines text into events (blank lines skipped; errors name the line).
 * @param {string} text
 */
export function parseJsonl(text) {
  const events = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i].trim();
    if (!line) continue;
    try {
      events.push(JSON.parse(line));
    } catch (err) {
      throw new Error(`line ${i + 1}: not JSON: ${/** @type {Error} */ (err).message}`);
    }
  }
  return events;
}

/**
 * Make the strings every event repeats (`type`, a contribution's `channel`, and the run and
 * session ids of the envelope, which a live batch carries on every event) one string
 * each: a parser makes a new copy of every value, and a page keeps every event of a run;
 * each copy kept is one more object every collection moves and marks. In place; `seen` is
 * the table, kept from batch to batch. Written out per field, not looped over names: it
 * runs per event.
 * @param {any[]} events @param {Map<string, string>} seen
 */
export function shareStrings(events, seen) {
  for (const event of events) {
    const runId = event.run_id;
    if (typeof runId === "string") {
      const first = seen.get(runId);
      if (first === undefined) seen.set(runId, runId);
      else event.run_id = first;
    }
    const sessionId = event.session_id;
    if (typeof sessionId === "string") {
      const first = seen.get(sessionId);
      if (first === undefined) seen.set(sessionId, sessionId);
      else event.session_id = first;
    }
    const type = event.type;
    if (typeof type === "string") {
      const first = seen.get(type);
      if (first === undefined) seen.set(type, type);
      else event.type = first;
    }
    const channel = event.channel;
    if (typeof channel === "string") {
      const first = seen.get(channel);
      if (first === undefined) seen.set(channel, channel);
      else event.channel = first;
    }
  }
}
