"""The barrier driver: fork branches onto an anyio task group, then join them.

Theory of operation. ``run_steps`` validates the requests, gives each a :class:`Scope`
over the caller's current view, and starts branches **in request order** — the starting
loop acquires the concurrency limiter itself, so the queue order does not depend on the
backend's task scheduling. Each branch runs in its own cancel scope with its own frame and
scope context variables. The join (:mod:`runtime._join`) then decides what publishes, and
this module applies it: to the canonical state for a root barrier (with an optional
checkpoint save, rolled back if the save fails), or into the calling branch's scope.

Why each branch catches its own exceptions: an ordinary branch error is data (it lands in
``rejected``), so the task group only ever sees cancellation; callers never have to
untangle an exception group.

Cancellation: a cancel token (the caller's, linked to the calling branch's) is watched by
one task. Queued branches never start; running branches are told through the token (model
calls stop at once); after the flow's grace period, branches still running lose their
publication rights (their scope closes, late writes are dropped) and are cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from . import events as ev
from ._join import DELETED, JoinResult, join
from .errors import (
    BarrierInvalidError,
    BranchBudgetError,
    BranchCancelledError,
    BranchTimeoutError,
    ParallelCheckpointError,
    ParallelConfigurationError,
    ParallelDuplicateKeyError,
    ParallelLimitError,
    StateValueError,
)
from .events import safe_list, safe_value
from .jsonutil import json_copy
from .parallel import (
    BarrierUsage,
    BranchResult,
    CancelToken,
    Checkpoint,
    FailurePolicy,
    ParallelBatchResult,
    Publication,
    RunStepRequest,
    format_path,
)
from .scope import Scope, View, current_scope

if TYPE_CHECKING:
    from .flow import Flow
    from .step import Step

_POLICIES = ("retain-successes", "atomic")
_CHECKPOINTS = ("none", "root-join")


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _normalise(flow: Flow, requests: Sequence[RunStepRequest | Mapping[str, Any]]) -> list[
    tuple[Step, str, Mapping[str, Any], str | None]
]:
    """Registered step, key, frozen params and message per request; config errors raise."""
    if not requests:
        raise ParallelConfigurationError("run_steps() needs at least one request.")
    items: list[RunStepRequest] = []
    for raw in requests:
        if isinstance(raw, RunStepRequest):
            items.append(raw)
        elif isinstance(raw, Mapping):
            unknown = set(raw) - {"step", "key", "params", "user_message"}
            if unknown or "step" not in raw:
                raise ParallelConfigurationError(
                    "A run_steps() request takes step, key, params, user_message; "
                    f"got {sorted(raw)}."
                )
            items.append(RunStepRequest(**raw))
        else:
            raise ParallelConfigurationError(f"Not a run_steps() request: {raw!r}.")
    steps = []
    for item in items:
        try:
            steps.append(flow.require_step(item.step))
        except Exception as exc:
            raise ParallelConfigurationError(str(exc)) from exc
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.name] = counts.get(step.name, 0) + 1
    out = []
    seen: dict[str, int] = {}
    for index, (item, step) in enumerate(zip(items, steps, strict=True)):
        if item.key is not None and not isinstance(item.key, str):
            raise ParallelConfigurationError(
                f"A branch key must be a string, got {type(item.key).__name__} {item.key!r}.")
        key = item.key.strip() if isinstance(item.key, str) else None
        if not key:
            if counts[step.name] > 1:
                raise ParallelConfigurationError(
                    f"Step '{step.name}' appears {counts[step.name]} times in one barrier: every "
                    "request of a repeated step needs a non-empty key."
                )
            key = step.name
        if key in seen:
            raise ParallelDuplicateKeyError(
                f"Requests {seen[key]} and {index} share the branch key '{key}'.",
                extra={"key": key, "indices": [seen[key], index]},
            )
        seen[key] = index
        params = _validate_params(step, key, item.params)
        out.append((step, key, _freeze(params), item.user_message))
    return out


def _validate_params(step: Step, key: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json_copy(dict(params or {}), f"params of branch '{key}'")
    except Exception as exc:
        raise ParallelConfigurationError(str(exc)) from exc
    schema = step.parallel_params_schema()
    if schema is None:
        return data
    try:
        validated: dict[str, Any] = schema.model_validate(data).model_dump(mode="json")
        return validated
    except ValidationError as exc:
        raise ParallelConfigurationError(
            f"params of branch '{key}' ({step.name}) are invalid: {exc.error_count()} error(s): "
            + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()),
            extra={"key": key, "errors": exc.errors(include_url=False)},
        ) from None


async def run_steps(
    caller: Step,
    requests: Sequence[RunStepRequest | Mapping[str, Any]],
    *,
    failure_policy: FailurePolicy = "retain-successes",
    checkpoint: Checkpoint = "none",
    max_concurrency: int | None = None,
    cancel: CancelToken | None = None,
    branch_timeout: float | None = None,
    token_budget: int | None = None,
) -> ParallelBatchResult:
    """Fork, run and join one barrier. See :meth:`runtime.Step.run_steps`."""
    flow = caller.flow
    if failure_policy not in _POLICIES:
        raise ParallelConfigurationError(f"failure_policy must be one of {_POLICIES}.")
    if checkpoint not in _CHECKPOINTS:
        raise ParallelConfigurationError(f"checkpoint must be one of {_CHECKPOINTS}.")
    if max_concurrency is not None and max_concurrency < 1:
        raise ParallelConfigurationError("max_concurrency must be at least 1.")
    if branch_timeout is not None and branch_timeout <= 0:
        raise ParallelConfigurationError("branch_timeout must be positive.")
    if token_budget is not None and token_budget < 1:
        raise ParallelConfigurationError("token_budget must be at least 1.")
    parent = current_scope.get()
    if parent is not None and parent.closed:
        raise BranchCancelledError("This branch lost its publication rights; it cannot fork.")
    plan = _normalise(flow, requests)
    config = flow.parallel_config()
    depth = (parent.depth if parent else 0) + 1
    if depth > config.max_depth:
        raise ParallelLimitError(
            f"Barrier nesting depth {depth} exceeds the flow's limit of {config.max_depth}."
        )
    flow.count_invocations(len(plan), config.max_invocations)

    token = CancelToken(parent.cancel if parent else None)
    if cancel is not None:
        cancel._children.append(token)
        if cancel.cancelled:
            token.cancel(cancel.reason or "cancelled")
    usage = BarrierUsage(budget=token_budget)
    usages = (*(parent.usages if parent else ()), usage)
    fork_view = flow.fork_view()
    prefix = parent.path if parent else ()
    ordinal = flow.next_barrier_ordinal(parent)
    caller_path = parent.path_str if parent else ""
    barrier_id = f"{caller_path}/b{ordinal}" if parent else f"b{ordinal}"
    scopes = [
        Scope(base=fork_view, step=step.name, index=i, key=key, path=(*prefix, (ordinal, i)),
              params=params, cancel=token, channels_of=flow.channels_of, usages=usages,
              depth=depth, barrier_id=barrier_id)
        for i, (step, key, params, _) in enumerate(plan)
    ]
    if flow.observed:
        flow.emit(ev.BarrierForked, path=caller_path, barrier=barrier_id, caller_step=caller.name,
                  requests=[ev.build(ev.BranchRequest, {
                      "index": i, "path": scopes[i].path_str, "step": step.name, "key": key,
                      "params": safe_value(_thaw(params)) if params else {},
                      "user_message": message})
                      for i, (step, key, params, message) in enumerate(plan)],
                  policy=failure_policy, checkpoint=checkpoint, max_concurrency=max_concurrency,
                  branch_timeout=branch_timeout, token_budget=token_budget,
                  base=caller_path if parent else "canonical")
    outcomes: list[BranchResult | None] = [None] * len(plan)
    cancel_scopes: dict[int, anyio.CancelScope] = {}
    reasons: dict[int, BaseException] = {}
    finished: list[str] = []
    """Branch paths in completion order (join.reduced reports it beside request order)."""

    def report(index: int, started: bool) -> None:
        outcome = outcomes[index]
        if outcome is None or not flow.observed:
            return
        scope = scopes[index]
        if outcome.status == "fulfilled":
            flow.emit(ev.BranchFulfilled, path=scope.path_str, barrier=barrier_id, index=index,
                      key=scope.key, output=safe_value(outcome.output))
        else:
            assert outcome.error is not None
            flow.emit(ev.BranchRejected, path=scope.path_str, barrier=barrier_id, index=index,
                      key=scope.key, error=ev.error_info(outcome.error),
                      cancelled=isinstance(outcome.error, BranchCancelledError),
                      started=started)

    def fulfil(index: int, output: Any) -> None:
        # A branch that lost its publication rights (grace expired, budget spent) is not
        # fulfilled even if it returned before noticing: its writes were dropped.
        if not scopes[index].closed:
            step, key, _, _ = plan[index]
            with contextlib.suppress(StateValueError):  # the join reports non-JSON outputs
                output = json_copy(output)  # plain JSON out, e.g. frozen params as dicts
            outcomes[index] = BranchResult(index, key, step.name, scopes[index].path,
                                           "fulfilled", output=output)

    def settle(index: int, error: BaseException, started: bool = True) -> None:
        step, key, _, _ = plan[index]
        outcomes[index] = BranchResult(index, key, step.name, scopes[index].path, "rejected",
                                       error=error, started=started)

    def exhaust() -> None:
        usage.exhausted = True
        for index, cs in cancel_scopes.items():
            reasons.setdefault(index, BranchBudgetError(
                f"The barrier's token budget of {token_budget} ran out."))
            scopes[index].closed = True
            cs.cancel()
        token.cancel("token budget exhausted")

    usage.on_exhausted.append(exhaust)

    drained: list[anyio.Event] = []

    async def branch(index: int, limiter: anyio.CapacityLimiter | None) -> None:
        step, key, _, message = plan[index]
        scope = scopes[index]
        flow.emit(ev.BranchStarted, path=scope.path_str, barrier=barrier_id, index=index,
                  key=key, step=step.name)
        try:
            with anyio.CancelScope() as cs:
                cancel_scopes[index] = cs
                if branch_timeout is None:
                    output = await flow.run_branch(step, scope, message)
                    fulfil(index, output)
                else:
                    with anyio.move_on_after(branch_timeout) as deadline:
                        output = await flow.run_branch(step, scope, message)
                        fulfil(index, output)
                    if deadline.cancelled_caught:
                        scope.closed = True
                        reasons[index] = BranchTimeoutError(
                            f"Branch {scope.path_str} ({key}) ran longer than "
                            f"{branch_timeout} s.")
        except Exception as exc:  # ordinary branch errors are data, not task-group failures
            settle(index, exc)
        finally:
            cancel_scopes.pop(index, None)
            if limiter is not None:
                limiter.release_on_behalf_of(index)
            if drained and not cancel_scopes:
                drained[0].set()
        if outcomes[index] is None:
            settle(index, reasons.get(index) or BranchCancelledError(
                f"Branch {scope.path_str} ({key}) did not finish within the cancellation "
                "grace period; its writes were dropped."))
        finished.append(scope.path_str)
        report(index, started=True)

    async def watch_cancel() -> None:
        await token.wait()
        drained.append(anyio.Event())
        flow.emit(ev.CancelRequested, path=caller_path, barrier=barrier_id,
                  reason=token.reason or "cancelled")
        flow.emit(ev.CancelPropagated, path=caller_path, barrier=barrier_id,
                  running=[scopes[i].path_str for i in sorted(cancel_scopes)],
                  queued=[s.path_str for s, o in zip(scopes, outcomes, strict=True)
                          if o is None and s.index not in cancel_scopes])
        if cancel_scopes:
            with anyio.move_on_after(config.cancellation_grace):
                await drained[0].wait()
        late = sorted(cancel_scopes)
        for index in late:
            scopes[index].closed = True  # late writes are dropped from here on
            cancel_scopes[index].cancel()
        if late:
            flow.emit(ev.CancelGraceExpired, path=caller_path, barrier=barrier_id,
                      closed=[scopes[i].path_str for i in late])

    # Without a concurrency limit every branch starts at once; no limiter to pay for.
    limiter = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None
    async with anyio.create_task_group() as outer:
        outer.start_soon(watch_cancel)
        async with anyio.create_task_group() as tg:
            for index in range(len(plan)):
                if limiter is not None:
                    await limiter.acquire_on_behalf_of(index)
                if token.cancelled:
                    if limiter is not None:
                        limiter.release_on_behalf_of(index)
                    for rest in range(index, len(plan)):
                        settle(rest, BranchBudgetError(
                            f"The barrier's token budget of {token_budget} ran out before "
                            "this branch started.") if usage.exhausted else BranchCancelledError(
                            f"Cancelled before it started: {token.reason}."), started=False)
                        report(rest, started=False)
                    break
                tg.start_soon(branch, index, limiter)
        outer.cancel_scope.cancel()

    usage.on_exhausted.clear()
    branches = tuple(o for o in outcomes if o is not None)
    return await _publish(flow, parent, branches, scopes, failure_policy, checkpoint,
                          cancelled=token.cancelled, barrier_id=barrier_id, finished=finished,
                          fork_view=fork_view)


async def _publish(
    flow: Flow,
    parent: Scope | None,
    branches: tuple[BranchResult, ...],
    scopes: list[Scope],
    policy: FailurePolicy,
    checkpoint: Checkpoint,
    *,
    cancelled: bool,
    barrier_id: str,
    finished: list[str],
    fork_view: View,
) -> ParallelBatchResult:
    caller_path = parent.path_str if parent else ""
    # A nested join reduces from its caller's fork-time view (the outer join re-reduces
    # everything in request-path order); a root join from the canonical state as it is
    # now, so concurrent root barriers of one caller keep each other's contributions.
    try:
        result = join(branches, scopes, policy=policy,
                      caller_view=fork_view if parent is not None else flow.live_view(),
                      channels_of=flow.channels_of)
    except BarrierInvalidError as exc:
        flow.emit(ev.JoinInvalidated, path=caller_path, barrier=barrier_id,
                  error=ev.error_info(exc), provenance=safe_value(exc.extra.get("provenance",
                                                                                 [])))
        raise
    fields = tuple(result.values)
    if flow.observed:
        _report_join(flow, result, parent, caller_path, barrier_id, finished)
    if parent is not None:
        parent.absorb(result.writes, result.contributions)
        publication = Publication(policy, bool(fields), "caller-scope", fields,
                                  tuple(result.discarded), checkpoint)
        return ParallelBatchResult(branches, publication, cancelled)
    undo = flow.apply_publication({k: (None if v is DELETED else v, v is DELETED)
                                   for k, v in result.values.items()})
    revision = None
    checkpointed = False
    if checkpoint == "root-join" and fields:
        try:
            revision = await flow.checkpoint_session()
            checkpointed = True
        except Exception as exc:
            undo()
            error = ParallelCheckpointError(
                f"The root-join checkpoint failed and the join was rolled back: {exc}",
                extra={"fields": [list(f) for f in fields]},
            )
            flow.emit(ev.CheckpointFailed, path="", barrier=barrier_id,
                      error=ev.error_info(error))
            raise error from exc
        flow.emit(ev.CheckpointSaved, path="", barrier=barrier_id, revision=revision)
    publication = Publication(policy, bool(fields), "canonical", fields,
                              tuple(result.discarded), checkpoint, checkpointed, revision)
    return ParallelBatchResult(branches, publication, cancelled)


def _report_join(
    flow: Flow, result: JoinResult, parent: Scope | None, caller_path: str, barrier_id: str,
    finished: list[str],
) -> None:
    for item in result.reductions:
        # A branch contributed itself or through its descendants (bubbled up): its path
        # or any prefix of a contributor's path.
        contributing: set[str] = set()
        for entry in item.inputs:
            parts = entry["path"].split(".")
            contributing.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
        flow.emit(ev.JoinReduced, path=caller_path, barrier=barrier_id, step=item.step,
                  field=item.field, channel=item.channel, initial=safe_value(item.initial),
                  inputs=safe_list(list(item.inputs)),
                  completion_order=[p for p in finished if p in contributing],
                  result=safe_value(item.result))
    writers = {(w.step, w.field): w.path for w in result.writes}
    published = [
        ev.PublishedField(step=step, field=name, value=None if value is DELETED else
                          safe_value(value), deleted=value is DELETED,
                          writer=format_path(writers[(step, name)])
                          if (step, name) in writers else None)
        for (step, name), value in result.values.items()
    ]
    flow.emit(ev.JoinPublished, path=caller_path, barrier=barrier_id,
              target="caller-scope" if parent else "canonical", fields=published,
              discarded=[{"index": d.index, "key": d.key, "reason": d.reason}
                         for d in result.discarded])


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value
