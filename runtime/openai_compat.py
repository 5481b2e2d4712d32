"""A model adapter for any OpenAI-compatible Chat Completions endpoint.

:class:`OpenAICompatibleModel` speaks the Chat Completions protocol (``POST
{base_url}/chat/completions``) with nothing but the standard library: the blocking
``urllib.request`` call runs in a worker thread, so the adapter works the same on asyncio
and trio, and a cancelled turn abandons the thread instead of waiting for the socket.

Failures are classified for the runner's retry loop:

* connection errors, timeouts and HTTP 408, 409, 429 and 5xx raise
  :class:`~runtime.errors.ModelTransportError` (retried);
* a ``content_filter`` finish reason, a refusal, or an error body whose code is
  ``content_filter`` or ``content_policy_violation`` raises
  :class:`~runtime.errors.ModelBlockedError` (not retried);
* any other status, and a body that is not the expected JSON, raises
  :class:`~runtime.errors.ModelError` (the turn fails).

The API key only ever travels in the ``Authorization`` header: it is stripped from the
request body and redacted from every error message.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

import anyio.to_thread

from .errors import ModelBlockedError, ModelError, ModelTransportError
from .messages import Message, ToolCall
from .models import ModelRequest, ModelResponse, TokenUsage, strip_secrets

DEFAULT_BASE_URL = "https://api.openai.com/v1"

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}
_BLOCKED_CODES = frozenset({"content_filter", "content_policy_violation"})
# 429 normally means "slow down", but an exhausted quota will not recover by retrying.
_NOT_RETRYABLE_CODES = frozenset({"insufficient_quota"})
_API_KEY_PARAM = re.compile(r"^api[-_]?key$", re.IGNORECASE)
# The adapter owns these body fields: the model comes from the selection, the messages
# from the request, and a streamed answer could not be parsed.
_RESERVED_PARAMS = frozenset({"model", "messages", "stream"})
_EXCERPT_CHARS = 200


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects.

    urllib would turn a redirected POST into a body-less GET and carry the
    ``Authorization`` header to whatever host the redirect names; a misconfigured
    ``base_url`` should fail loudly instead.
    """

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


class OpenAICompatibleModel:
    """A :class:`~runtime.models.Model` backed by an OpenAI-compatible HTTP endpoint.

    One instance may serve many flows and sessions concurrently; it keeps no per-call
    state. ``selection.name`` is sent as the model name and ``selection.params`` are
    merged into the request body (top-level keys replace the adapter's, except
    ``model``, ``messages`` and ``stream``). An ``api_key`` param overrides the
    constructor's key for that selection and is never sent in the body; other
    secret-looking params are dropped.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1``; requests go to
            ``{base_url}/chat/completions``.
        api_key: sent as ``Authorization: Bearer <key>``; None sends no such header.
        timeout: socket timeout in seconds for connecting and for each read.
        extra_headers: added to every request (e.g. an organisation header).

    Raises:
        ModelError: ``base_url`` is not an absolute http(s) URL, or ``timeout`` is not
            positive.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ModelError(f"base_url must be an absolute http(s) URL, got {base_url!r}.")
        if timeout <= 0:
            raise ModelError(f"timeout must be positive, got {timeout!r}.")
        self.base_url = base_url.rstrip("/")
        self.endpoint = f"{self.base_url}/chat/completions"
        self.timeout = timeout
        self.extra_headers: dict[str, str] = dict(extra_headers or {})
        self._api_key = api_key or None
        self._opener = urllib.request.build_opener(_NoRedirect)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, timeout: float = 60.0
    ) -> OpenAICompatibleModel:
        """Build from ``OPENAI_BASE_URL`` (default: the OpenAI API) and ``OPENAI_API_KEY``.

        Args:
            environ: where to read the variables; empty values count as unset.
            timeout: as for the constructor.
        """
        base_url = environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        return cls(base_url, environ.get("OPENAI_API_KEY") or None, timeout=timeout)

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key={key})"

    # -- the Model protocol --------------------------------------------------------------

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to the endpoint and translate the answer.

        Raises:
            ModelTransportError: connection failure, timeout, or HTTP 408/409/429/5xx.
            ModelBlockedError: the provider refused (content filter, policy violation).
            ModelError: any other HTTP error, or a body that is not a chat completion.
        """
        api_key = self._api_key_for(request)
        try:
            payload = json.dumps(
                self.request_body(request), ensure_ascii=False, allow_nan=False
            ).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise ModelError(f"The model request is not plain JSON: {exc}") from None
        headers = self._headers(api_key)
        status, raw = await anyio.to_thread.run_sync(
            functools.partial(self._post, payload, headers, api_key), abandon_on_cancel=True
        )
        return self._response_from(status, raw, api_key)

    # -- request -------------------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (without any secret)."""
        body: dict[str, Any] = {
            "model": request.selection.name,
            "messages": [_wire_message(m) for m in request.messages],
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if request.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.output_schema},
            }
        params = strip_secrets(request.selection.params)
        body.update({k: v for k, v in params.items() if k not in _RESERVED_PARAMS})
        return body

    def _api_key_for(self, request: ModelRequest) -> str | None:
        for key, value in request.selection.params.items():
            if _API_KEY_PARAM.match(str(key)) and isinstance(value, str) and value:
                return value
        return self._api_key

    def _headers(self, api_key: str | None) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            # Some gateways reject urllib's default agent string outright.
            "User-Agent": "picoflow-runtime",
            **self.extra_headers,
        }
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        return headers

    def _post(
        self, payload: bytes, headers: dict[str, str], api_key: str | None
    ) -> tuple[int, bytes]:
        """Blocking POST, run in a worker thread; returns the status and body of any reply.

        Only failures to get a reply at all raise here, always as transport errors.
        """
        req = urllib.request.Request(self.endpoint, data=payload, headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                exc.close()
            return exc.code, raw
        except TimeoutError:
            raise self._transport(f"timed out after {self.timeout:g}s", api_key) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._transport(f"timed out after {self.timeout:g}s", api_key) from None
            raise self._transport(f"connection failed: {exc.reason}", api_key) from None
        except (OSError, http.client.HTTPException) as exc:
            raise self._transport(
                f"connection failed: {type(exc).__name__}: {exc}", api_key
            ) from None

    def _transport(self, what: str, api_key: str | None) -> ModelTransportError:
        return ModelTransportError(
            _redact(f"Request to {self.endpoint} {what}.", api_key, self._api_key),
            extra={"url": self.endpoint},
        )

    # -- response ------------------------------------------------------------------------

    def _response_from(self, status: int, raw: bytes, api_key: str | None) -> ModelResponse:
        def redact(text: str) -> str:
            return _redact(text, api_key, self._api_key)

        text = raw.decode("utf-8", errors="replace")
        # Redact before cutting, so a truncated key cannot slip past the redaction.
        excerpt = _excerpt(redact(text))
        try:
            data: Any = json.loads(text)
        except ValueError:
            data = None
        if not 200 <= status < 300 or (isinstance(data, dict) and "choices" not in data
                                       and "error" in data):
            raise self._http_error(status, data, excerpt, redact)
        if data is None:
            raise ModelError(
                f"{self.endpoint} returned a non-JSON body (HTTP {status}): {excerpt}",
                extra={"status": status, "url": self.endpoint},
            )
        try:
            return _parse_completion(data)
        except _Malformed as exc:
            raise ModelError(
                f"{self.endpoint} returned a malformed chat completion ({exc}): {excerpt}",
                extra={"status": status, "url": self.endpoint},
            ) from None

    def _http_error(
        self, status: int, data: Any, excerpt: str, redact: Callable[[str], str]
    ) -> ModelError:
        message, codes = _error_details(data)
        detail = _excerpt(redact(message)) if message else excerpt
        extra: dict[str, Any] = {"status": status, "url": self.endpoint}
        if codes:
            extra["code"] = codes[0]
        if _BLOCKED_CODES.intersection(codes):
            return ModelBlockedError(f"The provider refused the request: {detail}", extra=extra)
        retryable = status in (408, 409, 429) or status >= 500
        if retryable and not _NOT_RETRYABLE_CODES.intersection(codes):
            return ModelTransportError(
                f"{self.endpoint} returned HTTP {status}: {excerpt}", extra=extra
            )
        return ModelError(f"{self.endpoint} returned HTTP {status}: {detail}", extra=extra)


class _Malformed(Exception):
    """A 2xx body that is JSON but not a chat completion; says which part is wrong."""


def _wire_message(message: Message) -> dict[str, Any]:
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


def _parse_completion(data: Any) -> ModelResponse:
    if not isinstance(data, dict):
        raise _Malformed("not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Malformed("no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _Malformed("choices[0].message is missing")
    content = _text_of(message.get("content"))
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _Malformed("tool_calls is not a list")
    tool_calls = [_tool_call(call, index) for index, call in enumerate(calls)]
    raw_reason = choice.get("finish_reason")
    refusal = message.get("refusal")
    if raw_reason == "content_filter" or (isinstance(refusal, str) and refusal and not content
                                          and not tool_calls):
        reason = refusal if isinstance(refusal, str) and refusal else "content filter"
        raise ModelBlockedError(
            f"The provider refused to answer: {_excerpt(reason)}",
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
    raise _Malformed("message content is neither text nor content parts")


def _tool_call(call: Any, index: int) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise _Malformed(f"tool_calls[{index}] has no function")
    function = call["function"]
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _Malformed(f"tool_calls[{index}] has no function name")
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


def _error_details(data: Any) -> tuple[str | None, list[str]]:
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


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT_CHARS else flat[: _EXCERPT_CHARS - 1] + "…"


def _redact(text: str, *keys: str | None) -> str:
    # Servers sometimes echo the presented key back in their error text.
    for key in keys:
        if key:
            text = text.replace(key, "***")
    return text
