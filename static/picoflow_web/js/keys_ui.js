// @ts-check
/**
 * Page-wide keyboard shortcuts and the `?` sheet that lists them (DOM). A page names its
 * shortcuts once; the sheet is built from the same list, so it cannot drift from what the
 * keys do. Keys typed into a field (or with a modifier) are left to the field.
 *
 * Hooks: `#pf-keys` (the sheet, a <dialog>), `.pf-key-row[data-keys]`.
 */

import { append, h } from "./dom.js";

/**
 * @typedef {{keys: string[], label: string, run: (event: KeyboardEvent) => void | boolean}} Shortcut
 *   `run` returning false means "not handled" (the key goes on to the browser)
 */

/**
 * @param {Shortcut[]} shortcuts
 * @param {(event: KeyboardEvent) => boolean} [fallback]  tried when no shortcut matched
 */
export function bindKeys(shortcuts, fallback) {
  const sheet = /** @type {HTMLDialogElement} */ (h("dialog", "pf-keys"));
  sheet.id = "pf-keys";
  sheet.setAttribute("aria-label", "Keyboard shortcuts");
  const list = h("dl", "pf-key-list");
  for (const s of [{ keys: ["?"], label: "Show this list" }, ...shortcuts]) {
    const row = h("div", "pf-key-row");
    row.dataset.keys = s.keys.join(" ");
    const keys = h("dt");
    s.keys.forEach((k, i) => append(keys, i ? document.createTextNode(" ") : null, h("kbd", "pf-kbd", k === " " ? "Space" : k)));
    append(row, keys, h("dd", "", s.label));
    list.appendChild(row);
  }
  const close = h("button", "pf-button pf-button-small", "Close");
  close.setAttribute("type", "button");
  close.addEventListener("click", () => sheet.close());
  append(sheet, h("h2", "pf-card-title", "Keyboard shortcuts"), list, close);
  document.body.appendChild(sheet);

  document.addEventListener("keydown", (event) => {
    const target = /** @type {HTMLElement} */ (event.target);
    if (event.metaKey || event.ctrlKey || event.altKey) return;
    if (target.closest("input, textarea, select, [contenteditable]")) {
      if (event.key === "Escape" && target instanceof HTMLInputElement) target.blur();
      return;
    }
    if (event.key === "?") {
      if (sheet.open) sheet.close();
      else sheet.showModal();
      event.preventDefault();
      return;
    }
    if (sheet.open) return;
    const match = shortcuts.find((s) => s.keys.includes(event.key));
    if (match) {
      if (match.run(event) !== false) event.preventDefault();
      return;
    }
    if (fallback && fallback(event)) event.preventDefault();
  });
  return sheet;
}
