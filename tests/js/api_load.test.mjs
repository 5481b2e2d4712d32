// Loading a stored run: pages in order, the next one requested before the current one is
// folded, and no request after a short page.
import assert from "node:assert/strict";
import { test } from "node:test";

import { loadStoredEvents } from "../../static/picoflow_web/js/api.js";

/** A server of `total` events (seq 0..total-1) that logs what happens, in order. */
function fakeServer(total, log) {
  return async (url) => {
    const after = Number(new URL(url, "http://x").searchParams.get("after"));
    const limit = Number(new URL(url, "http://x").searchParams.get("limit"));
    log.push(`request after=${after}`);
    const events = [];
    for (let seq = after + 1; seq < Math.min(total, after + 1 + limit); seq += 1) events.push({ seq });
    const body = { events, last_seq: events.length ? events.at(-1).seq : after };
    return { ok: true, status: 200, statusText: "OK", json: async () => body };
  };
}

test("pages come in order, each next one requested before the current one folds", async () => {
  const log = [];
  globalThis.fetch = fakeServer(7, log);
  const seen = [];
  await loadStoredEvents("r", -1, 3, (events) => {
    log.push(`fold ${events[0].seq}..${events.at(-1).seq}`);
    seen.push(...events.map((e) => e.seq));
  });
  assert.deepStrictEqual(seen, [0, 1, 2, 3, 4, 5, 6]);
  assert.deepStrictEqual(log, [
    "request after=-1",
    "request after=2", "fold 0..2",
    "request after=5", "fold 3..5",
    "fold 6..6",
  ]);
});

test("a fold that throws stops the loading, and the request in flight is not left unhandled", async () => {
  const log = [];
  globalThis.fetch = fakeServer(10, log);
  await assert.rejects(loadStoredEvents("r", -1, 3, () => { throw new Error("bad page"); }), /bad page/);
  assert.deepStrictEqual(log, ["request after=-1", "request after=2"]);
});

test("an empty run makes one request", async () => {
  const log = [];
  globalThis.fetch = fakeServer(0, log);
  const seen = [];
  await loadStoredEvents("r", -1, 3, (events) => seen.push(...events));
  assert.deepStrictEqual(seen, []);
  assert.deepStrictEqual(log, ["request after=-1"]);
});

test("a smaller first page draws sooner; the rest come at the full size", async () => {
  const log = [];
  globalThis.fetch = fakeServer(8, log);
  const seen = [];
  await loadStoredEvents("r", -1, 3, (events) => seen.push(events.length), 1);
  assert.deepStrictEqual(seen, [1, 3, 3, 1]);
  assert.deepStrictEqual(log.filter((l) => l.startsWith("request")), [
    "request after=-1", "request after=0", "request after=3", "request after=6"]);
});
