"""Tool dispatch and transition application.

Dispatch walks the tool calls of one model response **in call order**:

* a tool the step does not expose → warning ``hallucinated tool: <name>`` and an error
  tool message telling the model the tool does not exist;
* an exposed tool without a handler → warning ``missing tool handler: <name>`` and a
  success tool message "input validated";
* arguments that fail validation → an error tool message with the problems, so the model
  can correct itself; the handler is not called;
* otherwise the handler runs and its result is applied (:func:`apply_transition`). When two
  handlers route, each is applied in call order, so the later one wins.

Neither a hallucinated nor an unhandled call ends the turn.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from . import events as ev
from .barrier import DirectResult, current_view
from .current import turn_of
from .errors import FlowDefinitionError, ParallelOutputError, StateValueError, ToolArgumentsError
from .events import safe_value
from .jsonutil import json_copy
from .messages import Message, ToolCall, human_message, tool_message
from .tools import ToolHandler, handlers_of, takes_model
from .transitions import DEFAULT_TOOL_FEEDBACK, ToolContext, Transition, go, tool_context

if TYPE_CHECKING:
    from .flow import Flow
    from .step import Routable, Step


@dataclass
class Outcome:
    """What dispatching one response leaves for the runner."""

    carried: Message | None = None
    """A ``with_message`` for another step, delivered at the crossing."""
    direct: Message | None = None
    """The first direct reply: the turn ends with it, without another model call."""
    ended: bool = False
    """A branch's tool returned ``direct_result()``: the branch ends, its output set."""


def to_transition(result: Routable) -> Transition | None:
    """Normalise what a handler or hook returned; strings are not routes here."""
    from .step import Step

    if result is None or isinstance(result, Transition):
        return result
    if isinstance(result, type) and issubclass(result, Step):
        return go(result)
    raise FlowDefinitionError(
        f"A tool handler returned {type(result).__name__}; return go(...), stay(...), "
        "direct(...), a Step class, or None."
    )


def find_handler(step: Step, name: str) -> ToolHandler | None:
    """Decorated handler (nearest class first), else a plain method named like the tool."""
    handler = handlers_of(type(step)).get(name)
    if handler is not None:
        return handler
    from .step import LogicStep, Step

    method = getattr(type(step), name, None)
    if callable(method) and all(name not in vars(base) for base in (Step, LogicStep)):
        spec = step.flow.require_tool(name)
        params = list(inspect.signature(method).parameters.values())[1:]
        return ToolHandler(spec, method, pass_model=takes_model(params, spec.args_model))
    return None


async def dispatch_tools(flow: Flow, step: Step, calls: list[ToolCall]) -> Outcome:
    """Run the handlers for one response's tool calls and apply their results."""
    outcome = Outcome()
    turn = turn_of(flow)
    for call in calls:
        turn.emit(ev.ToolStarted, step=step.name, name=call.name, call_id=call.id,
                  args=safe_value(call.args))
        result = await _dispatch_one(flow, step, call, outcome)
        turn.emit(ev.ToolFinished, step=step.name, name=call.name, call_id=call.id,
                  status=result.status, result=safe_value(result.text),
                  transition=result.transition, outcome=result.outcome)
    return outcome


@dataclass(frozen=True)
class _CallResult:
    """How one call was answered (what ``tool.finished`` reports)."""

    outcome: Literal["handled", "hallucinated", "unhandled", "invalid_arguments"]
    status: Literal["success", "error"]
    text: Any
    transition: dict[str, Any] | None = None


async def _dispatch_one(flow: Flow, step: Step, call: ToolCall, outcome: Outcome) -> _CallResult:
    history = step.get_memory()
    spec = turn_of(flow).exposed_tools(step).get(call.name)
    if spec is None:
        flow.warn(f"hallucinated tool: {call.name}", step=step.name)
        text = f"Tool '{call.name}' does not exist. Use only the tools you were given."
        history.append(tool_message(step.name, call, text, status="error"))
        return _CallResult("hallucinated", "error", text)
    handler = find_handler(step, call.name)
    if handler is None:
        flow.warn(f"missing tool handler: {call.name}", step=step.name)
        history.append(tool_message(step.name, call, DEFAULT_TOOL_FEEDBACK, status="success"))
        return _CallResult("unhandled", "success", DEFAULT_TOOL_FEEDBACK)
    try:
        args = spec.validate(call.args)
    except ToolArgumentsError as exc:
        history.append(tool_message(step.name, call, exc.message, status="error"))
        return _CallResult("invalid_arguments", "error", exc.message)
    token = tool_context.set(ToolContext(step=step, call=call))
    try:
        result: Any = await handler.call(step, args)
    finally:
        tool_context.reset(token)
    if isinstance(result, DirectResult):
        _end_branch(flow, step, call, result, outcome)
        return _CallResult("handled", "success", result.value, {"kind": "direct_result"})
    transition = to_transition(result)
    if transition is None:
        history.append(tool_message(step.name, call, DEFAULT_TOOL_FEEDBACK, status="success"))
        return _CallResult("handled", "success", DEFAULT_TOOL_FEEDBACK)
    await apply_transition(flow, step, transition, [call], outcome)
    return _CallResult("handled", "success", transition.tool_feedback or DEFAULT_TOOL_FEEDBACK,
                       {"kind": transition.kind, "target": transition.target})


def _end_branch(
    flow: Flow, step: Step, call: ToolCall, result: DirectResult, outcome: Outcome
) -> None:
    view = current_view.get()
    if view is None or view.step != step.name:
        raise FlowDefinitionError(
            "direct_result() is only for tool handlers of a run_steps() branch; use direct() "
            "to answer the user."
        )
    if outcome.ended:
        raise FlowDefinitionError(
            f"Tool '{call.name}' returned a second direct_result() in one model response."
        )
    try:
        value = json_copy(result.value, "direct_result() value")
    except StateValueError as exc:  # like a non-JSON output: the barrier is invalid
        error = ParallelOutputError(exc.message, extra={"provenance": [
            {"path": view.path_str, "key": view.key, "step": step.name, "kind": "output"}]})
        view.add_violation(error)
        raise error from None
    view.direct = DirectResult(value)
    outcome.ended = True
    turn_of(flow).emit(ev.BranchDirectResult, barrier=view.barrier_id, tool=call.name,
                       value=safe_value(view.direct.value))
    step.get_memory().append(tool_message(step.name, call, DEFAULT_TOOL_FEEDBACK,
                                          status="success"))


async def apply_transition(
    flow: Flow, source: Step, transition: Transition, calls: list[ToolCall], outcome: Outcome
) -> None:
    """Apply one transition in the documented order (see :mod:`runtime.transitions`)."""
    await flow.goto(transition.target)  # 1
    destination = flow.require_step(transition.target)
    if transition.prompt is not None:  # 2
        destination.save_state({"_prompt": transition.prompt})
    if transition.state:  # 3
        destination.save_state(transition.state)
    if transition.content_type is not None:  # 4
        destination.content_type = transition.content_type
    history = source.get_memory()
    for call in calls:  # 5
        history.append(tool_message(
            source.name, call, transition.tool_feedback or DEFAULT_TOOL_FEEDBACK, status="success"
        ))
    message = transition.message  # 6
    if message is None:
        return
    if isinstance(message, str):
        message = human_message(destination.name, message)
    if message.is_direct:
        outcome.direct = outcome.direct or message
    elif destination.name == source.name:
        history.append(message)
    else:
        outcome.carried = message
