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
    if (typeof event.run_id === "string") event.run_id = shared(event.run_id, seen);
    if (typeof event.session_id === "string") event.session_id = shared(event.session_id, seen);
    if (typeof event.type === "string") event.type = shared(event.type, seen);
    if (typeof event.channel === "string") event.channel = shared(event.channel, seen);
  }
}

/** The one copy of `text` the table keeps (`text` itself, the first time).
 * @param {string} text @param {Map<string, string>} seen */
function shared(text, seen) {
  const first = seen.get(text);
  if (first !== undefined) return first;
  seen.set(text, text);
  return text;
}
