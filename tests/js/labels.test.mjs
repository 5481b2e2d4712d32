// Labels people read: requests counted from 1, errors by their type and message.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { fold, parseJsonl } from "../../static/picoflow_web/js/fold.js";
import { describeEvent, errorLabel, errorText, requestOrdinal } from "../../static/picoflow_web/js/format.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");

test("a request's place in its barrier is counted from 1", () => {
  assert.equal(requestOrdinal(0, 2), "1 of 2");
  assert.equal(requestOrdinal(1, 2), "2 of 2");
});

test("a flow's own error is named by its type, not the generic internal code", () => {
  const run = fold(parseJsonl(readFileSync(join(GOLDEN, "atomic_failure.jsonl"), "utf8")));
  const car = run.invocations.get("2");
  assert.equal(car.error.code, "internal", "the golden's error arrives with the generic code");
  assert.equal(errorLabel(car.error), "SoldOutError");
  assert.equal(errorText(car.error), "SoldOutError: SOLD OUT: no rental cars on those dates");
  const rejected = run.events.find((e) => e.type === "branch.rejected");
  assert.equal(describeEvent(rejected), "car: SoldOutError: SOLD OUT: no rental cars on those dates");
});

test("a code that says more than internal is kept", () => {
  const error = { type: "ParallelStateConflictError", code: "parallel_state_conflict", message: "two writers" };
  assert.equal(errorText(error), "ParallelStateConflictError: two writers [parallel_state_conflict]");
  assert.equal(errorLabel({ code: "timeout" }), "timeout");
  assert.equal(errorText({ type: "Boom" }), "Boom");
});
