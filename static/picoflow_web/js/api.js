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
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const message = data && typeof data.message === "string" ? data.message : `${response.status} ${response.statusText}`;
    throw new ApiError(message, response.status, (data && data.code) || "http_error", data);
  }
  return data;
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
/** POST a JSONL export (201 with what was stored). @param {boolean} copy  under new ids */
export const importUrl = (copy) => `/api/import${copy ? "?copy=1" : ""}`;
/** @param {string} runId @param {number} after */
export const runSocketUrl = (runId, after) => wsUrl(`/ws/runs/${encodeURIComponent(runId)}/?after=${after}`);

/**
 * Every stored event of run `runId` after seq `after`, page by page, handed to `onPage`
 * in order. The next page is requested before `onPage` folds the current one (a page
 * names its last seq), so the server and the network work while the page folds. The
 * first page is smaller (`first` events), so a big run draws its start sooner.
 * @param {string} runId @param {number} after @param {number} limit
 * @param {(events: any[]) => void} onPage @param {number} [first]
 */
export async function loadStoredEvents(runId, after, limit, onPage, first = limit) {
  let asked = Math.min(first, limit);
  let next = requestJson(eventsUrl(runId, after, asked));
  for (;;) {
    const data = await next;
    const events = Array.isArray(data.events) ? data.events : [];
    const full = events.length >= asked && typeof data.last_seq === "number";
    asked = limit;
    if (full) next = requestJson(eventsUrl(runId, data.last_seq, limit));
    try {
      if (events.length) onPage(events);
    } catch (error) {
      if (full) next.catch(() => {}); // nobody waits for it any more
      throw error;
    }
    if (!full) return;
  }
}
