// @ts-check
/**
 * The workspace's splitters (DOM): one between the barrier tree column and the lanes, one
 * between the tree panel and the inspector. Each is a focusable `role=separator`: drag it,
 * or focus it and use the arrow keys (Shift for bigger steps, Home and End for the limits).
 * The sizes a reader chose are kept in localStorage per signed-in user (two people sharing
 * a browser keep their own), for the run page and the session page alike;
 * `panel_sizes.js` holds the limits.
 *
 * Markup: `.pf-workspace` with `[data-resize=tree]` and `[data-resize=inspector]` splitters
 * (templates/picoflow_web/_workspace.html). The sizes are the CSS variables
 * `--pf-tree-width` and `--pf-inspector-width` on the workspace.
 */

import { BIG_STEP, STEP, bounds, fitSizes, formatSizes, moveTo, parseSizes } from "./panel_sizes.js";

const STORAGE_KEY = "pf:workspace-sizes";

/** @param {string} key */
function readStored(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;  // storage refused (privacy mode): the sizes last for this page only
  }
}

/** @param {string} key @param {string} value */
function writeStored(key, value) {
  try {
    localStorage.setItem(key, value);
  } catch {
    // As above: a refused write only means the next page starts from the defaults.
  }
}

/**
 * Wire the splitters of one workspace.
 * @param {HTMLElement} workspace
 */
export function mountSplitters(workspace) {
  const treeSplitter = /** @type {HTMLElement | null} */ (workspace.querySelector("[data-resize=tree]"));
  const inspectorSplitter = /** @type {HTMLElement | null} */ (workspace.querySelector("[data-resize=inspector]"));
  const treeColumn = /** @type {HTMLElement | null} */ (workspace.querySelector(".pf-col-tree"));
  const inspector = /** @type {HTMLElement | null} */ (workspace.querySelector(".pf-inspector"));
  if (!treeSplitter || !inspectorSplitter || !treeColumn || !inspector) return;
  // The header names who is signed in; a page without one keeps the shared key.
  const user = document.querySelector(".pf-user")?.textContent?.trim() ?? "";
  const storageKey = user ? `${STORAGE_KEY}:${user}` : STORAGE_KEY;
  let chosen = parseSizes(readStored(storageKey) ?? readStored(STORAGE_KEY));

  const stacked = () => getComputedStyle(inspectorSplitter).display === "none";
  const measure = () => {
    const width = workspace.getBoundingClientRect().width;
    const drawn = { tree: treeColumn.getBoundingClientRect().width, inspector: inspector.getBoundingClientRect().width };
    return { width, drawn };
  };

  /** Draw the chosen sizes within what this window allows. */
  const apply = () => {
    const { width, drawn } = measure();
    if (chosen.tree === null && chosen.inspector === null) {
      updateAria(width, drawn);
      return;
    }
    const fit = fitSizes(chosen, drawn, width, stacked());
    if (chosen.tree !== null || fit.tree !== Math.round(drawn.tree)) workspace.style.setProperty("--pf-tree-width", `${fit.tree}px`);
    if (chosen.inspector !== null || fit.inspector !== Math.round(drawn.inspector)) workspace.style.setProperty("--pf-inspector-width", `${fit.inspector}px`);
    updateAria(width, fit);
  };

  /** @param {number} width @param {{tree: number, inspector: number}} sizes */
  const updateAria = (width, sizes) => {
    const b = bounds(width, sizes, stacked());
    for (const [el, which] of /** @type {const} */ ([[treeSplitter, "tree"], [inspectorSplitter, "inspector"]])) {
      el.setAttribute("aria-valuemin", String(b[which].min));
      el.setAttribute("aria-valuemax", String(b[which].max));
      el.setAttribute("aria-valuenow", String(Math.round(sizes[which])));
    }
  };

  /**
   * Set one panel's size, keep it, and let the page redraw its lanes.
   * @param {"tree" | "inspector"} which @param {number} size
   */
  const choose = (which, size) => {
    const { width, drawn } = measure();
    // Store what fits now: a drag past a limit should not leave a size the reader cannot see.
    chosen = { ...chosen, [which]: moveTo(which, size, drawn, width, stacked()) };
    writeStored(storageKey, formatSizes(chosen));
    apply();
    // The run view redraws its lanes and axis on a window resize; to it, a moved splitter
    // is the same change.
    window.dispatchEvent(new Event("resize"));
  };

  /** @param {"tree" | "inspector"} which  what is drawn, not what was chosen: a step moves what the reader sees */
  const sizeOf = (which) => measure().drawn[which];

  for (const [el, which, sign] of /** @type {const} */ ([[treeSplitter, "tree", 1], [inspectorSplitter, "inspector", -1]])) {
    // The inspector sits right of its splitter: dragging or pressing right makes it narrower.
    el.addEventListener("pointerdown", (event) => {
      if (event.button !== 0) return;
      event.preventDefault();
      el.setPointerCapture(event.pointerId);
      el.classList.add("pf-splitter-active");
      const startX = event.clientX;
      const start = sizeOf(which);
      /** @param {PointerEvent} e */
      const move = (e) => choose(which, start + sign * (e.clientX - startX));
      const end = () => {
        el.classList.remove("pf-splitter-active");
        el.removeEventListener("pointermove", move);
        el.removeEventListener("pointerup", end);
        el.removeEventListener("pointercancel", end);
      };
      el.addEventListener("pointermove", move);
      el.addEventListener("pointerup", end);
      el.addEventListener("pointercancel", end);
    });
    el.addEventListener("keydown", (event) => {
      const step = event.shiftKey ? BIG_STEP : STEP;
      const { width, drawn } = measure();
      const b = bounds(width, drawn, stacked());
      /** @type {number | null} */
      let next = null;
      if (event.key === "ArrowRight") next = sizeOf(which) + sign * step;
      else if (event.key === "ArrowLeft") next = sizeOf(which) - sign * step;
      else if (event.key === "Home") next = b[which].min;
      else if (event.key === "End") next = b[which].max;
      if (next === null) return;
      event.preventDefault();
      // The tree's own keys (j/k, arrows) listen on the page; these belong to the splitter.
      event.stopPropagation();
      choose(which, next);
    });
  }
  window.addEventListener("resize", apply);
  apply();
}
