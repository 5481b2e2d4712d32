// @ts-check
/**
 * The browser fold: a run's events -> its run model, and any invocation's view at any
 * moment. Pure (no DOM): node imports it for the tests. This module is the door of the
 * `fold/` package (modules outside it import the fold from here only); the package has
 * one module per event family, named as `runtime/events/fold/`'s, and `fold/apply.js`
 * dispatches each event to its family's handler by type.
 *
 * Same rules as the Python fold; both are checked against the committed golden traces
 * (`tests/golden/<name>.jsonl` folded by Python into `<name>.fold.json`), so they cannot
 * drift:
 *
 * - Canonical state starts from `session.loaded` and changes by non-draft
 *   `state.replaced` / `state.removed` / `state.contributed`, by `join.published` with
 *   target `canonical`, and back by `checkpoint.failed` (that join is rolled back);
 *   `turn.cancelled` puts it back to the state as of the last `session.saved` (nothing is
 *   saved after a stop) and keeps what memory had apart, in `run.unsaved`.
 * - A branch's view at sequence number N is its barrier's fork-time base (the canonical
 *   state as of `barrier.forked`, or the calling branch's own view as of then) overlaid
 *   with its own drafts up to N (a contribution's event carries the resulting value) and
 *   the publications its inner joins made into its scope up to N. Siblings' drafts and
 *   their inner joins' publications up to N are listed as invisible to it.
 *
 * Bad input never throws: what the fold cannot place (a gap in seq, a draft or fork on an
 * unannounced invocation, a fork that reuses a barrier id or a path or whose base is not
 * its caller, an event for an unknown branch or barrier) is recorded in
 * `run.anomalies`, exactly as the Python fold records it; an event at or below the last
 * applied seq is ignored.
 *
 * `run.interrupted` (recorded by the dashboard when a run's executor went silent) ends the
 * run: `run.status` becomes "interrupted", `run.interruption` keeps `{seq, reason,
 * silent_for}`, and the branches still running and barriers still open then get
 * `interrupted: true` (their status and outcome stay what the events last said). Any event
 * after it is an anomaly and is not applied (it takes its seq and is kept in `run.events`);
 * so is a `run.interrupted` after `turn.finished`, `turn.failed` or `turn.cancelled`. Its offset (declared
 * after the silence) does not stretch `endOffset`: the run's time ends at its last report.
 *
 * Beyond the Python fold, the model keeps what the page draws: per-invocation model and
 * tool calls, event seqs, timing, cancellation, per-barrier status counts.
 *
 * State objects are copy-on-write at the step level (`setField` replaces a step's object,
 * never edits it), so a shallow copy of the outer object is a snapshot. Event values are
 * shared, never mutated.
 */

export { applyEvent, applyEventUndoable, applyEvents, fold } from "./fold/apply.js";
export { STATUSES, comparable, createRun, eventBySeq, eventsOf, parentPath } from "./fold/model.js";
export { baseAt, fieldBefore, published, reachesCanonical, viewAt } from "./fold/views.js";
export { appliedOf, barrierPublicationOf, publicationOf } from "./fold/publication.js";
export { parseJsonl, runsOf, shareStrings } from "./fold/io.js";
export { UNDO } from "./fold/log.js";
export { createCursor } from "./fold/undo.js";
export { CHILD_FAILURES } from "./fold/concurrent.js";

/** @typedef {import("./fold/model.js").State} State */
/** @typedef {import("./fold/model.js").Change} Change */
/** @typedef {import("./fold/model.js").ModelCall} ModelCall */
/** @typedef {import("./fold/model.js").ToolCall} ToolCall */
/** @typedef {import("./fold/model.js").Invocation} Invocation */
/** @typedef {import("./fold/model.js").Barrier} Barrier */
/** @typedef {import("./fold/model.js").Applied} Applied */
/** @typedef {import("./fold/model.js").Run} Run */
/** @typedef {import("./fold/publication.js").Publication} Publication */
/** @typedef {import("./fold/concurrent.js").ConcurrentChild} ConcurrentChild */
/** @typedef {import("./fold/concurrent.js").ConcurrentGroup} ConcurrentGroup */
