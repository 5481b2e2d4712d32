// @ts-check
/**
 * A live feed: a websocket with exponential backoff and jitter that resumes where it left
 * off, falling back to HTTP polling when websockets keep failing (a proxy that does not
 * pass them, say). Its connection state drives the `#pf-status[data-state]` badge:
 *
 * - `connecting`: opening a socket, or waiting to retry;
 * - `open`: a socket is open, or polling answers (`mode` says which);
 * - `closed`: stopped for good (a bad request: 4400; not logged in: 4401; refused origin:
 *   4403; unknown run: 4404; or `stop()`): the server's answer would not change on a retry.
 *
 * Every dependency (WebSocket, timers, random, the poll function) can be injected, so
 * node tests drive it without a browser.
 */

export const CLOSE_BAD_REQUEST = 4400;
export const CLOSE_UNAUTHENTICATED = 4401;
export const CLOSE_FORBIDDEN = 4403;
export const CLOSE_NOT_FOUND = 4404;

/** Why the server closed for good, by close code; other codes are retried. */
export const FINAL_CLOSES = new Map([
  [CLOSE_BAD_REQUEST, "bad request"],
  [CLOSE_UNAUTHENTICATED, "not logged in"],
  [CLOSE_FORBIDDEN, "refused"],
  [CLOSE_NOT_FOUND, "not found"],
]);

/**
 * "Equal jitter" backoff: half the exponential delay fixed, half random, capped.
 * @param {number} attempt  0 for the first retry
 * @param {{base?: number, cap?: number, random?: () => number}} [options]
 */
export function backoffDelay(attempt, options = {}) {
  const base = options.base ?? 500;
  const cap = options.cap ?? 15_000;
  const random = options.random ?? Math.random;
  const ceiling = Math.min(cap, base * 2 ** Math.max(0, attempt));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/**
 * @typedef {object} FeedOptions
 * @property {() => string | null} url  the websocket URL to open now (it may carry
 *   `?after=<last seq>`); null when there is no websocket to try
 * @property {(message: any) => void} onMessage  each parsed message, socket or poll
 * @property {((state: string, info: {mode: string, retryIn?: number, code?: number,
 *   reason?: string}) => void)} [onState]
 * @property {() => Promise<{messages: any[], again?: boolean, done?: boolean}>} [poll]
 *   one HTTP poll (messages in the socket's shape); `again`: poll again at once;
 *   `done`: nothing more will come
 * @property {number} [maxFailures]  socket failures in a row before polling
 * @property {number} [pollInterval]  ms between polls
 * @property {number} [socketRetry]  ms between socket attempts while polling
 * @property {number} [stableAfter]  ms a socket must stay open to reset the failures
 * @property {any} [WebSocket]
 * @property {(fn: () => void, ms: number) => any} [setTimeout]
 * @property {(id: any) => void} [clearTimeout]
 * @property {() => number} [now]
 * @property {() => number} [random]
 */

/** @param {FeedOptions} options */
export function createFeed(options) {
  const Socket = options.WebSocket ?? globalThis.WebSocket;
  const later = options.setTimeout ?? ((fn, ms) => globalThis.setTimeout(fn, ms));
  const cancel = options.clearTimeout ?? ((id) => globalThis.clearTimeout(id));
  const now = options.now ?? (() => Date.now());
  const maxFailures = options.maxFailures ?? 3;
  const pollInterval = options.pollInterval ?? 1500;
  const socketRetry = options.socketRetry ?? 30_000;
  const stableAfter = options.stableAfter ?? 5_000;

  let state = "connecting";
  let mode = "ws";
  let failures = 0;
  let stopped = false;
  let doneWith = false;
  /** @type {any} */
  let socket = null;
  /** @type {any} */
  let timer = null;
  /** @type {any} */
  let socketTimer = null;
  let polling = false;

  /** @param {string} next @param {any} [info] */
  const setState = (next, info = {}) => {
    state = next;
    if (options.onState) options.onState(next, { mode, ...info });
  };

  const openSocket = () => {
    if (stopped) return;
    const url = Socket ? options.url() : null;
    if (!url) {
      failures = maxFailures;
      startPolling();
      return;
    }
    let opened = false;
    let openedAt = 0;
    /** @type {any} */
    let ws;
    try {
      ws = new Socket(url);
    } catch {
      onSocketFailure(false, 0);
      return;
    }
    socket = ws;
    if (mode === "ws") setState("connecting");
    ws.onopen = () => {
      if (socket !== ws) return;
      opened = true;
      openedAt = now();
      if (polling) stopPolling();
      mode = "ws";
      setState("open");
    };
    ws.onmessage = (/** @type {{data: string}} */ event) => {
      if (socket !== ws) return;
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      options.onMessage(message);
    };
    ws.onerror = () => {};
    ws.onclose = (/** @type {{code: number, reason?: string}} */ event) => {
      if (socket !== ws) return;
      socket = null;
      if (stopped) return;
      const final = FINAL_CLOSES.get(event.code);
      if (final !== undefined) {
        stopped = true;
        clearTimers();
        setState("closed", { code: event.code, reason: final });
        return;
      }
      onSocketFailure(opened, opened ? now() - openedAt : 0);
    };
  };

  /** @param {boolean} opened @param {number} lasted */
  const onSocketFailure = (opened, lasted) => {
    if (opened && lasted >= stableAfter) failures = 0;
    failures += 1;
    if (failures >= maxFailures && options.poll) {
      startPolling();
      return;
    }
    if (polling) {
      socketTimer = later(openSocket, socketRetry);
      return;
    }
    const delay = backoffDelay(failures - 1, { random: options.random });
    setState("connecting", { retryIn: delay });
    timer = later(openSocket, delay);
  };

  const startPolling = () => {
    if (!options.poll) {
      setState("closed", { reason: "no websocket" });
      return;
    }
    if (!polling) {
      polling = true;
      mode = "polling";
      setState("connecting");
      pollOnce();
    }
    if (Socket && options.url()) {
      if (socketTimer !== null) cancel(socketTimer);
      socketTimer = later(() => { socketTimer = null; openSocket(); }, socketRetry);
    }
  };

  const stopPolling = () => {
    polling = false;
    if (timer !== null) cancel(timer);
    timer = null;
  };

  let pollErrors = 0;
  const pollOnce = async () => {
    timer = null;
    if (stopped || !polling || !options.poll) return;
    try {
      const result = await options.poll();
      if (stopped || !polling) return;
      pollErrors = 0;
      if (state !== "open") setState("open");
      for (const message of result.messages || []) options.onMessage(message);
      if (result.done) {
        doneWith = true;
        polling = false;
        if (socketTimer !== null) cancel(socketTimer);
        socketTimer = null;
        mode = "done";
        setState("open");
        return;
      }
      timer = later(pollOnce, result.again ? 0 : pollInterval);
    } catch (error) {
      if (stopped || !polling) return;
      const status = /** @type {any} */ (error)?.status;
      if (status === 401 || status === 404) {
        stopped = true;
        clearTimers();
        setState("closed", { code: status === 401 ? CLOSE_UNAUTHENTICATED : CLOSE_NOT_FOUND, reason: status === 401 ? "not logged in" : "not found" });
        return;
      }
      pollErrors += 1;
      const delay = backoffDelay(pollErrors - 1, { base: pollInterval, random: options.random });
      setState("connecting", { retryIn: delay });
      timer = later(pollOnce, delay);
    }
  };

  const clearTimers = () => {
    if (timer !== null) cancel(timer);
    if (socketTimer !== null) cancel(socketTimer);
    timer = null;
    socketTimer = null;
  };

  return {
    start() {
      stopped = false;
      openSocket();
    },
    /** Stop for good: close the socket, stop polling and retrying. */
    stop() {
      stopped = true;
      polling = false;
      clearTimers();
      if (socket) {
        const ws = socket;
        socket = null;
        try {
          ws.close(1000);
        } catch {
          /* already closed */
        }
      }
      setState("closed", { reason: "stopped" });
    },
    get state() {
      return state;
    },
    get mode() {
      return mode;
    },
    get done() {
      return doneWith;
    },
  };
}
