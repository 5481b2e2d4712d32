// @ts-check
/**
 * The run page's Stop control and its "why it ended" panel (DOM). What they show comes from
 * `stopping.js`; this module only draws it and sends the request.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-stop-box                    the control; hidden once the run ended
 *   #pf-stop                        the button: "Stop", then "Stopping…" (disabled)
 *   #pf-stop-note, #pf-stop-error   who asked to stop; why the request was refused
 *   #pf-ended[data-status]          the panel of a cancelled or interrupted run:
 *                                   #pf-ended-headline, #pf-ended-lines > li
 */

import { ApiError, cancelRunUrl, requestJson, runApiUrl } from "./api.js";
import { h, setAttr, setText } from "./dom.js";
import { endedExplanation, isEnded, mergeSummary, runStatus, stopControl } from "./stopping.js";

/** While a stop is on its way, how often the summary is asked for: a run stopped before a
 * worker took it ends without any event, so only its summary can say it is over. */
const STOPPING_POLL_MS = 2000;

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * @param {{runId: string, store: ReturnType<typeof import("./store.js").createRunStore>}} options
 */
export function createStopControl({ runId, store }) {
  const els = {
    box: byId("pf-stop-box"), button: /** @type {HTMLButtonElement} */ (byId("pf-stop")),
    note: byId("pf-stop-note"), error: byId("pf-stop-error"),
    ended: byId("pf-ended"), headline: byId("pf-ended-headline"), lines: byId("pf-ended-lines"),
  };
  /** @type {import("./stopping.js").StopRequest} */
  let request = { pending: false, sent: false, error: "" };
  let pollTimer = 0;
  let endedKey = "";

  const takeSummary = (/** @type {any} */ summary) => {
    if (summary) store.set({ summary: mergeSummary(store.get().summary, summary) });
  };
  const refresh = async () => {
    const data = await requestJson(runApiUrl(runId));
    takeSummary(data && data.run);
  };
  const pollWhileStopping = () => {
    window.clearTimeout(pollTimer);
    pollTimer = window.setTimeout(async () => {
      pollTimer = 0;
      const s = store.get();
      if (isEnded(runStatus(s.run, s.summary))) return;
      await refresh().catch(() => {});
      pollWhileStopping();
    }, STOPPING_POLL_MS);
  };

  els.button.addEventListener("click", async () => {
    const s = store.get();
    if (!stopControl(s.run, s.summary, request).visible || request.pending || request.sent) return;
    request = { pending: true, sent: false, error: "" };
    store.touch();
    try {
      const data = await requestJson(cancelRunUrl(runId), { method: "POST" });
      request = { pending: false, sent: true, error: "" };
      takeSummary(data && data.run);
      pollWhileStopping();
    } catch (error) {
      request = { pending: false, sent: false, error: error instanceof Error ? error.message : String(error) };
      // It ended before the request got there: the summary says how.
      if (error instanceof ApiError && error.code === "run_ended") refresh().catch(() => {});
    }
    store.touch();
  });

  /** Draw from the live run (not a pinned replay): stopping concerns the run as it is now. */
  const render = () => {
    const s = store.get();
    const control = stopControl(s.run, s.summary, request);
    els.box.hidden = !control.visible;
    if (control.visible) {
      setText(els.button, control.label);
      els.button.disabled = control.disabled;
      setAttr(els.button, "aria-busy", String(control.label !== "Stop"));
      els.note.hidden = !control.note;
      setText(els.note, control.note);
      els.error.hidden = !control.error;
      setText(els.error, control.error);
    }
    const key = `${s.run.version}|${s.summary?.status}|${s.summary?.cancel_requested?.by}`;
    if (key === endedKey) return;
    endedKey = key;
    const explained = endedExplanation(s.run, s.summary);
    els.ended.hidden = explained === null;
    setAttr(els.ended, "data-status", explained ? explained.status : "");
    els.ended.classList.toggle("pf-ended-cancelled", explained?.status === "cancelled");
    els.ended.classList.toggle("pf-ended-interrupted", explained?.status === "interrupted");
    if (!explained) return;
    els.headline.hidden = !explained.headline;
    setText(els.headline, explained.headline);
    els.lines.replaceChildren(...explained.lines.map((line) => h("li", "pf-ended-line", line)));
  };

  return { render };
}
