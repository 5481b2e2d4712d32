// Hand-made traces for the fold's tests: events of run r1 whose seq and offset advance by
// themselves, and the records a fork's event carries.

/** A tiny trace builder: `add(type, fields, path)` appends an event and returns its seq. */
export function trace() {
  const events = [];
  const add = (type, fields = {}, path = "") => {
    const seq = events.length;
    events.push({ v: 1, run_id: "r1", session_id: "s1", seq, time: "2026-01-01T00:00:00Z", offset: seq / 10, path, type, ...fields });
    return seq;
  };
  return { events, add };
}

/** One request of a fork. @param {number} index @param {string} path @param {string} step @param {string} key */
export const request = (index, path, step, key) => ({ index, path, step, key, params: {}, user_message: null });

/** A `barrier.forked` event's fields (a root fork unless `extra` says otherwise). */
export const fork = (barrier, requests, extra = {}) => ({
  barrier, caller_step: "Top", requests, policy: "retain-successes", checkpoint: "none",
  max_concurrency: null, branch_timeout: null, token_budget: null, base: "canonical", ...extra,
});
