"""The barrier driver: fork branches onto a task group, then join them.

Theory of operation. :func:`run_barrier` validates the options and requests
(:mod:`._plan`), gives each branch a :class:`~.views.BranchView` over the caller's current
view, and starts branches **in request order** — the starting loop acquires the
concurrency limiter itself, so the queue order does not depend on the backend's task
scheduling (an unlimited barrier starts eight between two turns of the event loop). Each
branch runs in its own task (in asyncio's own task group on asyncio, see :mod:`._spawn`),
stopped by cancelling that task, with its view and execution frame set by the host. The
pure join (:mod:`._join`) then decides what publishes, and :meth:`_Barrier.publish`
applies it: to the canonical state for a root barrier (with an optional checkpoint save,
rolled back if the save fails), or into the calling branch's view.

Why each branch catches its own exceptions: an ordinary branch error is data (it lands in
``rejected``), so the task group only ever sees cancellation; callers never have to
untangle an exception group.

Cancellation: a cancel token (linked to the caller's and to the calling branch's, or for
a root barrier to the turn's) is watched by one task. ``cancel.requested`` is recorded as
the token fires, by a callback on it, so no branch that obeyed the token is recorded as
ending before the request. Queued branches never start;
running branches are told through the token (model calls stop at once); after the flow's
grace period, branches still running lose their publication rights (their view closes,
late writes are dropped) and are cancelled, again once per grace period while they run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, final

import anyio
import anyio.lowlevel

from .. import events as ev
from ..errors import (
    BarrierInvalidError,
    BranchBudgetError,
    BranchCancelledError,
    BranchTimeoutError,
    ParallelCheckpointError,
    ParallelLimitError,
    StateValueError,
)
from ..events import BarrierOptions, safe_value
from ..jsonutil import json_copy
from ._host import BarrierHost
from ._join import DELETED, JoinResult, join
from ._plan import PlannedBranch, plan_branches, thaw
from ._spawn import BranchTask, branch_group
from .ledger import LedgerEntry, TurnLedger, entry_of, request_digest, restore
from .types import (
    BarrierUsage,
    BranchResult,
    BranchStatus,
    CancelToken,
    InvocationPath,
    ParallelBatchResult,
    Publication,
    RunStepRequest,
    format_path,
    no_callback,
)
from .views import BranchView, View, current_view, fork_views, path_head, snapshot_of


async def run_barrier(
    host: BarrierHost,
    caller_step: str,
    requests: Sequence[RunStepRequest | Mapping[str, Any]],
    options: BarrierOptions,
    cancel: CancelToken | None = None,
) -> ParallelBatchResult:
    """Fork, run and join one barrier. See :meth:`runtime.Step.run_steps`."""
    ledgered = options.ledger if options.ledger is not None else host.parallel_config().ledger
    ledger = await host.branch_ledger() if ledgered else None
    barrier = _Barrier(host, caller_step, requests, options, cancel, ledger)
    if barrier.parent is not None:
        await barrier.run()
        return await barrier.publish()
    with host.root_barrier_open():
        await barrier.run()
        return await barrier.publish()


_START_BATCH = 8
"""Branches of an unlimited barrier started between two turns of the event loop while
started branches are waiting (on I/O, say). Started all at once, the first branches of a
wide fork would wait for every other one to run up to its first await before their own
I/O (a connection, a request) got its turn: with 200 model-calling branches, tens of
milliseconds on each of the first requests."""

_VIEW_BATCH = 1024
"""Views made at a time as the branches start (a wide fork's first branches start before
the last ones have a view)."""

_MAX_START_BATCH = 64
"""The most branches started between two turns once the branches started so far all ended
within their turn (nothing of theirs waits: CPU-only branches). The batch doubles up to
this, and is back to :data:`_START_BATCH` as soon as a started branch waits. A turn of the
loop costs tens of µs, a no-op branch about as much; far larger batches lose again, as a
branch then runs long after its task was made (measured on anyio's task group: 1,000 no-op
branches, 8 per turn 1.75x a bare task group, 64 per turn 1.53x, all at once 1.57x; on
asyncio's, 32 to 256 a turn were within the noise of one another)."""


def _result(index: int, key: str, step: str, path: InvocationPath, status: BranchStatus,
            output: Any, error: BaseException | None, started: bool) -> BranchResult:
    """A :class:`BranchResult`, one per branch: frozen for the flows that read it (made as
    :func:`build_frozen` makes one, without a second call)."""
    made = _new(BranchResult)
    _set(made, "__dict__", {"index": index, "key": key, "step": step, "path": path,
                            "status": status, "output": output, "error": error,
                            "started": started})
    return made


_new, _set = object.__new__, object.__setattr__


# The events of every branch, built by their makers: one call each, no dict merge.
_REQUEST = ev.record_maker(ev.BranchRequest)
_STARTED = ev.event_maker(ev.BranchStarted)
_FULFILLED = ev.event_maker(ev.BranchFulfilled)
_REUSED = ev.event_maker(ev.BranchReused)


@final
class _Barrier:
    """One barrier from fork to publication; used once, by :func:`run_barrier`."""

    def __init__(
        self,
        host: BarrierHost,
        caller_step: str,
        requests: Sequence[RunStepRequest | Mapping[str, Any]],
        options: BarrierOptions,
        cancel: CancelToken | None,
        ledger: TurnLedger | None = None,
    ) -> None:
        # Fork. Everything that can be wrong with the barrier raises here, before any
        # branch starts: a closed caller, bad requests, depth and invocation limits.
        parent = current_view.get()
        if parent is not None and parent.closed:
            raise BranchCancelledError("This branch lost its publication rights; it cannot fork.")
        self.host, self.options, self.parent = host, options, parent
        self.plan: list[PlannedBranch] = plan_branches(host, requests)
        self.config = host.parallel_config()
        depth = (parent.depth if parent else 0) + 1
        if depth > self.config.max_depth:
            raise ParallelLimitError(
                f"Barrier nesting depth {depth} exceeds the flow's limit of "
                f"{self.config.max_depth}."
            )
        host.count_invocations(len(self.plan), self.config.max_invocations)

        # A root barrier answers to the turn's token, so stopping the turn stops it (and,
        # through the branches' tokens, every barrier nested in it); a barrier forked after
        # that starts cancelled.
        self.token = CancelToken(parent.cancel if parent else host.turn_cancel, cancel)
        self.usage = BarrierUsage(budget=options.token_budget)
        self.usage.on_exhausted.append(self._exhaust)
        # A nested fork reads the calling branch's view as of now; a root fork the
        # canonical state as of now. Either way later writes stay invisible to it.
        self.fork_view: View = snapshot_of(parent) if parent is not None else host.snapshot()
        if parent is None:
            ordinal = host.next_root_ordinal()
        else:
            ordinal, parent.barriers = parent.barriers, parent.barriers + 1
        self.caller_path = parent.path_str if parent else ""
        self.id = f"{self.caller_path}/b{ordinal}" if parent else f"b{ordinal}"
        usages = (*(parent.usages if parent else ()), self.usage)
        self.views: list[BranchView] = []
        """The branches' views, by request index: made as the branches start (see
        :meth:`_views_upto`), so a wide fork is reported before they all exist."""
        self._view_args = (self.fork_view, self.plan, ordinal, self.token, host.channels_of,
                           usages, depth, self.id, parent)
        self._head = path_head(parent, ordinal)
        self.ledger = ledger
        self.digests: list[str] = []
        """Each request's digest, for a ledgered barrier."""
        self.reuse: dict[int, LedgerEntry] = {}
        """Branches a resumed turn restores from the ledger instead of running them."""
        self.reruns: dict[int, str] = {}
        """Why a ledgered branch runs again (its request changed), by request index."""
        self.unjson: set[int] = set()
        """Fulfilled branches whose output is not JSON (the join refuses them)."""
        if ledger is not None:
            self._match(ledger)
        self.outcomes: list[BranchResult | None] = [None] * len(self.plan)
        self.running: set[int] = set()
        """Request indices of the branches running now."""
        self.tasks: list[BranchTask | None] = [None] * len(self.plan)
        """The task of each running branch, by request index: cancelling it stops the
        branch."""
        self.reasons: dict[int, BaseException] = {}
        """Why the driver stopped a branch (timeout, budget), when it did."""
        self.finished: list[str] = []
        """Branch paths in completion order (join.reduced reports it beside request order)."""
        self.drained: anyio.Event | None = None
        """Set once cancellation was requested and the last running branch ended."""
        self._pages: Iterator[list[Any]] = iter(())
        """The pages of a wide fork's requests after its first: reported as :meth:`run`
        begins."""
        if host.observed:
            self._report_fork(caller_step)
        self._forget_cancel: Callable[[], None] = no_callback
        """Takes back the token's callback that reports its cancellation (set by :meth:`run`)."""

    def _match(self, ledger: TurnLedger) -> None:
        """Digest every request; on a resume, find the ones the ledger holds unchanged."""
        self.digests = [request_digest(item.name, item.params, item.message)
                        for item in self.plan]
        known = ledger.reusable(self.id)
        if not known:
            return
        for index, item in enumerate(self.plan):
            entry = known.get(item.key)
            if entry is None:
                continue
            if entry.digest == self.digests[index] and entry.index == index \
                    and entry.step == item.name:
                self.reuse[index] = entry
            else:
                self.reruns[index] = (
                    "its request (step, params or message) changed since the ledger "
                    "recorded it" if entry.index == index else
                    f"it moved from request {entry.index} to {index} since the ledger "
                    "recorded it")

    def _views_upto(self, stop: int) -> int:
        """Make the views of the requests before ``stop`` that have none yet; how many
        views there are now."""
        views = self.views
        made = len(views)
        if stop > made:
            views.extend(fork_views(*self._view_args, start=made, stop=stop))
        return len(views)

    def _all_views(self) -> list[BranchView]:
        self._views_upto(len(self.plan))
        return self.views

    def _report_fork(self, caller_step: str) -> None:
        """``barrier.forked`` with the first page of the requests: the other pages are made
        and reported as :meth:`run` begins, so a watcher hears of a wide fork as soon as
        of a narrow one."""
        pages = self._fork_pages()
        first, total = next(pages), len(self.plan)
        self.host.emit(ev.BarrierForked, path=self.caller_path, barrier=self.id,
                       caller_step=caller_step, requests=first, **dict(self.options),
                       base=self.caller_path if self.parent else "canonical",
                       count=total if total > len(first) else None)
        self._pages = pages

    def _fork_pages(self) -> Iterator[list[Any]]:
        """The fork's requests in the pages :func:`~runtime.events.fork_pages` cuts, each
        made as its page is cut: from a window of the next ``FORK_PAGE`` requests."""
        plan, head, total = self.plan, self._head, len(self.plan)
        start, window = 0, list[Any]()
        while True:
            stop = min(start + ev.FORK_PAGE, total)
            window += [_REQUEST(index=i, path=head + str(i), step=item.name, key=item.key,
                                params=safe_value(thaw(item.params)) if item.params else {},
                                user_message=item.message)
                       for i, item in enumerate(plan[start + len(window):stop],
                                                start + len(window))]
            page = ev.first_fork_page(window)
            yield page
            start += len(page)
            if start >= total:
                return
            window = window[len(page):]

    # -- run -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the branches in request order and wait for all of them."""
        # The rest of a wide fork's requests, before any branch starts. A turn of the loop
        # before each page, which no cancellation ends (it reaches the branches below):
        # what watches the run (a recorder) takes the fork's head while they are made.
        for page in self._pages:
            await anyio.lowlevel.cancel_shielded_checkpoint()
            self.host.emit(ev.BarrierRequested, path=self.caller_path, barrier=self.id,
                           first=page[0].index, requests=page)
        # Recorded the moment the token fires, not when a task watching it next runs: a
        # branch that reads the token (or whose wait it ends) may run first, and its end
        # must not be recorded before the request it obeyed. After the fork's requests: a
        # barrier forked under a cancelled token records its request right after them.
        self._forget_cancel = self.token.on_cancel(self._report_cancel)
        # Without a concurrency limit every branch starts at once; no limiter to pay for.
        limit = self.options.max_concurrency
        limiter = anyio.CapacityLimiter(limit) if limit else None
        batch, due = _START_BATCH, _START_BATCH
        reuse, ledger = self.reuse, self.ledger
        token, tasks, run_branch = self.token, self.tasks, self._run_branch
        built = len(self._all_views()) if reuse else 0
        for index in reuse:
            self._reuse(index)
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watch_cancel)
                if ledger is not None:
                    outer.start_soon(ledger.pump)
                async with branch_group() as spawn:
                    for index in range(len(self.plan)):
                        if reuse and index in reuse:
                            continue
                        if limiter is not None:
                            # Its acquire yields to the loop even when a slot is free: the
                            # branch started before runs first, on trio too (which runs
                            # tasks spawned together in an order of its own).
                            await limiter.acquire_on_behalf_of(index)
                        elif index == due:
                            await anyio.lowlevel.checkpoint()
                            batch = _START_BATCH if self.running else min(2 * batch,
                                                                          _MAX_START_BATCH)
                            due = index + batch
                        if token.cancelled:
                            if limiter is not None:
                                limiter.release_on_behalf_of(index)
                            self._never_start(index)
                            break
                        if index == built:
                            built = self._views_upto(index + _VIEW_BATCH)
                        tasks[index] = spawn(run_branch(index, limiter))
                outer.cancel_scope.cancel()
        finally:
            self._forget_cancel()  # a token cancelled once the branches ended asks nothing
            # What the pump has not written yet stays pending, off the join's path: the turn
            # writes it before its next top-level model call, save or ledgered barrier, or
            # as it fails or stops; a turn that ends well drops it unwritten.
        self.usage.on_exhausted.clear()

    def _never_start(self, first: int) -> None:
        """Reject the queued branches from ``first`` on: cancellation came before them."""
        self._all_views()
        for index in range(first, len(self.plan)):
            if self.outcomes[index] is not None:  # restored from the ledger
                continue
            if self.usage.exhausted:
                error: BaseException = BranchBudgetError(
                    f"The barrier's token budget of {self.options.token_budget} ran out "
                    "before this branch started.")
            else:
                error = BranchCancelledError(f"Cancelled before it started: {self.token.reason}.")
            self._settle(index, error, started=False)
            self._report_branch(index, started=False)

    async def _run_branch(self, index: int, limiter: anyio.CapacityLimiter | None) -> None:
        # The branch's task is cancelled itself (grace expired, budget spent), rather than
        # through a cancel scope per branch: one would cost as much as a no-op branch.
        item, view = self.plan[index], self.views[index]
        bus = self.host.bus
        if bus is not None and bus.sinks:  # the maker's own test, before its arguments
            _STARTED(bus, view.path_str, barrier=self.id, index=index, key=item.key,
                     step=item.name, rerun=self.reruns.get(index) if self.reruns else None)
        timeout = self.options.branch_timeout
        self.running.add(index)
        try:
            try:
                if timeout is None:
                    self._fulfil(index, await self.host.run_branch(item.step, view, item.message),
                                 item, view)
                else:
                    with anyio.move_on_after(timeout) as deadline:
                        output = await self.host.run_branch(item.step, view, item.message)
                        self._fulfil(index, output, item, view)
                    if deadline.cancelled_caught:
                        view.closed = True
                        self.reasons[index] = BranchTimeoutError(
                            f"Branch {view.path_str} ({item.key}) ran longer than {timeout} s.")
            except Exception as exc:  # ordinary branch errors are data, not task-group failures
                self._settle(index, exc)
            finally:
                self.running.discard(index)
                self.tasks[index] = None  # not kept past its end: a wide fork would hold all
                if limiter is not None:
                    limiter.release_on_behalf_of(index)
                if self.drained is not None and not self.running:
                    self.drained.set()
        except BaseException:
            if view.closed:  # stopped by this barrier: its outcome is reported as it ends
                self._conclude(index)
            raise
        self._conclude(index)

    def _conclude(self, index: int) -> None:
        """Settle and report a branch that ended; synchronous, as a cancelled task's last
        act may not await."""
        view = self.views[index]
        if self.outcomes[index] is None:
            # Stopped from outside (grace expired, budget spent, timeout): say why.
            self._settle(index, self.reasons.get(index) or BranchCancelledError(
                f"Branch {view.path_str} ({view.key}) did not finish within the cancellation "
                "grace period; its writes were dropped."))
        self.finished.append(view.path_str)
        bus = self.host.bus
        if bus is not None and bus.sinks:  # _report_branch's own test, without the call
            outcome = self.outcomes[index]
            if outcome is not None and outcome.status == "fulfilled":  # most, inline
                _FULFILLED(bus, view.path_str, barrier=self.id, index=index, key=view.key,
                           output=safe_value(outcome.output))
            else:
                self._report_branch(index, started=True)
        if self.ledger is not None:
            self._ledger(index)

    def _ledger(self, index: int) -> None:
        """Queue a fulfilled branch's entry (one with a violation would invalidate the
        barrier again: it runs again instead)."""
        outcome, view = self.outcomes[index], self.views[index]
        assert self.ledger is not None
        if outcome is None or outcome.status != "fulfilled" or view.violations \
                or index in self.unjson:
            return
        bus = self.host.bus
        seq = bus.seq - 1 if bus is not None and bus.sinks else None
        self.ledger.add(entry_of(self.id, view, outcome, self.digests[index],
                                 self.ledger.run_id, seq))

    def _reuse(self, index: int) -> None:
        """Restore a branch from the ledger: its drafts into its view, its output as its
        outcome, its tokens counted, ``branch.reused`` in place of its start and end."""
        entry, view, item = self.reuse[index], self.views[index], self.plan[index]
        restore(view, entry)
        self.host.reuse_tokens(view, entry.tokens)
        self.outcomes[index] = _result(index, item.key, item.name, view.path, "fulfilled",
                                       entry.output, None, True)
        self.finished.append(view.path_str)
        bus = self.host.bus
        if bus is not None and bus.sinks:
            _REUSED(bus, view.path_str, barrier=self.id, index=index, key=item.key,
                    step=item.name, output=safe_value(entry.output),
                    original_run_id=entry.run_id, original_seq=entry.seq,
                    input_tokens=entry.tokens.get("input_tokens", 0),
                    output_tokens=entry.tokens.get("output_tokens", 0),
                    total_tokens=entry.tokens.get("total_tokens", 0))

    def _fulfil(self, index: int, output: Any, item: PlannedBranch, view: BranchView) -> None:
        # A branch that lost its publication rights (grace expired, budget spent) is not
        # fulfilled even if it returned before noticing: its writes were dropped.
        if view.closed:
            return
        if output is not None:  # None is JSON already
            try:
                output = json_copy(output)  # plain JSON out, e.g. frozen params as dicts
            except StateValueError:
                self.unjson.add(index)  # the join reports non-JSON outputs
        self.outcomes[index] = _result(index, item.key, item.name, view.path, "fulfilled",
                                       output, None, True)

    def _settle(self, index: int, error: BaseException, started: bool = True) -> None:
        item = self.plan[index]
        self.outcomes[index] = _result(index, item.key, item.name, self.views[index].path,
                                       "rejected", None, error, started)

    def _report_branch(self, index: int, started: bool) -> None:
        outcome, bus = self.outcomes[index], self.host.bus
        if outcome is None or bus is None or not bus.sinks:
            return
        view = self.views[index]
        if outcome.status == "fulfilled":
            _FULFILLED(bus, view.path_str, barrier=self.id, index=index, key=view.key,
                       output=safe_value(outcome.output))
        else:
            assert outcome.error is not None
            self.host.emit(ev.BranchRejected, path=view.path_str, barrier=self.id, index=index,
                           key=view.key, error=ev.error_info(outcome.error),
                           cancelled=isinstance(outcome.error, BranchCancelledError),
                           started=started)

    # -- cancel --------------------------------------------------------------------------

    def _exhaust(self) -> None:
        """The token budget ran out: every running branch loses its publication rights at
        once (no grace: spending more is what the budget forbids)."""
        self.usage.exhausted = True
        for index in sorted(self.running):
            self.reasons.setdefault(index, BranchBudgetError(
                f"The barrier's token budget of {self.options.token_budget} ran out."))
            self.views[index].closed = True
            self._stop(index)
        self.token.cancel("token budget exhausted")

    def _stop(self, index: int) -> None:
        task = self.tasks[index]
        assert task is not None, "a running branch has a task"
        task.cancel()

    def _report_cancel(self) -> None:
        """``cancel.requested`` and whom it reached, as the token fires (synchronously: see
        ``__init__``); the branches are told by the token itself."""
        host = self.host
        host.emit(ev.CancelRequested, path=self.caller_path, barrier=self.id,
                  reason=self.token.reason or "cancelled")
        self._emit_paged(ev.CancelPropagated, {
            "running": [self.views[i].path_str for i in sorted(self.running)],
            "queued": [v.path_str for v, o in zip(self._all_views(), self.outcomes, strict=True)
                       if o is None and v.index not in self.running]})

    def _emit_paged(self, kind: type[Any], lists: dict[str, list[Any]],
                    **fields: Any) -> None:
        """``kind`` with its per-branch ``lists``, each cut into pages: the event carries
        every list's first page (and ``counts`` when one is cut), ``list.continued`` events
        the rest, list by list, right after it."""
        emit, caller = self.host.emit, self.caller_path
        heads, counts, rest = ev.paged_lists(lists)
        emit(kind, path=caller, barrier=self.id, **fields, **heads, counts=counts)
        of = kind.model_fields["type"].default
        for name, first, items in rest:
            emit(ev.ListContinued, path=caller, barrier=self.id, of=of, name=name,
                 first=first, items=items)

    async def _watch_cancel(self) -> None:
        """Wait out the grace period of running branches, then close the late ones."""
        await self.token.wait()
        self.drained = anyio.Event()
        if self.running:
            with anyio.move_on_after(self.config.cancellation_grace):
                await self.drained.wait()
        late = sorted(self.running)
        for index in late:
            self.views[index].closed = True  # late writes are dropped from here on
            self._stop(index)
        if late:
            self._emit_paged(ev.CancelGraceExpired,
                             {"closed": [self.views[i].path_str for i in late]})
        # On asyncio a task's cancellation is delivered once: a branch that swallowed it
        # (a library retrying on it, say) would keep the barrier open, and a stopped turn
        # waits for its barriers to close. Cancel what still runs again, once per grace
        # period, as trio's cancellation holds until the branch ends.
        while self.running:
            with anyio.move_on_after(self.config.cancellation_grace):
                await self.drained.wait()
            for index in sorted(self.running):
                self._stop(index)

    # -- join and publish ----------------------------------------------------------------

    async def publish(self) -> ParallelBatchResult:
        """Join (validate, reduce) and apply the publication where it belongs."""
        host, parent = self.host, self.parent
        branches = tuple(filter(None, self.outcomes))  # a BranchResult is never false
        # A nested join reduces from its caller's fork-time view (the outer join re-reduces
        # everything in request-path order); a root join from the canonical state as it is
        # now, so concurrent root barriers of one caller keep each other's contributions.
        try:
            result = join(branches, self._all_views(), policy=self.options.policy,
                          caller_view=self.fork_view if parent else host.live_view(),
                          channels_of=host.channels_of)
        except BarrierInvalidError as exc:
            provenance = exc.extra.get("provenance", [])
            self._emit_paged(ev.JoinInvalidated, {"provenance": [
                safe_value(entry) for entry in provenance]}, error=ev.error_info(exc))
            raise
        if host.observed:
            self._report_join(result)
        fields = tuple(result.values)
        policy, checkpoint = self.options.policy, self.options.checkpoint
        cancelled = self.token.cancelled
        if parent is not None:
            parent.absorb(result.writes, result.contributions)
            publication = Publication(policy, bool(fields), "caller-scope", fields,
                                      tuple(result.discarded), checkpoint)
            return ParallelBatchResult(branches, publication, cancelled)
        undo = host.apply_publication({k: (None if v is DELETED else v, v is DELETED)
                                       for k, v in result.values.items()})
        revision = None
        if checkpoint == "root-join" and fields:
            revision = await self._checkpoint(undo, fields)
        publication = Publication(policy, bool(fields), "canonical", fields,
                                  tuple(result.discarded), checkpoint, revision is not None,
                                  revision)
        return ParallelBatchResult(branches, publication, cancelled)

    async def _checkpoint(self, undo: Any, fields: tuple[tuple[str, str], ...]) -> int:
        """Save right after the root join; a failed save rolls the publication back, so the
        session never holds state that was neither saved nor refused as a whole."""
        try:
            revision = await self.host.checkpoint()
        except Exception as exc:
            undo()
            error = ParallelCheckpointError(
                f"The root-join checkpoint failed and the join was rolled back: {exc}",
                extra={"fields": [list(f) for f in fields]},
            )
            self.host.emit(ev.CheckpointFailed, path="", barrier=self.id,
                           error=ev.error_info(error))
            raise error from exc
        self.host.emit(ev.CheckpointSaved, path="", barrier=self.id, revision=revision)
        return revision

    def _report_join(self, result: JoinResult) -> None:
        # This barrier's branches are one level deeper than its caller: a branch contributed
        # itself (its path) or through its descendants (their paths' first `depth` levels).
        depth = len(self.views[0].path) if self.views else 0
        for item in result.reductions:
            contributing = {
                c.path_str if len(c.meta.path) <= depth
                else ".".join(c.path_str.split(".")[:depth]) for c in item.contributions}
            self._emit_paged(ev.JoinReduced, {
                # A value too large to carry is truncated, never the record: its path and
                # key say whose contribution it was.
                "inputs": [{"path": c.path_str, "key": c.meta.key, "value": safe_value(c.value)}
                           for c in item.contributions],
                "completion_order": [p for p in self.finished if p in contributing]},
                step=item.step, field=item.field, channel=item.channel,
                initial=safe_value(item.initial), result=safe_value(item.result))
        writers = {(w.step, w.field): w.path for w in result.writes}
        published = [
            ev.PublishedField(step=step, field=name, value=None if value is DELETED else
                              safe_value(value), deleted=value is DELETED,
                              writer=format_path(writers[(step, name)])
                              if (step, name) in writers else None)
            for (step, name), value in result.values.items()
        ]
        self._emit_paged(ev.JoinPublished, {"discarded": [
            {"index": d.index, "key": d.key, "reason": d.reason} for d in result.discarded]},
            target="caller-scope" if self.parent else "canonical", fields=published)
