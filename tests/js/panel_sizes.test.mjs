// The splitters' limits (panel_sizes.js): the lanes keep their minimum, no panel collapses,
// moving one splitter leaves the other panel alone, and stored sizes that make no sense
// read as "not chosen".
import assert from "node:assert/strict";
import { test } from "node:test";

import { LIMITS, bounds, fitSizes, formatSizes, moveTo, parseSizes } from "../../static/picoflow_web/js/panel_sizes.js";

/** The lanes' width left by `sizes` in a workspace `width` px wide, beside the inspector. */
const lanes = (width, sizes) => width - LIMITS.chrome - LIMITS.splitter - sizes.tree - sizes.inspector;

test("a chosen size that fits is drawn as chosen", () => {
  const fit = fitSizes({ tree: 300, inspector: 400 }, { tree: 440, inspector: 480 }, 1600, false);
  assert.deepEqual(fit, { tree: 300, inspector: 400 });
});

test("where nothing was chosen, the page's own sizes are kept", () => {
  const fit = fitSizes({ tree: null, inspector: 300 }, { tree: 225, inspector: 287 }, 984, false);
  assert.deepEqual(fit, { tree: 225, inspector: 300 });
});

test("a splitter stops where the lanes reach their minimum, and the other panel stays", () => {
  const drawn = { tree: 225, inspector: 287 };
  const inspector = moveTo("inspector", 900, drawn, 984, false);
  assert.equal(lanes(984, { tree: drawn.tree, inspector }), LIMITS.lanesMin);
  const tree = moveTo("tree", 2000, drawn, 984, false);
  assert.equal(lanes(984, { tree, inspector: drawn.inspector }), LIMITS.lanesMin);
  assert.equal(moveTo("tree", 200, drawn, 984, false), 200, "within the limits it goes where it is put");
  assert.equal(moveTo("inspector", 0, drawn, 984, false), LIMITS.inspectorMin);
});

test("a wide chosen inspector gives way to the lanes, and the tree stays", () => {
  const fit = fitSizes({ tree: 225, inspector: 900 }, { tree: 225, inspector: 287 }, 984, false);
  assert.equal(fit.tree, 225);
  assert.equal(lanes(984, fit), LIMITS.lanesMin);
});

test("no panel goes below its minimum", () => {
  const fit = fitSizes({ tree: 10, inspector: -5 }, { tree: 225, inspector: 287 }, 1400, false);
  assert.deepEqual(fit, { tree: LIMITS.treeMin, inspector: LIMITS.inspectorMin });
});

test("on a narrowed window the inspector gives way first, then the tree, the lanes last", () => {
  const chosen = { tree: 500, inspector: 600 };
  const wide = fitSizes(chosen, chosen, 1600, false);
  assert.deepEqual(wide, chosen);
  const narrower = fitSizes(chosen, chosen, 1200, false);
  assert.equal(narrower.tree, 500, "the tree keeps its size while the inspector can give way");
  assert.equal(lanes(1200, narrower), LIMITS.lanesMin);
  const narrowest = fitSizes(chosen, chosen, 800, false);
  assert.deepEqual(narrowest, { tree: LIMITS.treeMin, inspector: LIMITS.inspectorMin });
  assert.ok(lanes(800, narrowest) < LIMITS.lanesMin, "only the lanes are below their minimum");
});

test("stacked under the tree, the inspector takes no width from the lanes", () => {
  const b = bounds(700, { tree: 300, inspector: 500 }, true);
  assert.equal(b.tree.max, 700 - LIMITS.chrome - LIMITS.lanesMin);
});

test("bounds say how far each splitter may go", () => {
  const b = bounds(984, { tree: 225, inspector: 287 }, false);
  assert.deepEqual(b.tree, { min: LIMITS.treeMin, max: 984 - LIMITS.chrome - LIMITS.splitter - 287 - LIMITS.lanesMin });
  assert.deepEqual(b.inspector, { min: LIMITS.inspectorMin, max: 984 - LIMITS.chrome - LIMITS.splitter - 225 - LIMITS.lanesMin });
});

test("stored sizes round-trip, and garbage reads as not chosen", () => {
  assert.deepEqual(parseSizes(formatSizes({ tree: 301, inspector: null })), { tree: 301, inspector: null });
  assert.deepEqual(parseSizes(null), { tree: null, inspector: null });
  assert.deepEqual(parseSizes("{not json"), { tree: null, inspector: null });
  assert.deepEqual(parseSizes('{"tree": "wide", "inspector": -3}'), { tree: null, inspector: null });
  assert.deepEqual(parseSizes('{"tree": 1e999, "inspector": 320.4}'), { tree: null, inspector: 320 });
});
