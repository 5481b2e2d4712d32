// @ts-check
/**
 * The dashboard's JSON API and websocket URLs, for the page modules. Same origin,
 * session cookie; unsafe methods send Django's CSRF token in `X-CSRFToken`.
 * Errors have one shape, `{type: "error", message, code}`: `ApiError` carries it.
 */

export class ApiError extends Error {
  /** @param {string} message @param {number} status @param {string} code @param {any} [body] */
  constructor(message, status, code, body = null) {
    super(message);
    this.status = status;
    this.code = code;
    /** The whole error body (a bad config's also has `fields`: {name: message}). */
    this.body = body;
  }
}

/** Django's CSRF token, from its cookie (or a hidden input rendered by `{% csrf_token %}`). */
export function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  if (match) return decodeURIComponent(match[1]);
  const input = /** @type {HTMLInputElement | null} */ (document.querySelector("input[name=csrfmiddlewaretoken]"));
  return input ? input.value : "";
}

/**
 * Fetch JSON; non-2xx answers throw an ApiError with the server's message. `upload` sends
 * a file (or text) as it is, with its media type, instead of a JSON `body`.
 * @param {string} url
 * @param {{method?: string, body?: any, upload?: {data: Blob | string, type: string}, signal?: AbortSignal}} [options]
 */
export async function requestJson(url, options = {}) {
  const method = options.method || "GET";
  /** @type {Record<string, string>} */
  const headers = { Accept: "application/json" };
  /** @type {RequestInit} */
  const init = { method, headers, credentials: "same-origin", signal: options.signal };
  if (options.upload !== undefined) {
    headers["Content-Type"] = options.upload.type;
    init.body = options.upload.data;
  } else if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(options.body);
  }
  if (method !== "GET" && method !== "HEAD") headers["X-CSRFToken"] = csrfToken();
  const response = await fetch(url, init);
  const data = await bodyOf(response);
  if (!response.ok) throw errorOf(response, data);
  return data;
}

/**
 * `requestJson` sent from a task of its own. A render that finds it needs something from
 * the server asks with this: `fetch()` does work of its own before it returns its promise,
 * and in a render's frame that work holds up the frame.
 * @param {string} url @param {Parameters<typeof requestJson>[1]} [options]
 */
export function requestJsonSoon(url, options = {}) {
  return new Promise((resolve) => { globalThis.setTimeout(resolve, 0); }).then(() => requestJson(url, options));
}

/**
 * A websocket URL on this origin.
 * @param {string} path  e.g. "/ws/runs/abc/"
 */
export function wsUrl(path) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}${path}`;
}

/** @param {string} runId */
export const runPageUrl = (runId) => `/runs/${encodeURIComponent(runId)}/`;
/** @param {string} sessionId */
export const sessionPageUrl = (sessionId) => `/sessions/${encodeURIComponent(sessionId)}/`;
/** @param {string} runId @param {number} after @param {number} [limit] */
export const eventsUrl = (runId, after, limit = 5000) => `/api/runs/${encodeURIComponent(runId)}/events?after=${after}&limit=${limit}`;
/** @param {string} runId */
export const runApiUrl = (runId) => `/api/runs/${encodeURIComponent(runId)}`;
/** POST: ask the run to stop (202 with its summary; 409 `run_ended` once it ended). @param {string} runId */
export const cancelRunUrl = (runId) => `/api/runs/${encodeURIComponent(runId)}/cancel`;
/** POST: queue a run that resumes it (202 with the new run; 409 `not_resumable`). @param {string} runId */
export const resumeRunUrl = (runId) => `/api/runs/${encodeURIComponent(runId)}/resume`;
/** POST a JSONL export (201 with what was stored). @param {boolean} copy  under new ids */
export const importUrl = (copy) => `/api/import${copy ? "?copy=1" : ""}`;
/**
 * The run's schedules under other scheduling models. @param {string} runId
 * @param {number | null} [maxConcurrency]  a graph-wide limit for the supersteps schedule
 */
export const whatIfUrl = (runId, maxConcurrency = null) => `/api/runs/${encodeURIComponent(runId)}/whatif${maxConcurrency ? `?max_concurrency=${maxConcurrency}` : ""}`;
/** Two runs side by side (JSON). @param {string} a @param {string} b */
export const compareApiUrl = (a, b) => `/api/runs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}`;
/** The page comparing two runs. @param {string} a @param {string} b */
export const comparePageUrl = (a, b) => `/runs/${encodeURIComponent(a)}/compare/${encodeURIComponent(b)}/`;
/**
 * @param {string} runId @param {number} after
 * @param {number | null} [generation]  the generation of the events the page holds: the
 *   server sends the run from seq 0 when it has another (they were replaced)
 */
export const runSocketUrl = (runId, after, generation = null) => wsUrl(
  `/ws/runs/${encodeURIComponent(runId)}/?after=${after}${generation === null ? "" : `&generation=${generation}`}`);

/** A response's JSON body, or null when it has none. @param {Response} response */
async function bodyOf(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

/** The ApiError of a refused request, with the server's message and code. @param {Response} response @param {any} data */
function errorOf(response, data) {
  const message = data && typeof data.message === "string" ? data.message : `${response.status} ${response.statusText}`;
  return new ApiError(message, response.status, (data && data.code) || "http_error", data);
}

/** The media type of a JSONL event stream (one event per line). */
export const NDJSON = "application/x-ndjson";

/**
 * Every stored event of run `runId` after seq `after`, read as one JSONL stream (no round
 * trip per page) and handed to `onBatch` in order: one batch for each piece the network
 * delivers, as far as it ends a line. Only the new text is searched for the line end, so
 * a line spread over many pieces (a fork of 100,000 requests) is joined once. The events
 * come compact (see `restoreEnvelope`) and are handed on whole. Resolves to the number
 * of events read; a non-2xx answer throws an ApiError, and what `onBatch` throws is
 * thrown on, after the stream is cancelled.
 * @param {string} runId @param {number} after
 * @param {(events: any[]) => void} onBatch
 * @param {{signal?: AbortSignal, onGeneration?: (generation: number) => void}} [options]
 *   `onGeneration`: the run's generation the events are read under, before the first batch
 */
export async function streamStoredEvents(runId, after, onBatch, options = {}) {
  const response = await fetch(`/api/runs/${encodeURIComponent(runId)}/events?after=${after}&compact=1`, {
    headers: { Accept: NDJSON }, credentials: "same-origin", signal: options.signal,
  });
  if (!response.ok || !response.body) throw errorOf(response, await bodyOf(response));
  // The fields every event of the run shares come once (compact=1): put them back on
  // the events sent without them, as one shared string each.
  const envelope = JSON.parse(response.headers.get("PicoFlow-Envelope") || "null");
  const generation = Number.parseInt(response.headers.get("PicoFlow-Generation") ?? "", 10);
  if (Number.isInteger(generation)) options.onGeneration?.(generation);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  /** @type {string[]} text after the last line end, in pieces */
  let partial = [];
  let count = 0;
  let slice = performance.now();
  for (;;) {
    const { done, value } = await reader.read();
    const piece = done ? decoder.decode() : decoder.decode(value, { stream: true });
    const cut = done ? piece.length : piece.lastIndexOf("\n");
    if (cut < 0) {
      if (piece) partial.push(piece);
      continue;
    }
    partial.push(piece.slice(0, cut));
    const lines = partial.join("").trim();
    partial = done ? [] : [piece.slice(cut + 1)];
    if (lines) {
      // One parse for the whole piece: lines hold no raw line breaks (JSON escapes them).
      const events = JSON.parse(`[${lines.replaceAll("\n", ",")}]`);
      if (envelope) restoreEnvelope(events, envelope);
      count += events.length;
      try {
        onBatch(events);
      } catch (error) {
        reader.cancel().catch(() => {});
        throw error;
      }
    }
    if (done) return count;
    // A stream that is already buffered resolves each read at once, as a microtask: the
    // page would neither draw nor answer input until the end. Let it in every slice.
    if (performance.now() - slice > SLICE_MS) {
      await yieldToBrowser();
      slice = performance.now();
    }
  }
}

/** How long the stream is read and folded before the browser gets its turn (ms). */
const SLICE_MS = 50;

/**
 * A task boundary: what is queued (input, timers, frames, a debugger's or a test's
 * scripts) runs before the caller goes on. A timer, not `scheduler.yield()`: that one
 * goes on ahead of the queued tasks, which is what this must not do.
 */
function yieldToBrowser() {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * Put the fields the server took off (`v`, `run_id`, `session_id`: the same on every event
 * of a run) back on the events that came without them. In place.
 * @param {any[]} events @param {{v: number, run_id: string, session_id: string}} envelope
 */
export function restoreEnvelope(events, envelope) {
  const { v, run_id: runId, session_id: sessionId } = envelope;
  for (const event of events) {
    if (event.run_id !== undefined) continue;
    event.v = v;
    event.run_id = runId;
    event.session_id = sessionId;
  }
}
