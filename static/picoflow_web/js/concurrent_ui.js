// @ts-check
/**
 * The coordinator panel on a run page: its `concurrent_steps()` calls, batch by batch,
 * each child a chip that links to the child's run. Drawn from `concurrent.js`; runtime
 * values go in as text, never as HTML. Hidden for a run that coordinates nothing.
 */

import { coordinatorPanel } from "./concurrent.js";
import { append, h } from "./dom.js";

/** @param {HTMLElement} container */
export function createCoordinatorPanel(container) {
  /** @type {import("./fold.js").Run | null} */
  let drawnRun = null;
  let drawnVersion = -1;
  return {
    /** @param {import("./fold.js").Run} view */
    render(view) {
      if (view === drawnRun && view.version === drawnVersion) return;
      drawnRun = view;
      drawnVersion = view.version;
      const calls = coordinatorPanel(view);
      container.hidden = calls.length === 0;
      if (!calls.length) {
        container.replaceChildren();
        return;
      }
      const parts = calls.map((call) => {
        const section = h("section", "pf-children-call");
        section.dataset.group = call.group;
        append(section, h("h2", "pf-children-headline", call.headline));
        for (const batch of call.batches) {
          const row = h("div", "pf-children-batch");
          row.dataset.state = batch.state;
          row.dataset.batch = String(batch.batch);
          append(row, h("span", "pf-children-label", batch.label));
          for (const child of batch.children) {
            const el = h(child.href ? "a" : "span", `pf-child pf-child-${child.status}`, child.label);
            if (child.href && el instanceof HTMLAnchorElement) el.href = child.href;
            el.title = child.title;
            el.dataset.item = String(child.item);
            el.dataset.status = child.status;
            if (child.failed) el.dataset.failed = "1";
            append(row, el);
          }
          append(section, row);
        }
        return section;
      });
      container.replaceChildren(...parts);
    },
  };
}
