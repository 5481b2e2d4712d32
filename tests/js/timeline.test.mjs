// A session's turns on one axis: positions, turn starts, marks by kind.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { SESSION_FACT_NOTES, conversationOf, createTimeline, formatMark, markKinds, nearestMark, nearestTurn, parseMark, revisionOf, stateAtPosition } from "../../static/picoflow_web/js/timeline.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const golden = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()];
const turnsOf = (runs) => runs.map((events, i) => ({ runId: `r${i}`, events }));

test("every event of every turn is one position, turn after turn", () => {
  const runs = golden("hotel");
  const t = createTimeline(turnsOf(runs));
  assert.equal(runs.length, 14);
  assert.equal(t.total, runs.reduce((n, r) => n + r.length, 0));
  assert.deepEqual(t.positionAt(0), { turn: 0, seq: 0 });
  assert.deepEqual(t.positionAt(runs[0].length), { turn: 1, seq: 0 });
  assert.deepEqual(t.positionAt(runs[0].length - 1), { turn: 0, seq: runs[0].length - 1 });
  assert.deepEqual(t.positionAt(t.total + 50), { turn: 13, seq: runs[13].length - 1 });
  for (let g = 0; g < t.total; g += 7) {
    const p = t.positionAt(g);
    assert.equal(t.globalOf(p.turn, p.seq), g);
  }
  assert.equal(t.endOf(2), t.starts[3] - 1);
  assert.equal(t.globalOf(2, Infinity), t.endOf(2));
});

test("empty turns own no position", () => {
  const t = createTimeline([{ runId: "a", events: [{ seq: 0 }, { seq: 1 }] }, { runId: "b", events: [] }, { runId: "c", events: [{ seq: 0 }] }]);
  assert.equal(t.total, 3);
  assert.deepEqual(t.positionAt(2), { turn: 2, seq: 0 });
  assert.deepEqual(t.positionAt(1), { turn: 0, seq: 1 });
  assert.equal(nearestTurn(t, 0, 1), 2);
  assert.equal(nearestTurn(t, 2, -1), 0);
  // A session whose first turn recorded nothing starts at the first turn that did.
  const late = createTimeline([{ runId: "a", events: [] }, { runId: "b", events: [{ seq: 0 }] }]);
  assert.deepEqual(late.positionAt(0), { turn: 1, seq: 0 });
});

test("previous turn goes to the turn's own start first; next turn to the next start", () => {
  const t = createTimeline(turnsOf(golden("hotel")));
  const inside = t.starts[4] + 3;
  assert.equal(nearestTurn(t, inside, -1), t.starts[4]);
  assert.equal(nearestTurn(t, t.starts[4], -1), t.starts[3]);
  assert.equal(nearestTurn(t, inside, 1), t.starts[5]);
  assert.equal(nearestTurn(t, t.starts[13], 1), null);
  assert.equal(nearestTurn(t, 0, -1), null);
});

test("forks, joins and conflicts are indexed from the recorded event types", () => {
  const nested = golden("nested_fanout");
  const conflict = golden("conflict");
  const t = createTimeline(turnsOf([...nested, ...conflict]));
  const all = [...nested, ...conflict].flat();
  assert.equal(t.marks.fork.length, all.filter((e) => e.type === "barrier.forked").length);
  assert.equal(t.marks.join.length, all.filter((e) => e.type === "join.published" || e.type === "join.invalidated").length);
  assert.ok(t.marks.conflict.length > 0);
  const first = t.marks.fork[0];
  assert.equal(nearestMark(t, "fork", -1, 1), first);
  assert.equal(nearestMark(t, "fork", first, 1), t.marks.fork[1] ?? null);
  assert.equal(nearestMark(t, "fork", first, -1), null);
  const conflictAt = t.positionAt(t.marks.conflict[0]);
  const event = [...nested, ...conflict][conflictAt.turn][conflictAt.seq];
  assert.ok(["join.invalidated", "checkpoint.failed"].includes(event.type));
  assert.equal(nearestMark(t, "interruption", 0, 1), null);
});

test("what each event type marks", () => {
  assert.deepEqual(markKinds({ type: "join.invalidated" }), ["join", "conflict"]);
  assert.deepEqual(markKinds({ type: "branch.rejected", cancelled: true }), ["cancellation"]);
  assert.deepEqual(markKinds({ type: "branch.rejected", cancelled: false }), ["error"]);
  assert.deepEqual(markKinds({ type: "tool.finished", status: "error" }), ["error"]);
  assert.deepEqual(markKinds({ type: "tool.finished", status: "success" }), []);
  assert.deepEqual(markKinds({ type: "run.interrupted" }), ["interruption"]);
  assert.deepEqual(markKinds({ type: "model.started" }), []);
});

test("before session.loaded a position stands for the state the previous turn left", () => {
  const runs = golden("hotel");
  const previous = fold(runs[8]).state;
  const early = fold(runs[9], 0);
  assert.equal(stateAtPosition(early, previous), previous);
  const loaded = fold(runs[9], runs[9].findIndex((e) => e.type === "session.loaded"));
  assert.equal(stateAtPosition(loaded, previous), loaded.state);
  assert.equal(revisionOf(fold(runs[2]).events), runs[2].filter((e) => e.type === "session.saved").at(-1).revision);
  assert.equal(revisionOf([]), null);
});

test("the conversation length is the last model request's message count", () => {
  const runs = golden("hotel");
  const third = runs[2];
  const request = third.filter((e) => e.type === "model.started").at(-1);
  assert.equal(conversationOf(third), request.messages.length);
  assert.ok(conversationOf(runs[6]) > conversationOf(third));
  assert.equal(conversationOf(third.slice(0, 2)), null);
});

test("a diff mark survives the address: turn and seq out, the same position back", () => {
  const runs = golden("hotel");
  const t = createTimeline(turnsOf(runs));
  const endOf3 = t.endOf(2);
  assert.equal(formatMark(t, endOf3), `3.${runs[2].length - 1}`);
  for (let g = 0; g < t.total; g += 11) assert.equal(parseMark(t, formatMark(t, g)), g);
  // A turn that grows live moves no earlier mark: the address names seqs, not positions.
  const grown = createTimeline(turnsOf([...runs.slice(0, 3), [...runs[3], { seq: runs[3].length }]]));
  assert.equal(parseMark(grown, formatMark(t, endOf3)), endOf3);
  // Text of another shape, or a turn the session lacks, is no mark; a seq past its end is its end.
  for (const bad of [null, "", "3", "x.1", "0.1", "99.0", "3.-1"]) assert.equal(parseMark(t, bad), null, String(bad));
  assert.equal(parseMark(t, "3.99999"), endOf3);
});

test("the conversation fact says what its count is: the latest request's messages, one step's memory", () => {
  assert.match(SESSION_FACT_NOTES.conversation, /messages the latest model call/);
  assert.match(SESSION_FACT_NOTES.conversation, /memory/);
  // Its count can fall between two positions of one session, which is what the note explains.
  const runs = golden("hotel");
  const counts = runs.map((r) => conversationOf(r)).filter((n) => n !== null);
  const within = runs.flatMap((r) => r.filter((e) => e.type === "model.started").map((e) => e.messages.length));
  assert.ok(counts.length && within.some((n, i) => i > 0 && n < within[i - 1]), "no model call in the hotel golden sends fewer messages than the one before");
});
