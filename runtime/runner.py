"""The model/tool loop of one turn (PicoFlow's LLM runner).

Theory of operation. The loop always works on the *executing* step — the innermost child
frame, else the cursor. Each pass:

1. If the executing step changed since the last pass (a *crossing*), save the session
   (a mid-turn checkpoint) and let the new step's ``on_crossing`` transform the carried
   message. Child frames never cross: they cannot route.
2. Logic steps run code (``run_logic``) instead of a model.
3. Otherwise append the incoming message, rewrite slot 0 with ``get_prompt()``, and call
   the model with retries (:func:`call_model`).
4. Tool calls are dispatched in call order; a direct reply ends the turn; anything else
   loops for another model call, maybe on a new step.
5. A plain answer goes through ``on_response``: a string ends the turn, a route loops.

A stopped turn (its cancel token fired) starts no new pass and no new model attempt at top
level: :class:`~runtime.errors.TurnCancelledError` ends it there. A call already in flight
is left to the engine's grace period; in a branch, the branch's token stops it at once.
"""

from __future__ import annotations

import math
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from . import current
from . import events as ev
from .barrier import BranchView, current_view
from .current import turn_of
from .dispatch import Outcome, apply_transition, dispatch_tools, to_transition
from .errors import (
    BranchCancelledError,
    FlowDefinitionError,
    ModelBlockedError,
    ModelCallError,
    ModelError,
    ModelTransportError,
)
from .events import safe_value
from .llm import Model, ModelRequest, ModelResponse, describe_model
from .messages import Message, ai_message, human_message, system_message
from .streaming import DeltaCoalescer, listen

if TYPE_CHECKING:
    from .flow import Flow
    from .step import Routable, Step
    from .turn import Turn

BLANK_RESPONSE_NUDGE = "Follow the system prompt and respond properly."


async def run_loop(flow: Flow, message: Message | None) -> str:
    """Run the executing step until a reply is produced; returns the reply text."""
    prior = flow.require_executing_step()
    turn = turn_of(flow)
    while True:
        turn.stop_if_cancelled()  # before a crossing's save or another model call
        step = flow.require_executing_step()
        if step.name != prior.name:
            await flow.save_session()
            message = await step.on_crossing(message, prior.name)
        history = step.get_memory()
        if step.is_logic():
            history.append(message or human_message(step.name, f"Continue to step:{step.name}"))
            reply, message = await _route(flow, step, await step.run_logic())  # type: ignore[attr-defined]
        else:
            if message is not None:
                history.append(message)
            response = await call_model(flow, step)
            if isinstance(response, str):  # a recovery hook's reply ends the turn as is
                history.append(ai_message(step.name, response))
                return response
            if response.tool_calls:
                history.append(ai_message(step.name, response.content, response.tool_calls))
                outcome = await dispatch_tools(flow, step, response.tool_calls)
                if outcome.direct is not None:
                    flow.require_executing_step().get_memory().append(outcome.direct)
                    return outcome.direct.content
                if outcome.ended:  # direct_result(): the branch's output is in its scope
                    return ""
                reply, message = None, outcome.carried
            else:
                answer: Any = response.content
                schema = step.output_schema()
                if schema is not None:
                    answer = schema.model_validate_json(response.content)
                history.append(ai_message(step.name, response.content))
                reply, message = await _route(flow, step, await step.on_response(answer))
        if reply is not None:
            return reply
        prior = step


async def _route(flow: Flow, step: Step, result: Routable) -> tuple[str | None, Message | None]:
    """Apply what ``on_response``/``run_logic`` returned: a reply, or a transition."""
    if isinstance(result, str):
        if step.is_logic():
            step.get_memory().append(ai_message(step.name, result))
        return result, None
    if result is None and step.is_logic():
        return "", None
    transition = to_transition(result)
    if transition is None:
        raise FlowDefinitionError(f"on_response() of step '{step.name}' returned None.")
    outcome = Outcome()
    await apply_transition(flow, step, transition, [], outcome)
    if outcome.direct is not None:
        return outcome.direct.content, None
    return None, outcome.carried


def build_request(flow: Flow, step: Step) -> ModelRequest:
    """Rewrite slot 0 with the step's prompt and snapshot the request."""
    history = step.get_memory()
    prompt = step.get_prompt() or ""
    if not history or history[0].type != "system":
        history.insert(0, system_message(prompt))  # never overwrite a real message
    elif history[0].content != prompt:
        history[0] = system_message(prompt)
    schema = step.output_schema()
    return ModelRequest(
        selection=step.get_model_selection(),
        messages=list(history),
        tools=[spec.schema() for spec in turn_of(flow).exposed_tools(step).values()],
        flow=flow.id,
        step=step.name,
        output_schema=schema.model_json_schema() if schema is not None else None,
    )


async def call_model(flow: Flow, step: Step) -> ModelResponse | str:
    """One model call with PicoFlow's retry loop; a ``str`` is a recovery hook's reply.

    Each attempt's usage is tallied even when the answer is then rejected. A blank answer
    gets a nudge message and a retry; ``check_response`` returning True retries without
    keeping the answer; transport errors and timeouts retry unless a hook says no; a
    refusal goes to ``on_model_blocked`` without retry; other model errors go straight to
    ``on_model_error``. When attempts run out, ``on_model_error`` (step, then flow) may
    supply the reply, else :class:`ModelCallError`. In a cancelled branch the call stops
    at once and no recovery hook runs.
    """
    turn = turn_of(flow)
    call = turn.count_model_call()
    engine = turn.require_engine()
    selection = step.get_model_selection()
    model = engine.resolve_model(flow.id, selection)
    attempts = selection.retry_attempts or 3
    last_error: Exception | None = None
    reason = "error"
    for attempt in range(1, attempts + 1):
        if attempt > 1 and flow.retry_delay > 0:
            await anyio.sleep(flow.retry_delay)
        turn.stop_if_cancelled()  # a stopped turn pays for no further attempt
        if turn.ledger is not None and turn.ledger.pending and current_view.get() is None:
            await turn.flush_ledger()  # before paying for more: ledgered branches are durable
        bus = turn.bus
        if bus is not None and bus.pressure and bus.congested():
            await turn.wait_while_congested()  # back-pressure from a slow sink
        request = build_request(flow, step)
        observed = turn.observed
        if observed:
            turn.emit(ev.ModelStarted, step=step.name, call=call, attempt=attempt,
                      model=describe_model(model, selection),
                      messages=[_message_json(m) for m in request.messages],
                      tools=[t.name for t in request.tools])
        started = time.monotonic()
        attempt_of = (flow, step, call, attempt, started)
        try:
            if observed:  # a streaming adapter's chunks become this attempt's model.delta
                with listen(DeltaCoalescer(partial(_delta, turn, step.name, call, attempt))):
                    response = await _invoke(flow, model, request, step.call_timeout())
            else:
                response = await _invoke(flow, model, request, step.call_timeout())
        except ModelBlockedError as exc:
            _model_failed(*attempt_of, exc, retrying=False)
            recovered = await step.on_model_blocked(exc) or await flow.on_model_blocked(exc)
            if recovered is not None:
                return recovered
            raise
        except (ModelTransportError, TimeoutError) as exc:
            last_error, reason = exc, "transport"
            verdict = await step.should_retry_model_error(exc, attempt)
            if verdict is None:
                verdict = await flow.should_retry_model_error(exc, attempt)
            _model_failed(*attempt_of, exc, retrying=verdict is not False and attempt < attempts)
            if verdict is False:
                break
            continue
        except ModelError as exc:
            _model_failed(*attempt_of, exc, retrying=False)
            recovered = await step.on_model_error(exc) or await flow.on_model_error(exc)
            if recovered is not None:
                return recovered
            raise
        except Exception as exc:
            _model_failed(*attempt_of, exc, retrying=False)
            raise
        turn.tally_tokens(response.usage)
        rejected = response.is_blank or step.check_response(response)
        if observed:
            turn.emit(ev.ModelFinished, step=step.name, call=call, attempt=attempt,
                      latency=round(time.monotonic() - started, 6),
                      content=safe_value(response.content),
                      tool_calls=[safe_value(c.model_dump()) for c in response.tool_calls],
                      input_tokens=response.usage.input_tokens,
                      output_tokens=response.usage.output_tokens,
                      total_tokens=response.usage.total_tokens,
                      finish_reason=response.finish_reason, accepted=not rejected)
        if response.is_blank:
            last_error, reason = ValueError("the model returned a blank response"), "blank"
            step.get_memory().append(human_message(step.name, BLANK_RESPONSE_NUDGE))
            continue
        if rejected:
            last_error, reason = ValueError("check_response() rejected the answer"), "rejected"
            continue
        return response
    assert last_error is not None
    recovered = await step.on_model_error(last_error) or await flow.on_model_error(last_error)
    if recovered is not None:
        return recovered
    raise ModelCallError(
        f"LLM call failed. Reason:{reason}. Error:{last_error}",
        extra={"step": step.name, "attempts": attempts, "reason": reason},
    ) from last_error


def _delta(turn: Turn, step: str, call: int, attempt: int, text: str,
           tool_calls: list[dict[str, Any]], chunks: int) -> None:
    turn.emit(ev.ModelDelta, step=step, call=call, attempt=attempt, text=text,
              tool_calls=tool_calls, chunks=chunks)


async def _invoke(
    flow: Flow, model: Model, request: ModelRequest, timeout: float | None
) -> ModelResponse:
    """One attempt: under the turn's model-call quota, the timeout, and — in a branch —
    the cancel token, which stops an in-flight call at once."""
    view = current_view.get()
    if view is not None and view.cancel.cancelled:
        raise BranchCancelledError(f"Branch {view.path_str} was cancelled: {view.cancel.reason}.")
    limiter = turn_of(flow).model_call_limiter()
    if limiter is None:
        return await _call(model, request, timeout, view)
    async with limiter:
        return await _call(model, request, timeout, view)


async def _call(
    model: Model, request: ModelRequest, timeout: float | None, view: BranchView | None
) -> ModelResponse:
    # One cancel scope serves the timeout and the branch's token, and none is opened when
    # neither applies: a scope costs microseconds, and a fan-out makes a call per branch.
    if view is None and timeout is None:
        return await model.invoke(request)
    deadline = math.inf if timeout is None else anyio.current_time() + timeout
    with anyio.CancelScope(deadline=deadline) as scope:
        # The token cancels this scope the moment it is cancelled (no task waits for it:
        # a waiting task per call would outweigh the call's own bookkeeping in a fan-out).
        stop_watching = view.cancel.on_cancel(scope.cancel) if view is not None else None
        try:
            return await model.invoke(request)
        finally:
            if stop_watching is not None:
                stop_watching()
    if view is not None and view.cancel.cancelled:
        raise BranchCancelledError(
            f"Branch {view.path_str} was cancelled during a model call: {view.cancel.reason}.")
    raise TimeoutError(f"The model call took more than {timeout:g}s.")


def _message_json(message: Message) -> dict[str, Any]:
    data = message.model_dump(mode="json", exclude_defaults=True)
    data["content"] = safe_value(message.content)
    data["type"] = message.type
    return data


def _model_failed(
    flow: Flow, step: Step, call: int, attempt: int, started: float, exc: BaseException,
    *, retrying: bool,
) -> None:
    turn_of(flow).emit(ev.ModelFailed, step=step.name, call=call, attempt=attempt,
              latency=round(time.monotonic() - started, 6), error=ev.error_info(exc),
              retrying=retrying)


current.provide_loop(run_loop)
