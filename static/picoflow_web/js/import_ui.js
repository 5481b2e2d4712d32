// @ts-check
/**
 * The runs list's import form (DOM): a JSONL export (a run's or a session's) is sent to
 * `POST /api/import` as it is; the answer lists the runs stored, with links, or says why
 * the file was refused (its line and reason: nothing of a refused file is stored).
 */

import { ApiError, importUrl, requestJson, runPageUrl } from "./api.js";

const page = typeof document === "undefined" ? null : document;  // node imports it in tests
const form = /** @type {HTMLFormElement | null} */ (page?.getElementById("pf-import-form") ?? null);
const result = /** @type {HTMLElement | null} */ (page?.getElementById("pf-import-result") ?? null);

/** @param {string} text @param {string} state */
function say(text, state) {
  if (!result) return;
  result.replaceChildren();
  result.dataset.state = state;
  result.hidden = false;
  const line = document.createElement("p");
  line.textContent = text;
  result.appendChild(line);
}

/** @param {{runs: {id: string, original_id: string, event_count: number}[], copied: boolean, events: number}} reply */
function stored(reply) {
  const runs = reply.runs.length === 1 ? "1 run" : `${reply.runs.length} runs`;
  say(`Imported ${runs} (${reply.events} events)${reply.copied ? " as a copy" : ""}.`, "ok");
  const list = document.createElement("ul");
  list.className = "pf-import-runs";
  for (const run of reply.runs) {
    const item = document.createElement("li");
    const link = document.createElement("a");
    link.className = "pf-link pf-mono";
    link.href = runPageUrl(run.id);
    link.textContent = run.id;
    item.appendChild(link);
    if (run.original_id !== run.id) item.append(` (copy of ${run.original_id})`);
    list.appendChild(item);
  }
  result?.appendChild(list);
}

form?.addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = /** @type {HTMLInputElement} */ (form.elements.namedItem("file"));
  const copy = /** @type {HTMLInputElement} */ (form.elements.namedItem("copy")).checked;
  const file = input.files?.[0];
  if (!file) {
    say("Choose an exported .jsonl file first.", "error");
    return;
  }
  const button = /** @type {HTMLButtonElement} */ (form.querySelector("button[type=submit]"));
  button.disabled = true;
  say(`Importing ${file.name}…`, "busy");
  try {
    stored(await requestJson(importUrl(copy), {
      method: "POST", upload: { data: file, type: "application/x-ndjson" } }));
  } catch (error) {
    const code = error instanceof ApiError && error.body?.error_code ? ` [${error.body.error_code}]` : "";
    say(`Not imported: ${error instanceof Error ? error.message : String(error)}${code}`, "error");
  } finally {
    button.disabled = false;
  }
});
