// The live feed (backoff, resume, fallback to polling, fatal close codes) and the store
// (one render per frame, pinned replay views), driven with fake sockets and timers.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CLOSE_BAD_REQUEST, CLOSE_FORBIDDEN, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED, backoffDelay, createFeed } from "../../static/picoflow_web/js/socket.js";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { createRunStore, createStore } from "../../static/picoflow_web/js/store.js";
import { appliedOf, fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { describeEvent, formatHash, parseHash, pretty, preview } from "../../static/picoflow_web/js/format.js";

/** Fake timers: `run()` fires the earliest pending one. */
function clock() {
  let t = 0;
  let id = 0;
  const pending = new Map();
  return {
    now: () => t,
    setTimeout: (fn, ms) => { pending.set(++id, { fn, at: t + ms }); return id; },
    clearTimeout: (i) => pending.delete(i),
    pending: () => [...pending.values()].map((p) => p.at - t),
    async run() {
      const [key, next] = [...pending.entries()].sort((a, b) => a[1].at - b[1].at)[0] || [];
      if (!next) return false;
      pending.delete(key);
      t = next.at;
      await next.fn();
      return true;
    },
  };
}

/** A fake WebSocket class that records instances; tests open/close them by hand. */
function sockets() {
  const made = [];
  class FakeSocket {
    constructor(url) { this.url = url; made.push(this); }
    open() { this.onopen?.(); }
    send(message) { this.onmessage?.({ data: JSON.stringify(message) }); }
    drop(code = 1006) { this.onclose?.({ code }); }
    close(code) { this.closed = code; }
  }
  return { FakeSocket, made };
}

test("backoff grows exponentially, is capped, and jitters within its upper half", () => {
  assert.equal(backoffDelay(0, { random: () => 0 }), 250);
  assert.equal(backoffDelay(0, { random: () => 1 }), 500);
  assert.equal(backoffDelay(3, { random: () => 1 }), 4000);
  assert.equal(backoffDelay(20, { random: () => 1 }), 15000);
  assert.equal(backoffDelay(20, { random: () => 0 }), 7500);
});

test("the feed resumes after the last seq and reports its state", async () => {
  const c = clock();
  const { FakeSocket, made } = sockets();
  let after = -1;
  const states = [];
  const got = [];
  const feed = createFeed({
    url: () => `ws://x/ws/runs/r/?after=${after}`,
    onMessage: (m) => { got.push(m); if (m.type === "events") after = m.events.at(-1).seq; },
    onState: (s, info) => states.push(`${s}:${info.mode}`),
    poll: async () => ({ messages: [] }),
    WebSocket: FakeSocket, setTimeout: c.setTimeout, clearTimeout: c.clearTimeout, now: c.now, random: () => 0.5,
  });
  feed.start();
  assert.equal(feed.state, "connecting");
  made[0].open();
  assert.equal(feed.state, "open");
  made[0].send({ type: "events", events: [{ seq: 0 }, { seq: 1 }] });
  made[0].drop();
  assert.equal(feed.state, "connecting");
  assert.deepStrictEqual(c.pending(), [375], "first retry after 250..500 ms");
  await c.run();
  assert.equal(made[1].url, "ws://x/ws/runs/r/?after=1", "resumes after the last seq");
  made[1].open();
  assert.deepStrictEqual(states, ["connecting:ws", "open:ws", "connecting:ws", "connecting:ws", "open:ws"]);
  assert.equal(got.length, 1);
});

test("repeated socket failures fall back to polling, and a later socket takes over", async () => {
  const c = clock();
  const { FakeSocket, made } = sockets();
  let polls = 0;
  const got = [];
  const feed = createFeed({
    url: () => "ws://x/",
    onMessage: (m) => got.push(m),
    poll: async () => { polls += 1; return { messages: [{ type: "events", events: [{ seq: polls }] }] }; },
    WebSocket: FakeSocket, setTimeout: c.setTimeout, clearTimeout: c.clearTimeout, now: c.now, random: () => 0,
    maxFailures: 3, pollInterval: 1000, socketRetry: 30000,
  });
  feed.start();
  made[0].drop();
  await c.run();
  made[1].drop();
  await c.run();
  made[2].drop();
  assert.equal(feed.mode, "polling");
  await new Promise((r) => setImmediate(r));
  assert.equal(feed.state, "open", "polling answers count as open");
  assert.equal(polls, 1);
  await c.run();
  await new Promise((r) => setImmediate(r));
  assert.equal(polls, 2);
  assert.equal(got.length, 2);
  // After socketRetry a socket is tried again; once it opens, polling stops.
  while (made.length === 3) await c.run();
  made[3].open();
  assert.equal(feed.mode, "ws");
  const before = polls;
  for (let i = 0; i < 5 && (await c.run()); i += 1);
  assert.equal(polls, before, "no polls once the socket is open");
});

test("a bad request, not logged in, a refused origin or an unknown run closes the feed for good", () => {
  for (const code of [CLOSE_BAD_REQUEST, CLOSE_UNAUTHENTICATED, CLOSE_FORBIDDEN, CLOSE_NOT_FOUND]) {
    const c = clock();
    const { FakeSocket, made } = sockets();
    const feed = createFeed({ url: () => "ws://x/", onMessage() {}, poll: async () => ({ messages: [] }), WebSocket: FakeSocket, setTimeout: c.setTimeout, clearTimeout: c.clearTimeout });
    feed.start();
    made[0].drop(code);
    assert.equal(feed.state, "closed");
    assert.deepStrictEqual(c.pending(), [], "no retry");
  }
});

test("a poll that says done stops polling", async () => {
  const c = clock();
  const feed = createFeed({
    url: () => null, onMessage() {}, poll: async () => ({ messages: [], done: true }),
    setTimeout: c.setTimeout, clearTimeout: c.clearTimeout,
  });
  feed.start();
  await new Promise((r) => setImmediate(r));
  assert.equal(feed.mode, "done");
  assert.equal(feed.state, "open");
  assert.deepStrictEqual(c.pending(), []);
});

test("the store renders once per frame however many updates arrive", () => {
  const frames = [];
  const store = createStore({ n: 0 }, { frame: (fn) => frames.push(fn) });
  const seen = [];
  store.subscribe((s) => seen.push(s.n));
  for (let i = 1; i <= 100; i += 1) store.set({ n: i });
  store.touch();
  assert.equal(frames.length, 1);
  frames.shift()();
  assert.deepStrictEqual(seen, [100]);
  store.touch();
  assert.equal(frames.length, 1);
});

test("the run store applies batches incrementally and pins replay views", () => {
  const frames = [];
  const store = createRunStore({ frame: (fn) => frames.push(fn), now: () => 0 });
  const ev = (seq, type, fields = {}, path = "") => ({ seq, offset: seq, path, type, run_id: "r", session_id: "s", ...fields });
  const events = [
    ev(0, "turn.started", { flow: "F", message: "m" }),
    ev(1, "session.loaded", { steps: {}, current_step: "A", tokens: {} }),
    ev(2, "state.replaced", { step: "A", field: "x", value: 1, draft: false }),
    ev(3, "state.replaced", { step: "A", field: "x", value: 2, draft: false }),
  ];
  assert.equal(store.applyBatch(events.slice(0, 3)), 3);
  assert.equal(store.applyBatch(events.slice(1)), 1, "overlap is ignored");
  assert.equal(frames.length, 1);
  assert.deepStrictEqual(store.view().state, { A: { x: 2 } });
  store.set({ seq: 2 });
  const pinned = store.view();
  assert.deepStrictEqual(pinned.state, { A: { x: 1 } });
  assert.equal(store.view(), pinned, "cached while the seq stays");
  // A step moves the same replay fold (undo, not a fold from event 0) to the right state.
  store.set({ seq: 1 });
  assert.equal(store.view(), pinned, "one replay fold, moved");
  assert.deepStrictEqual(store.view().state, {});
  assert.equal(store.view().lastSeq, 1);
  store.set({ seq: 2 });
  assert.deepStrictEqual(store.view().state, { A: { x: 1 } });
  store.set({ seq: null });
  assert.equal(store.view(), store.get().run);
  assert.deepStrictEqual(store.view().state, { A: { x: 2 } }, "the live fold is untouched");
});

test("the live store indexes what a canonical join applied in the batch that folds it", () => {
  const golden = join(dirname(fileURLToPath(import.meta.url)), "..", "golden", "paged_fork.jsonl");
  const events = parseJsonl(readFileSync(golden, "utf8"));
  const joins = events.filter((e) => e.type === "join.published" && e.target === "canonical");
  assert.ok(joins.length > 0, "the golden has a canonical join");
  const store = createRunStore({ frame: () => {}, now: () => 0 });
  const lazy = fold(events); // the fold alone leaves the index to its first reader
  for (const e of joins) assert.equal(lazy.barriers.get(e.barrier).applied, null);
  for (let at = 0; at < events.length; at += 7) {
    store.applyBatch(events.slice(at, at + 7));
    for (const e of joins) {
      const barrier = store.get().run.barriers.get(e.barrier);
      if (e.seq >= at + 7) continue;
      assert.notEqual(barrier.applied, null, `indexed with the batch holding seq ${e.seq}`);
    }
  }
  for (const e of joins) {
    const live = store.get().run.barriers.get(e.barrier);
    const fresh = appliedOf(lazy.barriers.get(e.barrier));
    for (const path of live.branches) assert.deepStrictEqual(live.applied.get(path), fresh.get(path), path);
  }
});

test("a restarted run store folds the run anew from seq 0, keeping the selection", () => {
  const store = createRunStore({ frame: () => {}, now: () => 0 });
  const ev = (seq, type, fields = {}, path = "") => ({ seq, offset: seq, path, type, run_id: "r", session_id: "s", ...fields });
  store.applyBatch([ev(0, "turn.started", { flow: "OpenTelemetry:a", message: null }), ev(1, "step.entered", { step: "orphan", level: 1, how: "start" })]);
  store.set({ selected: "", seq: 0 });
  assert.equal(store.view().lastSeq, 0);
  const version = store.get().run.version;
  store.restart();
  assert.ok(store.get().run.version > version, "what the page keyed on the old fold's version is redrawn");
  assert.equal(store.get().run.lastSeq, -1);
  assert.equal(store.get().seq, null, "a pinned seq named an event of the old record");
  assert.equal(store.get().selected, "");
  // The rebuilt record: seq 0 and 1 again, with other content; nothing of the old one stays.
  assert.equal(store.applyBatch([ev(0, "turn.started", { flow: "OpenTelemetry:a", message: "hi" }), ev(1, "step.entered", { step: "root", level: 1, how: "start" })]), 2);
  const run = store.view();
  assert.equal(run.message, "hi");
  assert.deepStrictEqual(run.trail.map((t) => t.step), ["root"]);
  assert.equal(run.events.length, 2);
});

test("a run store restarts when a summary or a page names another generation than it folded", () => {
  const store = createRunStore({ frame: () => {}, now: () => 0 });
  const ev = (seq, type, fields = {}) => ({ seq, offset: seq, path: "", type, run_id: "r", session_id: "s", ...fields });
  assert.equal(store.adoptGeneration(0), false, "the first generation told is the folded one's");
  store.applyBatch([ev(0, "turn.started", { flow: "OpenTelemetry:a", message: null }), ev(1, "step.entered", { step: "a", level: 1, how: "start" })]);
  // A hello of the same generation: the page holds that record and goes on.
  assert.equal(store.adoptGeneration(0), false);
  assert.equal(store.adoptGeneration(undefined), false, "a server that does not say changes nothing");
  assert.equal(store.get().run.lastSeq, 1);
  // Another one: the record was replaced while the page was not listening.
  assert.equal(store.adoptGeneration(1), true);
  assert.equal(store.get().run.lastSeq, -1);
  assert.equal(store.get().generation, 1);
  assert.equal(store.adoptGeneration(1), false);
  // A rebuilt message that names its generation leaves nothing to restart for again.
  store.restart(2);
  assert.equal(store.adoptGeneration(2), false);
});

test("format helpers: hashes round-trip, values are text", () => {
  assert.deepStrictEqual(parseHash("#inv=0.1&seq=42"), { inv: "0.1", barrier: null, seq: 42 });
  assert.deepStrictEqual(parseHash("#inv=&seq=x"), { inv: "", barrier: null, seq: null });
  assert.equal(formatHash({ inv: "0.1", seq: 42 }), "#inv=0.1&seq=42");
  assert.equal(formatHash({ barrier: "0/b0" }), "#barrier=0%2Fb0");
  assert.deepStrictEqual(parseHash(formatHash({ barrier: "0/b0", seq: 3 })), { inv: null, barrier: "0/b0", seq: 3 });
  assert.equal(formatHash({}), "");
  assert.equal(pretty({ a: "<img src=x onerror=alert(1)>" }).text, '{\n  "a": "<img src=x onerror=alert(1)>"\n}');
  assert.equal(pretty("x".repeat(50), 10).cut, true);
  assert.match(pretty({ truncated: true, size: 100000, preview: "{\"a\"" }).text, /too large/);
  assert.equal(preview("abc", 120, true), "abc");
  assert.equal(preview({ a: 1 }), '{"a":1}');
  assert.equal(preview("x".repeat(200), 10).length, 10);
  assert.equal(describeEvent({ type: "join.invalidated", barrier: "b0", error: { code: "parallel_state_conflict" } }), "b0: parallel_state_conflict");
});
