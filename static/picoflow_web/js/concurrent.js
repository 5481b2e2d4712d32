// @ts-check
/**
 * What the coordinator panel says: per `concurrent_steps()` call, a headline, and per
 * batch its children (status, a link to the child's run where one exists, a title that
 * says how it ended). Pure (no DOM): node tests it. Every word comes from the folded
 * `concurrent.*` events (`fold/concurrent.js`), at whatever position the fold stands.
 */

import { CHILD_FAILURES } from "./fold.js";

/** Child statuses whose request never made a run: nothing to link to. */
const NO_RUN = new Set(["queued", "refused", "unreachable"]);

/**
 * @typedef {object} ChildChip
 * @property {number} item
 * @property {string} status
 * @property {boolean} failed  ended, and not fulfilled
 * @property {string | null} href  the child's run page, when the child was started
 * @property {string} label  what the chip says: the item, and its time once it ended
 * @property {string} title
 */
/**
 * @typedef {object} BatchRow
 * @property {number} batch
 * @property {"waiting" | "running" | "done"} state
 * @property {string} label
 * @property {ChildChip[]} children
 */
/**
 * @typedef {object} CallPanel
 * @property {string} group
 * @property {string} headline
 * @property {BatchRow[]} batches
 */

/**
 * @param {import("./fold.js").Run} run @returns {CallPanel[]}
 */
export function coordinatorPanel(run) {
  return run.concurrent.map((call) => {
    const children = [...call.children.values()].sort((a, b) => a.item - b.item);
    const count = (/** @type {(s: string) => boolean} */ test) => children.filter((c) => test(c.status)).length;
    const fulfilled = count((s) => s === "fulfilled");
    const failed = count((s) => CHILD_FAILURES.includes(s));
    const running = count((s) => s === "running");
    const total = call.total;
    const seen = call.batchList.length;
    const parts = [
      `${fulfilled} of ${total} fulfilled`,
      failed ? `${failed} failed` : "",
      running ? `${running} running` : "",
    ].filter(Boolean);
    const headline = `${call.flow} × ${total} in batches of ${call.batchSize} (batch ${seen} of ${call.batches}): ${parts.join(", ")}`;
    const batches = call.batchList.map((b) => {
      const mine = children.filter((c) => c.batch === b.batch);
      const state = b.finishedSeq !== null ? "done" : mine.some((c) => c.status !== "queued") ? "running" : "waiting";
      const label = b.finishedSeq !== null
        ? `batch ${b.batch + 1}: ${b.fulfilled} fulfilled, ${b.failed} not`
        : `batch ${b.batch + 1}: running`;
      return { batch: b.batch, state: /** @type {BatchRow["state"]} */ (state), label, children: mine.map(chip) };
    });
    return { group: call.group, headline, batches };
  });
}

/** @param {import("./fold.js").ConcurrentChild} child @returns {ChildChip} */
function chip(child) {
  const failed = CHILD_FAILURES.includes(child.status);
  const bits = [`item ${child.item}: ${child.status.replace("_", " ")}`];
  if (child.duration !== null) bits.push(`${child.duration.toFixed(2)} s`);
  if (child.attempts > 1) bits.push(`${child.attempts} attempts`);
  if (child.httpStatus !== null && child.httpStatus !== 200) bits.push(`HTTP ${child.httpStatus}`);
  if (failed && child.error && typeof child.error.message === "string") bits.push(child.error.message);
  // Only a request that was sent can have made a run (on_config raising sends nothing).
  const sent = child.attempts > 0 && !NO_RUN.has(child.status);
  const href = child.runId && sent ? `/runs/${encodeURIComponent(child.runId)}/` : null;
  const label = child.duration !== null ? `#${child.item} ${child.duration.toFixed(1)} s` : `#${child.item}`;
  return { item: child.item, status: child.status, failed, href, label, title: bits.join(" · ") };
}
