// Fan-out overview cost: barrierOverview() and orderedBranches() on one barrier of N
// branches, against a baseline measured in the same run: one bare pass over the same
// branches reading each one's status (the least any count derived from the fold costs).
//
//     node bench/overview.mjs [--n 100000] [--reps 15]
import { applyEvent, createRun } from "../static/picoflow_web/js/fold.js";
import { barrierOverview, orderedBranches } from "../static/picoflow_web/js/overview.js";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const N = arg("n", 100_000);
const REPS = arg("reps", 15);

function fanOut(n) {
  const run = createRun();
  let seq = 0;
  const add = (type, offset, fields, path = "") => applyEvent(run, { seq: seq++, offset, path, type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", 0, { flow: "Wide", message: "go" });
  add("session.loaded", 0, { steps: {}, current_step: "Top", tokens: {} });
  add("barrier.forked", 0, {
    barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    requests: Array.from({ length: n }, (_, i) => ({ index: i, path: String(i), step: "Tick", key: `t${i}`, params: {} })),
  });
  for (let i = 0; i < n; i += 1) add("branch.started", i * 1e-5, { barrier: "b0", index: i }, String(i));
  for (let i = 0; i < n; i += 1) {
    const t = n * 1e-5 + i * 1e-5;
    if (i % 50 === 7) add("branch.rejected", t, { barrier: "b0", index: i, error: { type: "E" }, cancelled: false }, String(i));
    else add("branch.fulfilled", t, { barrier: "b0", index: i, output: i }, String(i));
  }
  const discarded = [];
  for (let i = 7; i < n; i += 50) discarded.push({ index: i, key: `t${i}`, reason: "rejected" });
  add("join.published", 3 * n * 1e-5, { barrier: "b0", target: "canonical", fields: [], discarded, reductions: [] });
  return run;
}

const run = fanOut(N);
const barrier = run.barriers.get("b0");
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const time = (fn) => { const t = performance.now(); fn(); return performance.now() - t; };
const baseline = () => {
  let n = 0;
  for (const p of barrier.branches) if (run.invocations.get(p).status === "fulfilled") n += 1;
  return n;
};
const rows = { baseline: [], overview: [], "overview (publication cached)": [], "slowest order": [], cached: [] };
for (let r = 0; r < REPS; r += 1) {
  // A new version each round, as a live event would make, so nothing is cached.
  run.version += 1;
  rows.baseline.push(time(baseline));
  rows.overview.push(time(() => barrierOverview(run, "b0")));
  run.version += 1;
  barrierOverview(run, "b0", { slowest: 1 });  // fills the per-version publication cache
  rows["overview (publication cached)"].push(time(() => barrierOverview(run, "b0")));
  rows["slowest order"].push(time(() => orderedBranches(run, "b0", "slowest")));
  rows.cached.push(time(() => barrierOverview(run, "b0")));
}
const base = median(rows.baseline);
console.log(`${N.toLocaleString("en-US")} branches, median of ${REPS}`);
for (const [name, xs] of Object.entries(rows)) {
  const m = median(xs);
  console.log(`${name.padEnd(32)} ${m.toFixed(2).padStart(8)} ms   ${(m / base).toFixed(1).padStart(6)}x baseline`);
}
