// The fan-out overview: counts by step, status and publication, the duration histogram,
// the slowest and failed branches and the table orders, checked against what the raw
// events say (not against the fold's own counters), on generated fan-outs and the goldens.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvent, barrierPublicationOf, createRun, fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { barrierOverview, durationOf, orderedBranches, pageOf } from "../../static/picoflow_web/js/overview.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");

/**
 * One barrier of `n` branches over two steps; branch i starts at i ms and runs for a
 * duration drawn from a seeded generator; every 9th is rejected; the join (when `join`)
 * discards the rejected ones. Returns the events.
 */
function fanOut(n, { join = true, seed = 7, finish = n, durations = null, page = 0 } = {}) {
  let x = seed;
  const random = () => { x = (x * 48271) % 2147483647; return x / 2147483647; };
  const events = [];
  let seq = 0;
  const add = (type, offset, fields, path = "") => events.push({ seq: seq++, offset, path, type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", 0, { flow: "Wide", message: "go" });
  add("session.loaded", 0, { steps: {}, current_step: "Top", tokens: {} });
  const step = (i) => (i % 3 === 0 ? "Fetch" : "Rank");
  const requests = Array.from({ length: n }, (_, i) => ({ index: i, path: String(i), step: step(i), key: `k${i}`, params: {} }));
  // With `page`, a wide fork as the runtime records it: its first page and the count, then
  // barrier.requested pages.
  add("barrier.forked", 0, {
    barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    requests: page ? requests.slice(0, page) : requests, ...(page && n > page ? { count: n } : {}),
  });
  for (let first = page; page && first < n; first += page) {
    add("barrier.requested", 0, { barrier: "b0", first, requests: requests.slice(first, first + page) });
  }
  const ends = [];
  for (let i = 0; i < n; i += 1) {
    add("branch.started", i / 1000, { barrier: "b0", index: i, key: `k${i}`, step: step(i) }, String(i));
    ends.push({ i, at: i / 1000 + (durations ? durations[i] : random()) });
  }
  ends.sort((a, b) => a.at - b.at);
  let last = n / 1000;
  for (const { i, at } of ends.slice(0, finish)) {
    // Offsets are monotonic in seq order, as the runtime's are.
    last = Math.max(last, at);
    if (i % 9 === 4) add("branch.rejected", last, { barrier: "b0", index: i, key: `k${i}`, error: { type: "ValueError", message: "no" }, cancelled: false }, String(i));
    else add("branch.fulfilled", last, { barrier: "b0", index: i, key: `k${i}`, output: i }, String(i));
  }
  if (join && finish === n) {
    const discarded = [];
    for (let i = 0; i < n; i += 1) if (i % 9 === 4) discarded.push({ index: i, key: `k${i}`, reason: "rejected" });
    add("join.published", last + 0.01, {
      barrier: "b0", target: "canonical",
      fields: [{ step: "Fetch", field: "seen", value: 1, writer: "0", deleted: false }], discarded, reductions: [],
    });
  }
  return events;
}

/** What the raw events say of one barrier's branches. */
function oracle(events, barrier) {
  const fork = events.find((e) => e.type === "barrier.forked" && e.barrier === barrier);
  const byPath = new Map(fork.requests.map((r) => [r.path, { step: r.step, status: "queued", started: null, finished: null }]));
  for (const e of events) {
    const b = byPath.get(e.path);
    if (!b) continue;
    if (e.type === "branch.started") { b.status = "running"; b.started = e.offset; }
    if (e.type === "branch.fulfilled" || e.type === "branch.rejected") {
      b.status = e.type === "branch.fulfilled" ? "fulfilled" : "rejected";
      b.finished = e.offset;
    }
  }
  return byPath;
}

test("counts by step and status are the events' counts", () => {
  const events = fanOut(500);
  const run = fold(events);
  const o = barrierOverview(run, "b0");
  const truth = oracle(events, "b0");
  assert.equal(o.total, 500);
  assert.deepStrictEqual(o.groups.map((g) => g.step), ["Fetch", "Rank"]);
  for (const group of o.groups) {
    const mine = [...truth.values()].filter((b) => b.step === group.step);
    assert.equal(group.total, mine.length);
    for (const status of ["queued", "running", "fulfilled", "rejected"]) {
      assert.equal(group.status[status], mine.filter((b) => b.status === status).length, `${group.step} ${status}`);
    }
  }
  assert.equal(o.status.rejected, [...truth.values()].filter((b) => b.status === "rejected").length);
  assert.ok(o.status.rejected > 0 && o.status.fulfilled > 0);
});

test("publication counts: rejected branches are discarded, the rest kept; pending before the join", () => {
  const done = fold(fanOut(200));
  const o = barrierOverview(done, "b0");
  assert.deepStrictEqual(o.publication, { ...barrierPublicationOf(done, "b0").counts });
  assert.equal(o.publication.discarded, o.status.rejected);
  assert.equal(o.publication.published, 1);  // only branch 0 wrote a published field
  assert.equal(o.publication.nothing, 200 - o.status.rejected - 1);
  const open = fold(fanOut(200, { join: false }));
  assert.equal(barrierOverview(open, "b0").publication.pending, 200);
});

test("the slowest are the greatest durations of the events, longest first", () => {
  const events = fanOut(1000);
  const o = barrierOverview(fold(events), "b0", { slowest: 5 });
  const durations = [...oracle(events, "b0").entries()].map(([path, b]) => ({ path, d: b.finished - b.started }))
    .sort((a, b) => b.d - a.d);
  assert.deepStrictEqual(o.slowest.map((s) => s.path), durations.slice(0, 5).map((x) => x.path));
  assert.equal(o.slowest[0].duration, durations[0].d);
});

test("failed lists rejected branches in request order, capped, with the full total", () => {
  const o = barrierOverview(fold(fanOut(1000)), "b0", { failed: 3 });
  assert.equal(o.failedTotal, 111);  // i % 9 === 4 for i < 1000
  assert.deepStrictEqual(o.failed.map((f) => f.path), ["4", "13", "22"]);
  assert.ok(o.failed.every((f) => f.status === "rejected"));
});

test("the histogram holds every measured branch once, in the bin of its duration", () => {
  const events = fanOut(777);
  const o = barrierOverview(fold(events), "b0", { bins: 10 });
  const h = o.histogram;
  assert.equal(h.bins.length, 10);
  assert.equal(h.measured, 777);
  assert.equal(h.bins.reduce((n, b) => n + b.count, 0), 777);
  const ds = [...oracle(events, "b0").values()].map((b) => b.finished - b.started);
  assert.equal(h.min, Math.min(...ds));
  assert.equal(h.max, Math.max(...ds));
  for (const bin of h.bins) {
    const inside = ds.filter((d) => d >= bin.t0 && (bin === h.bins.at(-1) ? d <= bin.t1 : d < bin.t1)).length;
    assert.equal(bin.count, inside, `bin ${bin.t0}..${bin.t1}`);
  }
});

test("skewed durations get equal-ratio bins, each holding what its edges say", () => {
  // Branch i starts at i ms and runs about ds[i] (no branch ends before the last start).
  const ds = [0, 0.001, 0.002, 0.004, 0.01, 0.05, 0.2, 1, 4, 10];
  const run = fold(fanOut(10, { durations: ds }));
  const h = barrierOverview(run, "b0", { bins: 8 }).histogram;
  assert.equal(h.scale, "log");
  assert.equal(h.bins.length, 8);
  assert.equal(h.bins[0].t0, h.min);
  for (let i = 2; i < 8; i += 1) {
    assert.ok(Math.abs(h.bins[i].t0 / h.bins[i - 1].t0 - h.bins[2].t0 / h.bins[1].t0) < 1e-9, "equal ratios");
  }
  const got = h.bins.map((b) => b.count);
  const measured = run.barriers.get("b0").branches.map((p) => durationOf(run.invocations.get(p)));
  const want = h.bins.map((b, i) => measured.filter((d) => d >= b.t0 && (i === 7 ? d <= b.t1 : d < b.t1)).length);
  assert.deepStrictEqual(got, want);
  assert.ok(got.filter((c) => c > 0).length >= 5, `spread over the bins: ${got}`);
  const even = fold(fanOut(10, { durations: ds.map((_, i) => 1 + i / 10) }));
  assert.equal(barrierOverview(even, "b0").histogram.scale, "linear");
});

test("branches still running are counted but not measured", () => {
  const o = barrierOverview(fold(fanOut(300, { finish: 120 })), "b0");
  assert.equal(o.status.running, 180);
  assert.equal(o.histogram.measured, 120);
  assert.ok(o.slowest.every((s) => s.status !== "running"));
});

test("a new event gives a new overview; the same version gives the cached one", () => {
  const events = fanOut(100);
  const run = createRun();
  const cut = events.findIndex((e) => e.type === "join.published");
  for (const e of events.slice(0, cut)) applyEvent(run, e);
  const before = barrierOverview(run, "b0");
  assert.equal(barrierOverview(run, "b0"), before);
  applyEvent(run, events[cut]);
  const after = barrierOverview(run, "b0");
  assert.notEqual(after, before);
  assert.equal(before.publication.pending, 100);
  assert.equal(after.publication.pending, 0);
});

test("kept up to date event by event, it says what a fresh fold of the same events says", () => {
  // Ties in duration (every branch runs 0, 1 or 2 ms) test the request-order tie-break.
  const events = fanOut(120, { durations: Array.from({ length: 120 }, (_, i) => (i % 3) / 1000 + 0.2) });
  const live = createRun();
  const strip = (o) => JSON.parse(JSON.stringify(o));
  for (let i = 0; i < events.length; i += 1) {
    applyEvent(live, events[i]);
    if (i % 7 && i !== events.length - 1) continue;
    const fresh = barrierOverview(fold(events, events[i].seq), "b0", { slowest: 4, failed: 3 });
    assert.deepStrictEqual(strip(barrierOverview(live, "b0", { slowest: 4, failed: 3 })), strip(fresh), `after #${events[i].seq}`);
  }
});

test("a fork in pages, looked at between its pages, counts every branch its pages bring", () => {
  const events = fanOut(120, { page: 50, durations: Array.from({ length: 120 }, (_, i) => (i % 3) / 1000 + 0.2) });
  assert.deepStrictEqual(events.filter((e) => e.type === "barrier.requested").map((e) => e.first), [50, 100]);
  const live = createRun();
  const strip = (o) => JSON.parse(JSON.stringify(o));
  for (let i = 0; i < events.length; i += 1) {
    applyEvent(live, events[i]);
    const seen = strip(barrierOverview(live, "b0", { slowest: 4, failed: 3 }));
    if (i % 5 && i > 8 && i !== events.length - 1) continue;
    const fresh = barrierOverview(fold(events, events[i].seq), "b0", { slowest: 4, failed: 3 });
    assert.deepStrictEqual(seen, strip(fresh), `after #${events[i].seq}`);
  }
  const whole = fanOut(120, { durations: Array.from({ length: 120 }, (_, i) => (i % 3) / 1000 + 0.2) });
  assert.deepStrictEqual(strip(barrierOverview(live, "b0", { slowest: 4, failed: 3 })),
    strip(barrierOverview(fold(whole), "b0", { slowest: 4, failed: 3 })));
});

test("table orders: slowest first, last to finish first, request order", () => {
  const events = fanOut(400, { finish: 350 });
  const run = fold(events);
  const truth = oracle(events, "b0");
  const slow = orderedBranches(run, "b0", "slowest");
  assert.equal(slow.length, 400);
  const d = (p) => { const b = truth.get(p); return b.finished === null ? -Infinity : b.finished - b.started; };
  for (let i = 1; i < slow.length; i += 1) assert.ok(d(slow[i - 1]) >= d(slow[i]), `${slow[i - 1]} before ${slow[i]}`);
  // The unfinished come last, in request order.
  const tail = slow.slice(350);
  assert.deepStrictEqual(tail, [...tail].sort((a, b) => Number(a) - Number(b)));
  const last = orderedBranches(run, "b0", "finished");
  const f = (p) => truth.get(p).finished ?? -Infinity;
  for (let i = 1; i < last.length; i += 1) assert.ok(f(last[i - 1]) >= f(last[i]));
  assert.deepStrictEqual(orderedBranches(run, "b0", "request"), run.barriers.get("b0").branches);
  assert.deepStrictEqual(orderedBranches(run, "nope", "slowest"), []);
});

test("pages are clamped into range", () => {
  assert.deepStrictEqual(pageOf(10_000, 0, 100), { page: 0, pages: 100, start: 0, end: 100 });
  assert.deepStrictEqual(pageOf(10_000, 99, 100), { page: 99, pages: 100, start: 9900, end: 10_000 });
  assert.deepStrictEqual(pageOf(10_000, 500, 100).page, 99);
  assert.deepStrictEqual(pageOf(250, 2, 100), { page: 2, pages: 3, start: 200, end: 250 });
  assert.deepStrictEqual(pageOf(0, 3, 100), { page: 0, pages: 1, start: 0, end: 0 });
  assert.deepStrictEqual(pageOf(50, -1, 100), { page: 0, pages: 1, start: 0, end: 50 });
});

test("on every golden barrier the overview agrees with the barrier's counts and publication", () => {
  let barriers = 0;
  for (const name of readdirSync(GOLDEN).filter((f) => f.endsWith(".jsonl")).sort()) {
    for (const events of runsOf(parseJsonl(readFileSync(join(GOLDEN, name), "utf8"))).values()) {
      const run = fold(events);
      for (const [id, barrier] of run.barriers) {
        barriers += 1;
        const o = barrierOverview(run, id);
        assert.deepStrictEqual(o.status, { ...barrier.counts }, `${name} ${id}`);
        assert.deepStrictEqual(o.publication, { ...barrierPublicationOf(run, id).counts }, `${name} ${id}`);
        assert.equal(o.groups.reduce((n, g) => n + g.total, 0), barrier.branches.length);
      }
    }
  }
  assert.ok(barriers > 5);
});
