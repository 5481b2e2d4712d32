// @ts-check
/**
 * An invocation's model calls, tool calls and events, as the inspector lists them (DOM).
 * Hooks: `.pf-model-call`, `.pf-tool-call`, `.pf-events`; a model call being written shows
 * its text so far in `.pf-stream-text[data-seq]` (`data-seq`: its `model.started`), inside
 * `.pf-streaming[data-state=writing|failed]` (failed: what the attempt wrote before it
 * failed). `syncStreams` brings that text up to date between two rebuilds.
 */

import { append, badge, h, section, table } from "./dom.js";
import { eventsOf } from "./fold.js";
import { describeEvent, formatDuration, messageText, preview } from "./format.js";
import { errorBox, facts, lazy, sectionIn, seqLink, valueCell } from "./inspector_parts_ui.js";
import { streamedView, writtenText } from "./streaming.js";

/** @typedef {import("./fold.js").Run} Run */
/** @typedef {import("./fold.js").Invocation} Invocation */
/** @typedef {import("./fold.js").Barrier} Barrier */
/** @typedef {import("./inspector_ui.js").InspectorContext} InspectorContext */

const EVENT_LIST_LIMIT = 300;

/**
 * @param {Run} view @param {Invocation} inv @param {InspectorContext} ctx
 * @param {DocumentFragment} parent
 */
export function callsAndEvents(parent, view, inv, ctx) {
  if (inv.models.length) {
    const body = sectionIn(parent, ctx, "models", `Model calls (${inv.models.length})`, true);
    inv.models.forEach((call, i) => body.appendChild(modelCall(call, i === inv.models.length - 1, ctx)));
  }
  if (inv.tools.length) {
    const body = sectionIn(parent, ctx, "tools", `Tool calls (${inv.tools.length})`, true);
    for (const call of inv.tools) body.appendChild(toolCall(call));
  }
  eventsSection(parent, view, inv, ctx);
}

/**
 * `provider/name` of the model that answered; a model playing another's selection (a
 * scripted model) adds what was requested: `scripted/x (as openai/gpt-5.1)`.
 * @param {any} model
 */
function modelLabel(model) {
  const name = (/** @type {any} */ m) => (m && m.name ? `${m.provider ? `${m.provider}/` : ""}${m.name}` : "");
  const requested = model ? name(model.requested) : "";
  return name(model) + (requested ? ` (as ${requested})` : "");
}

/** @param {any} call @param {boolean} last @param {InspectorContext} ctx */
function modelCall(call, last, ctx) {
  const box = h("div", "pf-model-call");
  const f = call.finished;
  const head = h("div", "pf-call-head");
  append(head,
    h("strong", "", `call ${call.call}`),
    call.attempt > 1 ? h("span", "pf-chip", `attempt ${call.attempt}`) : null,
    h("span", "pf-muted pf-mono", modelLabel(call.model)),
    f ? h("span", "pf-chip", `${f.total_tokens} tokens`) : null,
    f ? h("span", "pf-chip", formatDuration(f.latency)) : null,
    f && !f.accepted ? badge("not accepted", "rejected") : null,
    call.failed ? badge(call.failed.retrying ? "failed, retrying" : "failed", "rejected") : null,
    !f && !call.failed ? badge("waiting", "running") : null,
    seqLink(call.seq));
  box.appendChild(head);
  const name = `model-${call.seq}`;
  const request = section(`Request: ${call.messages.length} messages${call.tools.length ? `, tools ${call.tools.join(", ")}` : ""}`, ctx.open.get(name) ?? last, "pf-request");
  request.root.addEventListener("toggle", () => ctx.open.set(name, request.root.open));
  for (const m of call.messages) {
    const msg = h("div", `pf-message pf-message-${String(m.type || m.role || "other").replace(/[^a-z]/gi, "")}`);
    append(msg, h("span", "pf-message-role", String(m.type || m.role || "message")), h("div", "pf-message-text", messageText(m.content ?? m.parts)));
    if (Array.isArray(m.tool_calls) && m.tool_calls.length) msg.appendChild(toolCallsList(m.tool_calls));
    request.body.appendChild(msg);
  }
  box.appendChild(request.root);
  const streamed = streamedView(call);
  if (streamed) {
    const writing = h("div", `pf-response pf-streaming pf-streaming-${streamed.state}`);
    writing.dataset.state = streamed.state;
    const text = h("div", "pf-message-text pf-stream-text", streamed.text);
    text.dataset.seq = String(call.seq);
    append(writing, h("span", "pf-message-role", streamed.state === "writing" ? "writing…" : "written before it failed"), text);
    box.appendChild(writing);
  }
  if (f) {
    const response = h("div", "pf-response");
    const text = messageText(f.content);
    append(response, h("span", "pf-message-role", "response"),
      text ? h("div", "pf-message-text", text) : null,
      f.tool_calls && f.tool_calls.length ? toolCallsList(f.tool_calls) : null,
      !text && !(f.tool_calls && f.tool_calls.length) ? h("span", "pf-muted", "(empty)") : null,
      h("span", "pf-muted pf-small", `${f.input_tokens} in · ${f.output_tokens} out · ${f.finish_reason}`));
    box.appendChild(response);
  }
  if (call.failed) box.appendChild(errorBox(call.failed.error));
  return box;
}

/**
 * Bring the streamed text shown in `root` up to what `inv`'s model calls have written
 * (cheap: only a text that changed is written), so the inspector follows the model's
 * writing every frame while its rebuilds are spaced out.
 * @param {HTMLElement} root @param {Invocation | undefined} inv
 */
export function syncStreams(root, inv) {
  if (!inv || !inv.models.length) return;
  for (const el of root.querySelectorAll(".pf-stream-text[data-seq]")) {
    const seq = Number(/** @type {HTMLElement} */ (el).dataset.seq);
    const call = inv.models.find((m) => m.seq === seq);
    if (!call) continue;
    const text = writtenText(call);
    if (el.textContent !== text) el.textContent = text;
  }
}

/** @param {any[]} calls */
function toolCallsList(calls) {
  const list = h("ul", "pf-toolcalls");
  for (const c of calls) {
    const item = h("li");
    append(item, h("code", "pf-mono", `${c.name}(`), h("code", "pf-value", preview(c.args ?? {}, 300)), h("code", "pf-mono", ")"));
    list.appendChild(item);
  }
  return list;
}

/** @param {any} call */
function toolCall(call) {
  const box = h("div", "pf-tool-call");
  const f = call.finished;
  const head = h("div", "pf-call-head");
  append(head, h("strong", "pf-mono", call.name),
    f ? badge(f.status, f.status === "success" ? "fulfilled" : "rejected") : badge("running", "running"),
    f && f.transition ? h("span", "pf-chip", `→ ${f.transition.kind}${f.transition.target ? ` ${f.transition.target}` : ""}`) : null,
    f && f.outcome && f.outcome !== "handled" ? h("span", "pf-chip pf-chip-error", f.outcome) : null,
    seqLink(call.seq));
  box.appendChild(head);
  box.appendChild(facts([["Arguments", valueCell(call.args)], ["Result", f ? valueCell(f.result) : null]]));
  return box;
}

/**
 * @param {DocumentFragment} parent @param {Run} view @param {Invocation} inv
 * @param {InspectorContext} ctx
 */
function eventsSection(parent, view, inv, ctx) {
  const count = inv.eventCount;
  // The events as they are now; their rows only when the section is opened.
  const shown = eventsOf(view, inv, EVENT_LIST_LIMIT);
  sectionIn(parent, ctx, "events", `Events (${count})`, false, "pf-events", (body) => {
    if (shown.length < count) body.appendChild(h("p", "pf-muted", `The last ${EVENT_LIST_LIMIT} of ${count} events.`));
    body.appendChild(table("pf-event-table", ["Seq", "Type", ""], lazy(shown, (e) => [
      seqLink(e.seq), h("code", `pf-event-type pf-event-${String(e.type || "").split(".")[0]}`, e.type || "?"),
      h("span", "pf-event-summary", describeEvent(e))])));
  });
}
