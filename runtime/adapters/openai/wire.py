"""The Chat Completions wire format: messages out; completions, streamed chunks and error
bodies in. Nothing here does I/O.

A streamed answer is assembled (:class:`StreamAssembler`) into the body a non-streamed call
would have returned, and both go through :func:`parse_completion`: the two paths answer,
refuse and fail alike.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from runtime.errors import ModelBlockedError, ModelError
from runtime.jsonutil import replace_lone_surrogates
from runtime.llm import ModelResponse, TokenUsage
from runtime.messages import Message, ToolCall

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
EXCERPT_CHARS = 200
CONTENT_PARTS = "content_parts"
"""The ``Message.additional_kwargs`` key whose list of content parts is sent in place of
the message's text: ``{"type": "text", "text"}``, ``{"type": "image_url", "image_url":
{"url"}}``, ``{"type": "input_audio", "input_audio": {"data", "format"}}``, or any other
part the provider accepts (passed through as given)."""


class Malformed(Exception):
    """A 2xx body that is JSON but not a chat completion; says which part is wrong."""


def wire_message(message: Message) -> dict[str, Any]:
    """One message as the Chat Completions API takes it.

    Raises:
        ModelError: the message's content parts are not a list of typed JSON objects.
    """
    content: Any = message.content
    parts = message.additional_kwargs.get(CONTENT_PARTS) if message.additional_kwargs else None
    if parts is not None:
        if not isinstance(parts, list) or not all(
                isinstance(p, dict) and isinstance(p.get("type"), str) for p in parts):
            raise ModelError(f"A message's {CONTENT_PARTS} must be a list of objects with a "
                             "'type' (text, image_url, input_audio...).")
        content = parts
    if message.type == "system":
        return {"role": "system", "content": content}
    if message.type == "human":
        return {"role": "user", "content": content}
    if message.type == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content}
    wire: dict[str, Any] = {"role": "assistant", "content": content}
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


class StreamAssembler:
    """Collects a streamed answer's chunks (parsed JSON) into the completion body they add
    up to. A field of an unexpected type is skipped here and, when it mattered, reported by
    :func:`parse_completion` as a malformed completion."""

    __slots__ = ("_calls", "_content", "_finish", "_refusal", "_usage")

    def __init__(self) -> None:
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: Any = None
        self._usage: Any = None

    def add(self, chunk: Any) -> tuple[str, list[dict[str, Any]]]:
        """Take one chunk; returns its text and tool-call chunks (for ``stream_delta``)."""
        if type(chunk) is not dict:
            raise Malformed("a streamed chunk is not a JSON object")
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = usage
        choices = chunk.get("choices")
        if not choices or type(choices) is not list or type(choices[0]) is not dict:
            return "", []
        choice = choices[0]
        reason = choice.get("finish_reason")
        if reason is not None:
            self._finish = reason
        delta = choice.get("delta")
        if type(delta) is not dict:
            return "", []
        text = delta.get("content")
        if type(text) is not str:
            text = ""
        elif text:
            self._content.append(text)
        refusal = delta.get("refusal")
        if type(refusal) is str and refusal:
            self._refusal.append(refusal)
        calls = delta.get("tool_calls")
        shown: list[dict[str, Any]] = []
        if calls and type(calls) is list:
            for position, call in enumerate(calls):
                if type(call) is dict:
                    shown.append(self._add_call(call, position))
        return text, shown

    def _add_call(self, call: dict[str, Any], position: int) -> dict[str, Any]:
        index = call.get("index")
        if type(index) is not int:
            index = position
        merged = self._calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
        shown: dict[str, Any] = {"index": index}
        call_id = call.get("id")
        if type(call_id) is str and call_id:
            merged["id"] = shown["id"] = call_id
        function = call.get("function")
        if type(function) is dict:
            name = function.get("name")
            if type(name) is str and name:
                merged["function"]["name"] = shown["name"] = name
            arguments = function.get("arguments")
            if type(arguments) is str and arguments:
                merged["function"]["arguments"] += arguments
                shown["arguments"] = arguments
        return shown

    def completion(self) -> dict[str, Any]:
        """The completion body of what was streamed (as a non-streamed call returns it)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._content)}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        body: dict[str, Any] = {
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            body["usage"] = self._usage
        text = message["content"]
        if not text.isascii():  # a lone surrogate's escape decodes to a code point UTF-8 lacks
            message["content"] = replace_lone_surrogates(text)
        return body


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
