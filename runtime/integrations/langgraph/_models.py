"""Chat model calls inside a task, as the model calls of its branch (with their tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime import events as ev

from ._bus import ReplayBus
from ._values import plain

if TYPE_CHECKING:
    from ._superstep import Task


@dataclass(eq=False)
class ModelCall:
    """One chat model call a task made, as its callbacks told it."""

    task: Task
    call: int
    """The call's number within the turn."""
    model: dict[str, Any]
    messages: list[dict[str, Any]]
    tools: list[str]
    started: float
    ended: float | None = None
    response: Any = None
    error: BaseException | None = None


def describe(serialized: Mapping[str, Any] | None, meta: Mapping[str, Any],
             invocation: Mapping[str, Any]) -> dict[str, Any]:
    """The model as ``model.started`` names it: LangChain's provider and model name."""
    name = meta.get("ls_model_name") or invocation.get("model") or invocation.get(
        "model_name") or (serialized or {}).get("name")
    return {"provider": str(meta.get("ls_provider") or invocation.get("_type") or "langchain"),
            "name": str(name or "unknown"), "params": {}}


def messages_of(batches: Any) -> list[dict[str, Any]]:
    """The prompt's messages (the first of LangChain's batches) as ``{type, content}``."""
    first = batches[0] if isinstance(batches, list) and batches else []
    return [{"type": str(getattr(m, "type", "message")),
             "content": plain(getattr(m, "content", m))} for m in first]


def tools_of(invocation: Mapping[str, Any]) -> list[str]:
    """The names of the tools bound to the model (``bind_tools``)."""
    names = []
    for tool in invocation.get("tools") or []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        name = (function or {}).get("name") if isinstance(function, Mapping) else None
        names.append(str(name or (tool.get("name") if isinstance(tool, Mapping) else tool)))
    return names


def render_start(bus: ReplayBus, call: ModelCall) -> None:
    bus.emit_at(call.started, ev.ModelStarted, call.task.path, step=call.task.node,
                call=call.call, attempt=1, model=call.model, messages=call.messages,
                tools=call.tools)


def render_end(bus: ReplayBus, call: ModelCall) -> None:
    at, task = call.ended or call.started, call.task
    latency = max(0.0, at - call.started)
    if call.error is not None:
        bus.emit_at(at, ev.ModelFailed, task.path, step=task.node, call=call.call, attempt=1,
                    latency=latency, error=ev.error_info(call.error), retrying=False)
        return
    generations = getattr(call.response, "generations", None) or [[]]
    first = generations[0][0] if generations and generations[0] else None
    message = getattr(first, "message", None)
    usage = getattr(message, "usage_metadata", None) or {}
    if not usage:  # providers that report usage in llm_output only
        output = getattr(call.response, "llm_output", None) or {}
        raw = output.get("token_usage") or output.get("usage") or {}
        usage = {"input_tokens": raw.get("prompt_tokens", raw.get("input_tokens", 0)),
                 "output_tokens": raw.get("completion_tokens", raw.get("output_tokens", 0))}
    tokens_in, tokens_out = int(usage.get("input_tokens") or 0), int(
        usage.get("output_tokens") or 0)
    info = getattr(first, "generation_info", None) or {}
    meta = getattr(message, "response_metadata", None) or {}
    bus.emit_at(at, ev.ModelFinished, task.path, step=task.node, call=call.call, attempt=1,
                latency=latency,
                content=plain(getattr(message, "content", getattr(first, "text", None))),
                tool_calls=[plain(c) for c in getattr(message, "tool_calls", None) or []],
                input_tokens=tokens_in, output_tokens=tokens_out,
                total_tokens=int(usage.get("total_tokens") or tokens_in + tokens_out),
                finish_reason=str(meta.get("finish_reason") or info.get("finish_reason")
                                  or "stop"),
                accepted=True)
