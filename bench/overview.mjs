// Fan-out overview cost on one barrier of N branches, against a baseline measured in the
// same run: one bare pass over the same branches reading each one's status (the least any
// count derived from the fold costs).
//
//   first look        the overview of a barrier never looked at (a full pass)
//   live, per batch   the next look after a batch of 1,000 branch events (join still open)
//   after the join    a new version after the join (publication is asked per branch)
//   slowest order     the slowest-first order the inspector pages (one sort)
//   same version      a look at an unchanged run (a frame with nothing new)
//
//     node bench/overview.mjs [--n 100000] [--reps 9]
import { applyEvent, createRun } from "../static/picoflow_web/js/fold.js";
import { barrierOverview, orderedBranches } from "../static/picoflow_web/js/overview.js";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const N = arg("n", 100_000);
const REPS = arg("reps", 9);
const BATCH = 1000;

/** The events of a fan-out of n branches, every 50th rejected, then its join. */
function fanOutEvents(n) {
  const events = [];
  let seq = 0;
  const add = (type, offset, fields, path = "") => events.push({ seq: seq++, offset, path, type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", 0, { flow: "Wide", message: "go" });
  add("session.loaded", 0, { steps: {}, current_step: "Top", tokens: {} });
  add("barrier.forked", 0, {
    barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    requests: Array.from({ length: n }, (_, i) => ({ index: i, path: String(i), step: "Tick", key: `t${i}`, params: {} })),
  });
  for (let i = 0; i < n; i += 1) add("branch.started", i * 1e-5, { barrier: "b0", index: i }, String(i));
  for (let i = 0; i < n; i += 1) {
    const t = n * 1e-5 + ((i * 7919) % n) * 1e-5;
    if (i % 50 === 7) add("branch.rejected", t, { barrier: "b0", index: i, error: { type: "E" }, cancelled: false }, String(i));
    else add("branch.fulfilled", t, { barrier: "b0", index: i, output: i }, String(i));
  }
  const discarded = [];
  for (let i = 7; i < n; i += 50) discarded.push({ index: i, key: `t${i}`, reason: "rejected" });
  add("join.published", 3 * n * 1e-5, { barrier: "b0", target: "canonical", fields: [], discarded, reductions: [] });
  return events;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const time = (fn) => { const t = performance.now(); fn(); return performance.now() - t; };
const events = fanOutEvents(N);
const joinAt = events.length - 1;
const rows = { baseline: [], "first look": [], "live, per batch": [], "after the join": [], "slowest order": [], "same version": [] };

// Live: folded up to REPS batches before the join, looked at once, then batch by batch.
const live = createRun();
const liveUntil = joinAt - REPS * BATCH;
for (let i = 0; i < liveUntil; i += 1) applyEvent(live, events[i]);
barrierOverview(live, "b0");
for (let r = 0; r < REPS; r += 1) {
  for (let i = liveUntil + r * BATCH; i < liveUntil + (r + 1) * BATCH; i += 1) applyEvent(live, events[i]);
  rows["live, per batch"].push(time(() => barrierOverview(live, "b0")));
}
applyEvent(live, events[joinAt]);
const barrier = live.barriers.get("b0");
for (let r = 0; r < REPS; r += 1) {
  rows.baseline.push(time(() => {
    let n = 0;
    for (const p of barrier.branches) if (live.invocations.get(p).status === "fulfilled") n += 1;
    return n;
  }));
  live.version += 1;  // a new version, as an event after the join would make
  rows["after the join"].push(time(() => barrierOverview(live, "b0")));
  rows["same version"].push(time(() => barrierOverview(live, "b0")));
  rows["slowest order"].push(time(() => orderedBranches(live, "b0", "slowest")));
}
for (let r = 0; r < Math.min(REPS, 5); r += 1) {
  const fresh = createRun();
  for (const e of events) applyEvent(fresh, e);
  rows["first look"].push(time(() => barrierOverview(fresh, "b0")));
}
const base = median(rows.baseline);
console.log(`${N.toLocaleString("en-US")} branches; medians (${REPS} runs; first look ${Math.min(REPS, 5)})`);
for (const [name, xs] of Object.entries(rows)) {
  const m = median(xs);
  console.log(`${name.padEnd(18)} ${m.toFixed(2).padStart(8)} ms   ${(m / base).toFixed(2).padStart(6)}x baseline`);
}
