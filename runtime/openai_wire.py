"""The Chat Completions wire format: messages out, completions and error bodies in.

Shared by the transports of :mod:`runtime.openai_compat`; nothing here does I/O.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from .errors import ModelBlockedError
from .jsonutil import replace_lone_surrogates
from .llm import ModelResponse, TokenUsage
from .messages import Message, ToolCall

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
EXCERPT_CHARS = 200


class Malformed(Exception):
    """A 2xx body that is JSON but not a chat completion; says which part is wrong."""


def wire_message(message: Message) -> dict[str, Any]:
    if message.type == "system":
        return {"role": "system", "content": message.content}
    if message.type == "human":
        return {"role": "user", "content": message.content}
    if message.type == "tool":
        return {
            "role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content,
        }
    wire: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.args)},
            }
            for call in message.tool_calls
        ]
    return wire


def parse_completion(data: Any) -> ModelResponse:
    if not isinstance(data, dict):
        raise Malformed("not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Malformed("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise Malformed("choices[0].message is missing")
    content = _text_of(message.get("content"))
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise Malformed("tool_calls is not a list")
    tool_calls = [_tool_call(call, index) for index, call in enumerate(calls)]
    raw_reason = choice.get("finish_reason")
    refusal = message.get("refusal")
    if raw_reason == "content_filter" or (isinstance(refusal, str) and refusal and not content
                                          and not tool_calls):
        reason = refusal if isinstance(refusal, str) and refusal else "content filter"
        raise ModelBlockedError(
            f"The provider refused to answer: {excerpt(reason)}",
            extra={"finish_reason": raw_reason},
        )
    finish: FinishReason
    if raw_reason is None:
        # Some compatible servers omit the reason; infer it rather than report "other".
        finish = "tool_calls" if tool_calls else "stop"
    else:
        finish = _FINISH_REASONS.get(str(raw_reason), "other")
    return ModelResponse(
        content=content, tool_calls=tool_calls, usage=_usage(data.get("usage")),
        finish_reason=finish,
    )


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # Some servers answer with content parts instead of a string.
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    raise Malformed("message content is neither text nor content parts")


def _tool_call(call: Any, index: int) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise Malformed(f"tool_calls[{index}] has no function")
    function = call["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise Malformed(f"tool_calls[{index}] has no function name")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        # Every call needs an id to pair it with its tool message; some servers omit it.
        call_id = f"call_{uuid.uuid4().hex[:24]}"
    return ToolCall(id=call_id, name=name, args=_arguments(function.get("arguments")))


def _arguments(arguments: Any) -> dict[str, Any]:
    """Parse a call's arguments, keeping unparseable text for the model to see.

    Malformed arguments are not a transport problem: passed on as ``{"_raw": text}``, they
    fail the tool's argument validation, and the model gets the problem back as an error
    tool message it can correct.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, dict):
        return arguments
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    if not text.strip():
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"_raw": text}
    if "\\u" in text:  # an escape may have made a lone surrogate
        parsed = replace_lone_surrogates(parsed)
    return parsed if isinstance(parsed, dict) else {"_raw": text}


def _usage(usage: Any) -> TokenUsage:
    if not isinstance(usage, dict):
        return TokenUsage()

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt, completion = count("prompt_tokens"), count("completion_tokens")
    return TokenUsage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=count("total_tokens") or prompt + completion,
    )


def error_details(data: Any) -> tuple[str | None, list[str]]:
    """The provider's error message and codes, from the body shapes servers use.

    OpenAI and Azure send ``{"error": {"message", "code", "type"}}``; other servers send
    ``{"error": "text"}``, ``{"message": ...}`` or ``{"detail": ...}``.
    """
    if not isinstance(data, dict):
        return None, []
    error = data.get("error")
    codes: list[str] = []
    message: Any = None
    if isinstance(error, dict):
        message = error.get("message")
        codes = [str(error[k]) for k in ("code", "type") if error.get(k)]
    elif isinstance(error, str):
        message = error
    else:
        message = data.get("message") or data.get("detail")
    return (str(message) if message else None), codes


def excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"


def redact(text: str, *keys: str | None) -> str:
    # Servers sometimes echo the presented key back in their error text.
    for key in keys:
        if key:
            text = text.replace(key, "***")
    return text
