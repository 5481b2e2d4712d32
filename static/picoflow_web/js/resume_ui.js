// @ts-check
/**
 * The run page's Resume control, its links between a run and its resumption, and the
 * resumed run's reuse line (DOM). What they show comes from `resumption.js`; this module
 * draws it and sends the request.
 *
 * Stable DOM hooks (browser tests rely on them):
 *   #pf-resume-box[data-can-run]   the control; shown on a resumable run to operators
 *   #pf-resume                     the button: "Resume", then "Resuming…"; a new run's page opens
 *   #pf-resume-note, #pf-resume-error   what a resume saves; why the request was refused
 *   #pf-resumes, #pf-resumed-by    links to the run this one resumes, and to its resumption
 *   #pf-run-reuse[data-reused][data-executed][data-saved]   a resumed run's counts
 */

import { requestJson, requestJsonSoon, resumeRunUrl, runApiUrl, runPageUrl } from "./api.js";
import { readJsonScript, setAttr, setText } from "./dom.js";
import { resumeControl, resumeDetail, reuseCounts, reuseLine } from "./resumption.js";
import { isEnded, runStatus } from "./stopping.js";

/** @param {string} id */
const byId = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/**
 * @param {{runId: string, store: ReturnType<typeof import("./store.js").createRunStore>}} options
 */
export function createResumeControl({ runId, store }) {
  const els = {
    box: byId("pf-resume-box"), button: /** @type {HTMLButtonElement} */ (byId("pf-resume")),
    note: byId("pf-resume-note"), error: byId("pf-resume-error"),
    resumesItem: byId("pf-resumes-item"), resumes: /** @type {HTMLAnchorElement} */ (byId("pf-resumes")),
    resumedByItem: byId("pf-resumed-by-item"), resumedBy: /** @type {HTMLAnchorElement} */ (byId("pf-resumed-by")),
    reuseItem: byId("pf-run-reuse-item"), reuse: byId("pf-run-reuse"),
  };
  const initial = readJsonScript("pf-run-resume") || {};
  const canRun = !!initial.can_run;
  let detail = resumeDetail(initial);
  /** @type {import("./resumption.js").ResumeRequest} */
  let request = { pending: false, error: "" };
  // The status the detail was read for: a run that ends while the page is open is asked
  // again whether it may be resumed (the server alone knows its ledger).
  let detailFor = /** @type {string} */ (store.get().summary?.status ?? "");

  const askDetail = (/** @type {string} */ status) => {
    detailFor = status;
    requestJsonSoon(runApiUrl(runId)).then((data) => {
      detail = resumeDetail(data && data.run);
      store.touch();
    }).catch(() => {});
  };

  els.button.addEventListener("click", async () => {
    const s = store.get();
    const status = runStatus(s.run, s.summary);
    if (!resumeControl(status, detail.resumable, canRun, request).visible || request.pending) return;
    request = { pending: true, error: "" };
    store.touch();
    try {
      const data = await requestJson(resumeRunUrl(runId), { method: "POST" });
      window.location.assign(runPageUrl(data.run.id));
      return;
    } catch (error) {
      request = { pending: false, error: error instanceof Error ? error.message : String(error) };
      askDetail(status);
    }
    store.touch();
  });

  const render = () => {
    const s = store.get();
    const status = runStatus(s.run, s.summary);
    if (isEnded(status) && status !== detailFor && canRun) askDetail(status);
    const control = resumeControl(status, detail.resumable, canRun, request);
    els.box.hidden = !control.visible && !control.error;
    els.button.hidden = !control.visible;
    setText(els.button, control.label);
    els.button.disabled = control.disabled;
    els.button.title = control.title;
    setText(els.note, control.note);
    els.error.hidden = !control.error;
    setText(els.error, control.error);

    const resumes = s.run.resumes || s.summary?.origin?.resumes || null;
    els.resumesItem.hidden = !resumes;
    if (resumes) {
      setAttr(els.resumes, "href", runPageUrl(resumes));
      setText(els.resumes, `resumes run ${short(resumes)}`);
    }
    els.resumedByItem.hidden = !detail.resumedBy;
    if (detail.resumedBy) {
      setAttr(els.resumedBy, "href", runPageUrl(detail.resumedBy));
      setText(els.resumedBy, `resumed by ${short(detail.resumedBy)}`);
    }

    // The header follows the scrubber, as its other counts do.
    const view = store.view();
    const line = reuseLine(view);
    els.reuseItem.hidden = !line;
    if (line) {
      const counts = reuseCounts(view);
      setText(els.reuse, line);
      setAttr(els.reuse, "data-reused", String(counts.reused));
      setAttr(els.reuse, "data-executed", String(counts.executed));
      setAttr(els.reuse, "data-saved", String(counts.tokensSaved));
    }
  };

  return { render };
}

/** @param {string} id */
function short(id) {
  return id.length > 10 ? `${id.slice(0, 9)}…` : id;
}
