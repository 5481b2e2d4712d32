// @ts-check
/**
 * The workspace's panel sizes as a reader set them with the splitters: the barrier tree's
 * column and the inspector's width, in CSS pixels. Pure (no DOM): the limits are rules,
 * and node tests hold them.
 *
 * Rules:
 * 1. Moving one splitter never resizes the other panel: a splitter stops where the lanes
 *    would get narrower than `lanesMin` px, or its panel narrower than its minimum
 *    (`treeMin`, `inspectorMin`).
 * 2. When the window is too narrow for the sizes chosen, the inspector gives way first,
 *    down to its minimum, then the tree, and only then the lanes: no panel goes below its
 *    own minimum, whatever the stored size says.
 * 3. What is stored is what the reader chose, not what fitted: a size clamped on a narrow
 *    window comes back when the window is wide again.
 */

/** @typedef {{tree: number | null, inspector: number | null}} PanelSizes */

export const LIMITS = Object.freeze({
  treeMin: 160,
  lanesMin: 400,
  inspectorMin: 260,
  /** the splitter between the tree panel and the inspector (a grid column) */
  splitter: 12,
  /** the lanes' own margins and the panel's borders, beside the tree column */
  chrome: 26,
});

/** How far one arrow key press moves a splitter; with Shift, `BIG_STEP`. */
export const STEP = 16;
export const BIG_STEP = 64;

/**
 * The widest each panel may be next to the other, in a workspace `width` px wide.
 * `stacked`: the inspector sits below the tree panel (a narrow window), so it takes no width.
 * @param {number} width @param {{tree: number, inspector: number}} current
 * @param {boolean} stacked @param {typeof LIMITS} [limits]
 */
export function bounds(width, current, stacked, limits = LIMITS) {
  const room = width - limits.chrome - (stacked ? 0 : limits.splitter);
  const tree = Math.max(limits.treeMin, current.tree);
  const inspectorMax = stacked ? limits.inspectorMin
    : Math.max(limits.inspectorMin, room - tree - limits.lanesMin);
  const inspector = stacked ? 0 : clamp(current.inspector, limits.inspectorMin, inspectorMax);
  const treeMax = Math.max(limits.treeMin, room - inspector - limits.lanesMin);
  return {
    tree: { min: limits.treeMin, max: treeMax },
    inspector: { min: limits.inspectorMin, max: inspectorMax },
  };
}

/**
 * The sizes to draw: the chosen ones (or, where none was chosen, what the page drew by
 * itself, `drawn`) within `bounds`.
 * @param {PanelSizes} chosen @param {{tree: number, inspector: number}} drawn
 * @param {number} width @param {boolean} stacked @param {typeof LIMITS} [limits]
 */
export function fitSizes(chosen, drawn, width, stacked, limits = LIMITS) {
  const wanted = { tree: chosen.tree ?? drawn.tree, inspector: chosen.inspector ?? drawn.inspector };
  const b = bounds(width, wanted, stacked, limits);
  return {
    tree: clamp(wanted.tree, b.tree.min, b.tree.max),
    inspector: clamp(wanted.inspector, b.inspector.min, b.inspector.max),
  };
}

/**
 * Where one splitter may put its panel: `size` within the room the other panel, as it is
 * drawn now, leaves (rule 1).
 * @param {"tree" | "inspector"} which @param {number} size
 * @param {{tree: number, inspector: number}} drawn @param {number} width @param {boolean} stacked
 * @param {typeof LIMITS} [limits]
 */
export function moveTo(which, size, drawn, width, stacked, limits = LIMITS) {
  const b = bounds(width, drawn, stacked, limits)[which];
  return clamp(size, b.min, b.max);
}

/**
 * Stored sizes back from text; anything but a positive finite number reads as "not chosen",
 * so a stale or hand-edited entry never breaks the page.
 * @param {string | null} text @returns {PanelSizes}
 */
export function parseSizes(text) {
  /** @type {any} */
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  /** @param {any} v */
  const size = (v) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.round(v) : null);
  return { tree: size(data?.tree), inspector: size(data?.inspector) };
}

/** @param {PanelSizes} sizes */
export function formatSizes(sizes) {
  return JSON.stringify({ tree: sizes.tree, inspector: sizes.inspector });
}

/** @param {number} v @param {number} lo @param {number} hi */
function clamp(v, lo, hi) {
  return Math.round(Math.min(Math.max(v, lo), Math.max(lo, hi)));
}
