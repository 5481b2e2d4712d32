// @ts-check
/**
 * Events as they arrive from files and the API: JSON Lines parsed, a mixed list grouped by
 * run. Pure (no DOM); `fold.js` re-exports it.
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
