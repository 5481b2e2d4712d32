"""A model adapter for any OpenAI-compatible Chat Completions endpoint.

:class:`OpenAICompatibleModel` speaks the Chat Completions protocol (``POST
{base_url}/chat/completions``) on pooled keep-alive HTTP/1.1 connections of its own
(:mod:`runtime.http_pool`, on anyio), so a fan-out of model-calling branches is
bounded by the provider's quotas, not by a thread pool, and reuses its connections.

Why not the official ``openai`` SDK: the adapter is the name users already configure, and
it worked with the runtime's two dependencies; with the SDK it would need an extra
installed. The SDK would also have to be argued out of what it does on its own (retries,
following redirects, reading ``OPENAI_*`` variables, reshaping ``extra_body``), and its
errors translated back into this module's classification. One JSON POST per call needs
little of HTTP, and anyio gives it on asyncio and trio alike.

Calls of all branches of a process to one provider (API root and key) share one
:class:`~runtime.provider_limits.ProviderLimiter`: at most ``max_in_flight`` calls
awaiting an answer, ``requests_per_minute`` and ``tokens_per_minute`` over a sliding
minute, and after a 429 (or 503) with ``Retry-After`` no call goes out before the time it
names; the runner's retry then waits there.

Failures are classified for the runner's retry loop:

* connection errors, timeouts and HTTP 408, 409, 429 and 5xx raise
  :class:`~runtime.errors.ModelTransportError` (retried);
* a ``content_filter`` finish reason, a refusal, or an error body whose code is
  ``content_filter`` or ``content_policy_violation`` raises
  :class:`~runtime.errors.ModelBlockedError` (not retried);
* any other status, and a body that is not the expected JSON, raises
  :class:`~runtime.errors.ModelError` (the turn fails).

Redirects are never followed: a misconfigured ``base_url`` fails loudly instead of
carrying the ``Authorization`` header elsewhere. The API key only ever travels in that
header: it is stripped from the request body and redacted from every error message.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Literal

from .errors import ModelBlockedError, ModelError, ModelTransportError
from .http_pool import ConnectionPool, HTTPTimeout, HTTPTransportError
from .jsonutil import replace_lone_surrogates
from .llm import ModelRequest, ModelResponse, strip_secrets
from .openai_thread import post_in_thread
from .openai_wire import Malformed, error_details, excerpt, parse_completion, redact, wire_message
from .provider_limits import (
    ProviderLimiter,
    ProviderLimits,
    provider_identity,
    retry_after_seconds,
    shared_limiter,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"

Transport = Literal["auto", "pooled", "thread"]

_BLOCKED_CODES = frozenset({"content_filter", "content_policy_violation"})
# 429 normally means "slow down", but an exhausted quota will not recover by retrying.
_NOT_RETRYABLE_CODES = frozenset({"insufficient_quota"})
_API_KEY_PARAM = re.compile(r"^api[-_]?key$", re.IGNORECASE)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A surrogate's escape in a reply's JSON (a pair's half, or a lone one)."""
# The adapter owns these body fields: the model comes from the selection, the messages
# from the request, and a streamed answer could not be parsed.
_RESERVED_PARAMS = frozenset({"model", "messages", "stream"})
_OUTPUT_BUDGET_PARAMS = ("max_completion_tokens", "max_tokens")
# Providers count a prompt at roughly four bytes of JSON per token; near enough to
# admit a call, and corrected by the reported usage afterwards.
_BYTES_PER_TOKEN = 4

_POOL = ConnectionPool()
"""The process's connections, shared by every adapter that is not given a pool."""


class OpenAICompatibleModel:
    """A :class:`~runtime.llm.Model` backed by an OpenAI-compatible HTTP endpoint.

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
        timeout: seconds for connecting and for each read of the reply.
        extra_headers: added to every request (e.g. an organisation header).
        max_in_flight: calls to this provider awaiting an answer at once, process-wide
            (None: unlimited).
        requests_per_minute: calls to this provider in any 60 seconds (None: unlimited).
        tokens_per_minute: tokens of this provider in any 60 seconds (None: unlimited).
        limiter: use this limiter for every call instead of the process's shared one for
            the provider (the three limits above are then ignored); gives tests a clock.
        transport: ``pooled`` (async, keep-alive connections), ``thread`` (a blocking
            ``urllib`` call per request in a worker thread: honours ``HTTP(S)_PROXY``,
            at most 40 at once), or ``auto``: ``thread`` when a proxy variable applies to
            ``base_url``, else ``pooled``.
        pool: the connections ``pooled`` uses; the process's shared pool when None.

    Limits are per provider identity (``base_url`` and the key in use, so a per-selection
    key has its own): every instance of a process naming the same provider shares them,
    and when instances configure different limits each limit is the tightest asked for.

    Raises:
        ModelError: ``base_url`` is not an absolute http(s) URL, ``timeout`` is not
            positive, or a limit is not a positive integer.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        extra_headers: Mapping[str, str] | None = None,
        max_in_flight: int | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        limiter: ProviderLimiter | None = None,
        transport: Transport = "auto",
        pool: ConnectionPool | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ModelError(f"base_url must be an absolute http(s) URL, got {base_url!r}.")
        if timeout <= 0:
            raise ModelError(f"timeout must be positive, got {timeout!r}.")
        if transport not in ("auto", "pooled", "thread"):
            raise ModelError(f"transport must be auto, pooled or thread, got {transport!r}.")
        self.base_url = base_url.rstrip("/")
        self.endpoint = f"{self.base_url}/chat/completions"
        self.timeout = timeout
        self.extra_headers: dict[str, str] = dict(extra_headers or {})
        self.limits = ProviderLimits(max_in_flight, requests_per_minute, tokens_per_minute)
        self.transport: Literal["pooled", "thread"] = (
            transport if transport != "auto" else
            "thread" if _proxied(self.endpoint) else "pooled"
        )
        self.pool = pool or _POOL
        self._limiter = limiter
        self._api_key = api_key or None
        # The same few header sets every call: built once per key (and extra headers).
        self._headers_by_key: dict[str | None, tuple[dict[str, str], dict[str, str]]] = {}

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, timeout: float = 60.0
    ) -> OpenAICompatibleModel:
        """Build from ``OPENAI_BASE_URL`` (default: the OpenAI API), ``OPENAI_API_KEY`` and
        the limits ``PICOFLOW_MODEL_MAX_IN_FLIGHT``, ``PICOFLOW_MODEL_RPM`` and
        ``PICOFLOW_MODEL_TPM`` (unset or ``0``: unlimited).

        Args:
            environ: where to read the variables; empty values count as unset.
            timeout: as for the constructor.

        Raises:
            ModelError: a limit variable that is not a non-negative integer.
        """
        base_url = environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        limits = ProviderLimits.from_env(environ)
        return cls(
            base_url, environ.get("OPENAI_API_KEY") or None, timeout=timeout,
            max_in_flight=limits.max_in_flight,
            requests_per_minute=limits.requests_per_minute,
            tokens_per_minute=limits.tokens_per_minute,
        )

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key={key})"

    async def aclose(self) -> None:
        """Close the idle connections this adapter's pool keeps for the current event
        loop (before the loop ends, to close them politely rather than leave them to the
        garbage collector). The adapter stays usable."""
        await self.pool.aclose()

    def limiter_for(self, api_key: str | None) -> ProviderLimiter:
        """The limiter the calls made with ``api_key`` go through."""
        if self._limiter is not None:
            return self._limiter
        return shared_limiter(provider_identity(self.base_url, api_key), self.limits)

    # -- the Model protocol --------------------------------------------------------------

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to the endpoint, within the provider's limits, and translate
        the answer.

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
        limiter = self.limiter_for(api_key)
        admission = await limiter.acquire(_estimate_tokens(request, payload))
        try:
            status, reply_headers, raw = await self._send(payload, headers, api_key)
            retry_after = None
            if status in (429, 503):
                retry_after = retry_after_seconds(reply_headers.get("retry-after"),
                                                  limiter.clock)
                if retry_after is not None:
                    limiter.pause(retry_after)
            response = self._response_from(status, raw, api_key, retry_after)
            admission.settle(response.usage.total_tokens)
            return response
        finally:
            admission.release()

    # -- request -------------------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (without any secret)."""
        body: dict[str, Any] = {
            "model": request.selection.name,
            "messages": [wire_message(m) for m in request.messages],
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
        cached = self._headers_by_key.get(api_key)
        if cached is None or cached[0] != self.extra_headers:  # built for other extras
            cached = self._headers_by_key[api_key] = (dict(self.extra_headers),
                                                      self._build_headers(api_key))
        return cached[1]

    def _build_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            # Some gateways reject a client's default agent string outright.
            "User-Agent": "picoflow-runtime",
            **self.extra_headers,
        }
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        return headers

    async def _send(
        self, payload: bytes, headers: dict[str, str], api_key: str | None
    ) -> tuple[int, dict[str, str], bytes]:
        """POST the payload; returns the status, headers and body of any reply.

        Only failures to get a reply at all raise here, always as transport errors.
        """
        if self.transport == "thread":
            try:
                return await post_in_thread(self.endpoint, payload, headers, self.timeout)
            except HTTPTimeout:
                raise self._transport(f"timed out after {self.timeout:g}s", api_key) from None
            except HTTPTransportError as exc:
                raise self._transport(f"connection failed: {exc}", api_key) from None
        try:
            reply = await self.pool.request(
                "POST", self.endpoint, headers=headers, body=payload, timeout=self.timeout
            )
        except HTTPTimeout:
            raise self._transport(f"timed out after {self.timeout:g}s", api_key) from None
        except HTTPTransportError as exc:
            raise self._transport(f"connection failed: {exc}", api_key) from None
        return reply.status, reply.headers, reply.body

    def _transport(self, what: str, api_key: str | None) -> ModelTransportError:
        return ModelTransportError(
            redact(f"Request to {self.endpoint} {what}.", api_key, self._api_key),
            extra={"url": self.endpoint},
        )

    # -- response ------------------------------------------------------------------------

    def _response_from(
        self, status: int, raw: bytes, api_key: str | None, retry_after: float | None = None
    ) -> ModelResponse:
        def hide(text: str) -> str:
            return redact(text, api_key, self._api_key)

        text = raw.decode("utf-8", errors="replace")

        def cut() -> str:  # only an error quotes the body
            # Redact before cutting, so a truncated key cannot slip past the redaction.
            return excerpt(hide(text))

        try:
            data: Any = json.loads(text)
        except ValueError:
            data = None
        if _SURROGATE_ESCAPE.search(text):  # rare: only then is the reply walked
            data = replace_lone_surrogates(data)
        if not 200 <= status < 300 or (isinstance(data, dict) and "choices" not in data
                                       and "error" in data):
            raise self._http_error(status, data, cut(), hide, retry_after)
        if data is None:
            raise ModelError(
                f"{self.endpoint} returned a non-JSON body (HTTP {status}): {cut()}",
                extra={"status": status, "url": self.endpoint},
            )
        try:
            return parse_completion(data)
        except Malformed as exc:
            raise ModelError(
                f"{self.endpoint} returned a malformed chat completion ({exc}): {cut()}",
                extra={"status": status, "url": self.endpoint},
            ) from None

    def _http_error(
        self, status: int, data: Any, cut: str, hide: Callable[[str], str],
        retry_after: float | None,
    ) -> ModelError:
        message, codes = error_details(data)
        detail = excerpt(hide(message)) if message else cut
        extra: dict[str, Any] = {"status": status, "url": self.endpoint}
        if codes:
            extra["code"] = codes[0]
        if retry_after is not None:
            extra["retry_after"] = retry_after
        if _BLOCKED_CODES.intersection(codes):
            return ModelBlockedError(f"The provider refused the request: {detail}", extra=extra)
        retryable = status in (408, 409, 429) or status >= 500
        if retryable and not _NOT_RETRYABLE_CODES.intersection(codes):
            return ModelTransportError(
                f"{self.endpoint} returned HTTP {status}: {cut}", extra=extra
            )
        return ModelError(f"{self.endpoint} returned HTTP {status}: {detail}", extra=extra)


def _estimate_tokens(request: ModelRequest, payload: bytes) -> int:
    budget = 0
    for name in _OUTPUT_BUDGET_PARAMS:
        value = request.selection.params.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            budget = value
            break
    return len(payload) // _BYTES_PER_TOKEN + budget


def _proxied(url: str) -> bool:
    """Whether ``HTTP(S)_PROXY`` (and ``NO_PROXY``) route ``url`` through a proxy, which
    only the urllib transport knows how to use."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    if parts.scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")
