// Loading a stored run: one JSONL stream read piece by piece, each piece's complete lines
// parsed and handed on in order, the shared fields put back, errors in the API's shape.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ApiError, requestJsonSoon, restoreEnvelope, streamStoredEvents } from "../../static/picoflow_web/js/api.js";

const encoder = new TextEncoder();

/**
 * A server answering `body` (bytes) in pieces cut at `cuts` (byte offsets), logging each
 * request and each piece taken; `headers` go on the response.
 */
function fakeStream(body, cuts, log, headers = {}) {
  return async (url, init) => {
    log.push(`request ${url} accept=${init.headers.Accept}`);
    const bounds = [0, ...cuts, body.length];
    let next = 0;
    const stream = new ReadableStream({
      pull(controller) {
        if (next + 1 >= bounds.length) {
          controller.close();
          return;
        }
        log.push(`piece ${next}`);
        controller.enqueue(body.subarray(bounds[next], bounds[next + 1]));
        next += 1;
      },
      cancel() {
        log.push("cancelled");
      },
    });
    return new Response(stream, { status: 200, headers: { "Content-Type": "application/x-ndjson", ...headers } });
  };
}

const lines = (events) => encoder.encode(events.map((e) => `${JSON.stringify(e)}\n`).join(""));

test("pieces cut anywhere (inside a line, inside a character) give every event once, in order", async () => {
  const events = [];
  for (let seq = 0; seq < 40; seq += 1) events.push({ seq, type: "x", note: seq % 7 === 0 ? "thé ☕ 𝄞" : "plain" });
  const body = lines(events);
  // Every third byte: most cuts fall inside a line, some inside a multi-byte character.
  const cuts = [];
  for (let at = 3; at < body.length; at += 3) cuts.push(at);
  const log = [];
  globalThis.fetch = fakeStream(body, cuts, log);
  const seen = [];
  const count = await streamStoredEvents("r 1", 4, (batch) => seen.push(...batch));
  assert.equal(count, 40);
  assert.deepStrictEqual(seen, events);
  assert.equal(log[0], "request /api/runs/r%201/events?after=4&compact=1 accept=application/x-ndjson");
});

test("a batch is handed on per piece as far as it ends a line; a long line is parsed once whole", async () => {
  const long = { seq: 1, type: "barrier.forked", requests: Array.from({ length: 500 }, (_, i) => ({ index: i, key: `k${i}` })) };
  const events = [{ seq: 0, type: "turn.started" }, long, { seq: 2, type: "branch.started" }];
  const body = lines(events);
  const first = JSON.stringify(events[0]).length + 1;
  // The long line comes in many pieces; none of them ends it until the last.
  const cuts = [first + 5];
  const end = first + JSON.stringify(long).length + 1; // just past the long line's end
  for (let at = first + 100; at < end - 1; at += 100) cuts.push(at);
  cuts.push(end);
  const log = [];
  globalThis.fetch = fakeStream(body, cuts, log);
  const batches = [];
  await streamStoredEvents("r", -1, (batch) => batches.push(batch.map((e) => e.seq)));
  assert.deepStrictEqual(batches, [[0], [1], [2]]);
});

test("the shared fields come back on the events sent without them, and only on those", async () => {
  const envelope = { v: 1, run_id: "run-1", session_id: "s-1" };
  const events = [{ seq: 0, type: "turn.started" }, { v: 1, run_id: "run-1", session_id: "other", seq: 1, type: "session.loaded" }];
  const log = [];
  globalThis.fetch = fakeStream(lines(events), [], log, { "PicoFlow-Envelope": JSON.stringify(envelope) });
  const seen = [];
  await streamStoredEvents("run-1", -1, (batch) => seen.push(...batch));
  assert.deepStrictEqual(seen, [{ seq: 0, type: "turn.started", ...envelope }, events[1]]);

  const batch = [{ seq: 5 }, { seq: 6, run_id: "kept", v: 1, session_id: "kept" }];
  restoreEnvelope(batch, envelope);
  assert.deepStrictEqual(batch, [{ seq: 5, ...envelope }, { seq: 6, run_id: "kept", v: 1, session_id: "kept" }]);
});

test("a refused request throws the server's error", async () => {
  globalThis.fetch = async () => new Response(JSON.stringify({ type: "error", message: "No run 'x'.", code: "not_found" }),
    { status: 404, statusText: "Not Found", headers: { "Content-Type": "application/json" } });
  await assert.rejects(streamStoredEvents("x", -1, () => {}), (error) => {
    assert.ok(error instanceof ApiError);
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
    assert.equal(error.message, "No run 'x'.");
    return true;
  });
});

test("a fold that throws stops the loading and cancels the stream", async () => {
  const events = Array.from({ length: 6 }, (_, seq) => ({ seq }));
  const body = lines(events);
  const cuts = [];
  let at = 0;
  for (const e of events.slice(0, -1)) cuts.push((at += JSON.stringify(e).length + 1));
  const log = [];
  globalThis.fetch = fakeStream(body, cuts, log);
  const seen = [];
  await assert.rejects(streamStoredEvents("r", -1, (batch) => {
    seen.push(...batch);
    throw new Error("bad batch");
  }), /bad batch/);
  assert.deepStrictEqual(seen, [events[0]]);
  // The stream may have buffered a piece ahead; it is cancelled, not read to the end.
  assert.equal(log.at(-1), "cancelled");
  assert.ok(log.filter((l) => l.startsWith("piece")).length < events.length, log.join(", "));
});

test("an empty run hands on nothing", async () => {
  const log = [];
  globalThis.fetch = fakeStream(new Uint8Array(0), [], log);
  const seen = [];
  assert.equal(await streamStoredEvents("r", -1, (batch) => seen.push(batch)), 0);
  assert.deepStrictEqual(seen, []);
});

test("a long read lets queued tasks run before it goes on", async () => {
  // A controllable clock: each reading of it is 30 ms later, so every other piece ends a
  // slice. A timer queued before the loading must run before the last batch is handed on.
  const real = globalThis.performance;
  let now = 0;
  Object.defineProperty(globalThis, "performance", { value: { now: () => (now += 30) }, configurable: true, writable: true });
  try {
    const events = Array.from({ length: 8 }, (_, seq) => ({ seq }));
    const body = lines(events);
    const cuts = [];
    let at = 0;
    for (const e of events.slice(0, -1)) cuts.push((at += JSON.stringify(e).length + 1));
    globalThis.fetch = fakeStream(body, cuts, []);
    const order = [];
    setTimeout(() => order.push("timer"), 0);
    await streamStoredEvents("r", -1, (batch) => order.push(batch[0].seq));
    assert.ok(order.indexOf("timer") > 0 && order.indexOf("timer") < order.length - 1, order.join(" "));
  } finally {
    Object.defineProperty(globalThis, "performance", { value: real, configurable: true, writable: true });
  }
});

test("repeated strings are shared through one table, values unchanged, other fields left alone", async () => {
  const { shareStrings } = await import("../../static/picoflow_web/js/fold.js");
  // A live batch's events carry the envelope's run and session ids, each its own copy.
  const envelope = (id) => ({ run_id: `run-${id}`, session_id: `sess-${id}` });
  const make = () => [
    { seq: 0, type: "state.contributed", channel: "keyed_by_branch", path: "0", ...envelope("a") },
    { seq: 1, type: "state.contributed", channel: "sum", path: "1", ...envelope("a") },
    { seq: 2, type: "branch.started", channel: 7, path: "1", run_id: 3 },
  ];
  const events = make();
  const seen = new Map();
  shareStrings(events, seen);
  shareStrings(make(), seen); // a later batch meets the same table
  assert.deepStrictEqual(events, make());
  assert.deepStrictEqual([...seen.keys()].sort(), ["branch.started", "keyed_by_branch", "run-a", "sess-a", "state.contributed", "sum"]);
});

test("requestJsonSoon sends its request from a task of its own, not from its caller's", async () => {
  const log = [];
  globalThis.fetch = async (url) => {
    log.push(`fetch ${url}`);
    return new Response(JSON.stringify({ run: { id: "r" } }), { headers: { "Content-Type": "application/json" } });
  };
  const answer = requestJsonSoon("/api/runs/r");
  log.push("caller done");
  await Promise.resolve();
  log.push("microtasks done");
  assert.deepEqual(await answer, { run: { id: "r" } });
  assert.deepEqual(log, ["caller done", "microtasks done", "fetch /api/runs/r"]);
});
