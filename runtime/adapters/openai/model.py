"""A model adapter for any OpenAI-compatible Chat Completions endpoint, on the official
``openai`` SDK (the ``openai`` extra).

:class:`OpenAICompatibleModel` sends each call with ``AsyncOpenAI`` (or
``AsyncAzureOpenAI``, or the client a user passes in), streamed by default: each chunk of
text or of a tool call's arguments is reported with :func:`runtime.streaming.stream_delta`
(the runner turns them into ``model.delta`` events) and the chunks are assembled into the
same :class:`~runtime.llm.ModelResponse` a non-streamed call gives.

Calls of all branches of a process to one provider (API root and key) share one
:class:`~runtime.provider_limits.ProviderLimiter`: at most ``max_in_flight`` calls
awaiting an answer, ``requests_per_minute`` and ``tokens_per_minute`` over a sliding
minute, and after a 429 (or 503) with ``Retry-After`` no call goes out before the time it
names; the runner's retry then waits there. That is why the SDK's own retries are off
(``max_retries=0``) unless asked for: they would retry behind the limiter's back.

Failures are classified for the runner's retry loop:

* connection errors, timeouts, a connection lost mid-answer and HTTP 408, 409, 429 and 5xx
  raise :class:`~runtime.errors.ModelTransportError` (retried; the deltas already shown
  stay);
* a ``content_filter`` finish reason, a refusal, or an error body whose code is
  ``content_filter`` or ``content_policy_violation`` raises
  :class:`~runtime.errors.ModelBlockedError` (not retried);
* any other status, and a body that is not the expected JSON, raises
  :class:`~runtime.errors.ModelError` (the turn fails).

Redirects are not followed by the clients the adapter builds: a misconfigured ``base_url``
fails loudly instead of carrying the ``Authorization`` header elsewhere. The API key only
ever travels in that header: it is stripped from the request body and redacted from every
error message.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import re
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, cast

import anyio
import anyio.lowlevel
import openai
from openai.types.chat import ChatCompletion

from runtime.adapters.openai.transport import ReplayStaleTransport
from runtime.errors import ModelBlockedError, ModelError, ModelTransportError
from runtime.jsonutil import replace_lone_surrogates
from runtime.llm import ModelRequest, ModelResponse, strip_secrets
from runtime.provider_limits import (
    ProviderLimiter,
    ProviderLimits,
    provider_identity,
    retry_after_seconds,
    shared_limiter,
)
from runtime.streaming import listening, stream_delta

from .wire import (
    Malformed,
    StreamAssembler,
    error_details,
    excerpt,
    parse_completion,
    redact,
    wire_message,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
MAX_CONNECTIONS = 512
"""Connections to one provider per event loop when no ``max_in_flight`` bounds them: only
keeps an unbounded fan-out from running out of file descriptors."""
DRAIN_SECONDS = 1.0
"""How long the rest of a streamed answer that failed is read before its connection is
dropped."""
SHARD_CONNECTIONS = 16
"""Connections per shard (see ``_LoopClients``) an event loop's clients are split into."""
KEEPALIVE_EXPIRY = 15.0
"""Seconds an idle connection is kept (servers drop idle keep-alive connections)."""

_BLOCKED_CODES = frozenset({"content_filter", "content_policy_violation"})
# 429 normally means "slow down", but an exhausted quota will not recover by retrying.
_NOT_RETRYABLE_CODES = frozenset({"insufficient_quota"})
_RETRYABLE_EVENT_CODES = frozenset({"server_error", "rate_limit_exceeded", "overloaded_error"})
_API_KEY_PARAM = re.compile(r"^api[-_]?key$", re.IGNORECASE)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A surrogate's escape in a reply's JSON (a pair's half, or a lone one)."""
# The adapter owns these body fields: the model comes from the selection, the messages
# from the request, and whether to stream from the adapter.
_RESERVED_PARAMS = frozenset({"model", "messages", "stream"})
_OUTPUT_BUDGET_PARAMS = ("max_completion_tokens", "max_tokens")
# Providers count a prompt at roughly four bytes of JSON per token; near enough to
# admit a call, and corrected by the reported usage afterwards.
_BYTES_PER_TOKEN = 4
_NO_KEY = "no-key"
"""What the SDK is given when no key is configured (it insists on one); the
``Authorization`` header is then left out of every request."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What the SDK's HTTP library raises when a streamed answer's connection fails while
    it is read (the SDK wraps failures only until the response starts): httpx's
    ``TransportError`` for openai 1.x and 2.x, httpx2's for 3.x."""
    found: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found.append(module.TransportError)
    return tuple(found)


_TRANSPORT_ERRORS = _transport_errors()


class _LoopClients:
    """The SDK clients of one event loop (a connection belongs to the loop that opened it):
    the shards, each on a connection pool of its own, and their copies per API key.

    A call goes to the first shard with fewer than ``SHARD_CONNECTIONS`` calls in flight (a
    new shard is made when all are busy, up to ``limit``), so a few calls share one pool's
    connections and a fan-out spreads over several pools: httpx's pool looks at each of its
    connections (a system call each) whenever a request starts or ends, and over one pool of
    a fan-out's hundreds of connections that scan costs more than the rest of the call.
    """

    __slots__ = ("by_key", "in_flight", "limit", "loop", "make", "own_key", "shards")

    def __init__(self, loop: object, make: Callable[[], openai.AsyncOpenAI], limit: int,
                 own_key: str | None) -> None:
        self.loop = loop
        self.make = make
        self.limit = limit
        self.own_key = own_key
        self.shards: list[openai.AsyncOpenAI] = [make()]
        self.by_key: dict[str | None, list[openai.AsyncOpenAI]] = {}
        self.in_flight = [0]

    def acquire(self, api_key: str | None) -> tuple[openai.AsyncOpenAI, int]:
        """A client for a call, and its shard (to :meth:`release` when the call ends)."""
        in_flight = self.in_flight
        shard = 0
        if in_flight[0] >= SHARD_CONNECTIONS:
            least = 0
            for index, count in enumerate(in_flight):
                if count < SHARD_CONNECTIONS:
                    shard = index
                    break
                if count < in_flight[least]:
                    least = index
            else:
                shard = least
                if len(self.shards) < self.limit:
                    shard = self._grow()
        clients = self.by_key.get(api_key)
        if clients is None or len(clients) < len(self.shards):
            clients = self.shards
            if api_key != self.own_key and api_key is not None:
                clients = [shard.with_options(api_key=api_key) for shard in self.shards]
            self.by_key[api_key] = clients
        in_flight[shard] += 1
        return clients[shard], shard

    def _grow(self) -> int:
        self.shards.append(self.make())
        self.in_flight.append(0)
        return len(self.shards) - 1

    def release(self, shard: int) -> None:
        self.in_flight[shard] -= 1


class OpenAICompatibleModel:
    """A :class:`~runtime.llm.Model` backed by an OpenAI-compatible HTTP endpoint.

    One instance may serve many flows, sessions and event loops concurrently.
    ``selection.name`` is sent as the model name (an Azure deployment's name on Azure) and
    ``selection.params`` are merged into the request body (top-level keys replace the
    adapter's, except ``model``, ``messages`` and ``stream``). An ``api_key`` param
    overrides the constructor's key for that selection and is never sent in the body;
    other secret-looking params are dropped. A message's
    ``additional_kwargs["content_parts"]`` (text, ``image_url``, ``input_audio`` parts) is
    sent in place of its text.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1``; requests go to
            ``{base_url}/chat/completions``. Not needed with ``client`` or
            ``azure_endpoint``.
        api_key: sent as ``Authorization: Bearer <key>``; None sends no such header.
        timeout: seconds for connecting and for each read of the reply (60 when None; a
            given ``client`` keeps its own).
        extra_headers: added to every request (the SDK's ``default_headers``).
        organization: the ``OpenAI-Organization`` header.
        max_in_flight: calls to this provider awaiting an answer at once, process-wide
            (None: unlimited); also sizes the connection pool of the clients built here.
        requests_per_minute: calls to this provider in any 60 seconds (None: unlimited).
        tokens_per_minute: tokens of this provider in any 60 seconds (None: unlimited).
        limiter: use this limiter for every call instead of the process's shared one for
            the provider (the three limits above are then ignored); gives tests a clock.
        stream: stream answers (``model.delta`` events while the model writes); False
            asks for whole answers.
        max_retries: the SDK's own retries (0 when None: the runner retries, within the
            provider limits; a given ``client`` keeps its own).
        client: an ``AsyncOpenAI`` or ``AsyncAzureOpenAI`` configured by the caller, used
            as it is (its base URL, key, headers, retries, HTTP client); the adapter does
            not close it.
        http_client: the HTTP client (``openai.DefaultAsyncHttpxClient`` or the httpx
            client the installed SDK takes) for the SDK client built here; the caller
            owns and closes it, and uses it on one event loop.
        azure_endpoint: an Azure OpenAI resource (``https://NAME.openai.azure.com``):
            calls go to ``AsyncAzureOpenAI`` with ``api_version``, the selection's name
            naming the deployment.
        api_version: the Azure API version (``OPENAI_API_VERSION`` when None).

    Limits are per provider identity (``base_url`` and the key in use, so a per-selection
    key has its own): every instance of a process naming the same provider shares them,
    and when instances configure different limits each limit is the tightest asked for.

    Raises:
        ModelError: ``base_url`` is not an absolute http(s) URL, ``timeout`` is not
            positive, or a limit is not a positive integer.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | None = None,
        extra_headers: Mapping[str, str] | None = None,
        organization: str | None = None,
        max_in_flight: int | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        limiter: ProviderLimiter | None = None,
        stream: bool = True,
        max_retries: int | None = None,
        client: openai.AsyncOpenAI | None = None,
        http_client: Any = None,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
    ) -> None:
        if client is not None:
            base_url = base_url or str(client.base_url)
        elif azure_endpoint is not None:
            base_url = base_url or azure_endpoint
        elif base_url is None:
            raise ModelError("OpenAICompatibleModel needs a base_url (or a client, or an "
                             "azure_endpoint).")
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ModelError(f"base_url must be an absolute http(s) URL, got {base_url!r}.")
        if timeout is not None and timeout <= 0:
            raise ModelError(f"timeout must be positive, got {timeout!r}.")
        if max_retries is not None and max_retries < 0:
            raise ModelError(f"max_retries must not be negative, got {max_retries!r}.")
        self.base_url = base_url.rstrip("/")
        self.endpoint = f"{self.base_url}/chat/completions"
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self.extra_headers: dict[str, str] = dict(extra_headers or {})
        self.organization = organization
        self.limits = ProviderLimits(max_in_flight, requests_per_minute, tokens_per_minute)
        self.stream = stream
        self.max_retries = max_retries if max_retries is not None else 0
        self.azure_endpoint = azure_endpoint
        self.api_version = api_version
        self._limiter = limiter
        self._api_key = api_key or None
        self._client = client
        self._client_options: dict[str, Any] = {}
        if timeout is not None:
            self._client_options["timeout"] = timeout
        if max_retries is not None:
            self._client_options["max_retries"] = max_retries
        if client is not None and self._api_key:
            self._client_options["api_key"] = self._api_key
        self._http_client = http_client
        self._loops: dict[object, _LoopClients] = {}
        """Clients built here, by event loop (the native loop or trio token)."""
        self._single: _LoopClients | None = None
        """The clients of a given ``client`` or ``http_client``, on whichever loop."""
        # Per key, the headers sent with each call: none, or the Authorization header left
        # out when there is no key.
        self._call_headers: dict[str | None, dict[str, Any] | None] = {}

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, *, timeout: float | None = None
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
        """Close the connections the adapter's own clients keep for the current event loop
        (before the loop ends, to close them politely rather than leave them to the garbage
        collector). The adapter stays usable; a given ``client`` or ``http_client`` is
        left to its owner."""
        if self._client is not None or self._http_client is not None:
            return
        clients = self._loops.pop(_current_loop(), None)
        if clients is not None:
            for shard in clients.shards:
                await shard.close()

    def limiter_for(self, api_key: str | None) -> ProviderLimiter:
        """The limiter the calls made with ``api_key`` go through."""
        if self._limiter is not None:
            return self._limiter
        return shared_limiter(provider_identity(self.base_url, api_key), self.limits)

    # -- clients -------------------------------------------------------------------------

    def clients_for(self, api_key: str | None) -> _LoopClients:
        """The SDK clients the calls made with ``api_key`` go through, on this event loop."""
        clients = self._single
        if clients is None:
            if self._client is not None or self._http_client is not None:
                clients = self._single = _LoopClients(None, self._build, 1, self._api_key)
            else:
                loop = _current_loop()
                clients = self._loops.get(loop)
                if clients is None:
                    clients = self._loops[loop] = self._shards(loop, self.limiter_for(api_key))
                    self._forget_finished_loops()
        return clients

    def _shards(self, loop: object, limiter: ProviderLimiter) -> _LoopClients:
        connections = limiter.limits.max_in_flight or MAX_CONNECTIONS
        count = -(-connections // SHARD_CONNECTIONS)
        # A shard takes more than its share only when every shard is full.
        per_shard = connections if count == 1 else min(connections,
                                                       2 * -(-connections // count))
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
            max_connections=per_shard, max_keepalive_connections=per_shard,
            keepalive_expiry=KEEPALIVE_EXPIRY)

        def make() -> openai.AsyncOpenAI:
            # The client's own limits too: they size the transports of any proxies it
            # mounts from the environment.
            return self._build(openai.DefaultAsyncHttpxClient(
                transport=ReplayStaleTransport(limits=limits, verify=_tls()),
                limits=limits, follow_redirects=False, timeout=self.timeout, verify=_tls()))

        return _LoopClients(loop, make, count, self._api_key)

    def _build(self, http_client: Any = None) -> openai.AsyncOpenAI:
        if self._client is not None:
            if self._client_options:
                return self._client.with_options(**self._client_options)
            return self._client
        options: dict[str, Any] = {
            "api_key": self._api_key or _NO_KEY,
            "organization": self.organization,
            "default_headers": self.extra_headers or None,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "http_client": http_client or self._http_client,
        }
        if self.azure_endpoint is not None:
            return openai.AsyncAzureOpenAI(azure_endpoint=self.azure_endpoint,
                                           api_version=self.api_version, **options)
        return openai.AsyncOpenAI(base_url=self.base_url, **options)

    def _forget_finished_loops(self) -> None:
        # A connection refers to its loop: kept after the loop ended, it would keep the
        # loop alive for good. Its sockets are left to the garbage collector.
        for loop in [loop for loop in self._loops if not _alive(loop)]:
            del self._loops[loop]

    def _headers_for(self, api_key: str | None) -> dict[str, Any] | None:
        if api_key in self._call_headers:
            return self._call_headers[api_key]
        headers = None
        if api_key is None and self._client is None:
            headers = {"Authorization": openai.Omit()}
        self._call_headers[api_key] = headers
        return headers

    # -- the Model protocol --------------------------------------------------------------

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to the endpoint, within the provider's limits, and translate
        the answer; streamed, each chunk is reported with
        :func:`~runtime.streaming.stream_delta` as it arrives.

        Raises:
            ModelTransportError: connection failure, timeout, a connection lost mid-answer,
                or HTTP 408/409/429/5xx.
            ModelBlockedError: the provider refused (content filter, policy violation).
            ModelError: any other HTTP error, or a body that is not a chat completion.
        """
        api_key = self._api_key_for(request)
        body = self.request_body(request)
        try:
            size = len(json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8"))
        except (TypeError, ValueError) as exc:
            raise ModelError(f"The model request is not plain JSON: {exc}") from None
        limiter = self.limiter_for(api_key)
        clients = self.clients_for(api_key)
        admission = await limiter.acquire(_estimate_tokens(request, size))
        client, shard = clients.acquire(api_key)
        try:
            response = await self._call(client, body, api_key, limiter)
            admission.settle(response.usage.total_tokens)
            return response
        finally:
            clients.release(shard)
            admission.release()

    # -- request -------------------------------------------------------------------------

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (without any secret)."""
        body: dict[str, Any] = {
            "model": request.selection.name,
            "messages": [wire_message(m) for m in request.messages],
        }
        if self.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
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

    async def _call(self, client: openai.AsyncOpenAI, body: dict[str, Any],
                    api_key: str | None, limiter: ProviderLimiter) -> ModelResponse:
        def hide(text: str) -> str:
            return redact(text, api_key, self._api_key)

        headers = self._headers_for(api_key)
        try:
            # The SDK's own POST, with the body as built here (create()'s typed parameters
            # would walk, and could reshape, every message of every call), its reply read
            # here: as server-sent events, or as one JSON body (stream=False, or a server
            # that does not stream), parsed into JSON only (typed chunk objects would cost
            # more than the reading).
            options: Any = {"headers": headers} if headers else {}
            # A request that met a pooled connection the server had closed was sent again
            # by the transport (ReplayStaleTransport) of the clients built here.
            stream = await client.post(
                "/chat/completions", cast_to=ChatCompletion, body=body, options=options,
                stream=True, stream_cls=openai.AsyncStream[object])
            return self._parse(await self._read(stream, hide), 200, "", hide)
        except openai.APIStatusError as exc:
            raise self._status_error(exc, hide, limiter) from None
        except openai.APITimeoutError:
            raise self._transport(f"timed out after {self.timeout:g}s", hide) from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise self._transport(f"connection failed: {_describe(cause)}", hide) from None

    async def _read(self, stream: Any, hide: Callable[[str], str]) -> Any:
        """Read an answer to its end, reporting each streamed chunk; the completion body.

        The server-sent events are read here from the SDK's response, not through its
        ``AsyncStream``: that one leaves its byte iterator unfinished after ``[DONE]`` (on
        trio, an unclosed async generator at every call) and drains the rest of the body
        under a cancel scope of its own, which cost as much as the rest of the reading.
        """
        response = stream.response
        if "text/event-stream" not in response.headers.get("content-type", ""):
            # A whole answer (not asked to stream, or a server that does not).
            try:
                text = (await response.aread()).decode("utf-8", "replace")
            except _TRANSPORT_ERRORS as exc:
                raise self._transport(f"lost the connection: {_describe(exc)}", hide) from None
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.close()
            whole = _json(text)
            if whole is None:
                raise ModelError(f"{self.endpoint} returned a non-JSON body (HTTP 200): "
                                 f"{excerpt(hide(text))}",
                                 extra={"status": 200, "url": self.endpoint})
            return whole
        assembler = StreamAssembler()
        show = listening()
        chunks = response.aiter_bytes()
        pending = b""
        data: list[bytes] = []
        failure: ModelError | None = None
        try:
            async for received in chunks:
                pending += received
                while failure is None and (end := pending.find(b"\n")) >= 0:
                    line, pending = pending[:end].rstrip(b"\r"), pending[end + 1:]
                    if line.startswith(b"data:"):
                        data.append(line[6:] if line[5:6] == b" " else line[5:])
                        continue
                    if line or not data:  # a comment, another field, or no event yet
                        continue
                    payload = b"\n".join(data)
                    data = []
                    if payload == b"[DONE]":
                        continue  # read on to the body's end: the connection is reused
                    try:
                        text, calls = assembler.add(self._event(payload, hide))
                    except Malformed as exc:
                        failure = ModelError(f"{self.endpoint} streamed a malformed chunk "
                                             f"({exc})", extra={"url": self.endpoint})
                    except ModelError as exc:
                        failure = exc
                    else:
                        if show and (text or calls):
                            stream_delta(text, calls)
                if failure is not None:
                    # The rest of the body is read, briefly, rather than left to a byte
                    # iterator the garbage collector would finish.
                    with anyio.move_on_after(DRAIN_SECONDS):
                        async for _ in chunks:
                            pass
                    raise failure
        except _TRANSPORT_ERRORS as exc:
            what = ("timed out" if "Timeout" in type(exc).__name__
                    else "lost the connection") + " mid-answer"
            raise self._transport(f"{what}: {_describe(exc)}", hide) from None
        finally:
            # Closing gives the connection back (or drops it, read halfway), even when the
            # call was cancelled.
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await stream.close()
        return assembler.completion()

    def _event(self, payload: bytes, hide: Callable[[str], str]) -> Any:
        """One event's data: a chunk, or an error the server sent instead of one."""
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise ModelError(f"{self.endpoint} streamed a chunk that is not JSON: "
                             f"{excerpt(hide(payload.decode('utf-8', 'replace')))}",
                             extra={"url": self.endpoint}) from None
        if type(chunk) is dict and "error" in chunk and "choices" not in chunk:
            raise self._event_error(chunk, hide)
        if b"\\u" in payload and _SURROGATE_ESCAPE.search(payload.decode("utf-8", "replace")):
            chunk = replace_lone_surrogates(chunk)
        return chunk

    # -- response ------------------------------------------------------------------------

    def _parse(self, data: Any, status: int, text: str, hide: Callable[[str], str]
               ) -> ModelResponse:
        if data is None:
            raise ModelError(
                f"{self.endpoint} returned a non-JSON body (HTTP {status}): "
                f"{excerpt(hide(text))}", extra={"status": status, "url": self.endpoint},
            )
        if isinstance(data, dict) and "choices" not in data and "error" in data:
            raise self._http_error(status, data, excerpt(hide(text)), hide, None)
        try:
            return parse_completion(data)
        except Malformed as exc:
            shown = text or json.dumps(data, default=str)
            raise ModelError(
                f"{self.endpoint} returned a malformed chat completion ({exc}): "
                f"{excerpt(hide(shown))}", extra={"status": status, "url": self.endpoint},
            ) from None

    def _status_error(self, exc: openai.APIStatusError, hide: Callable[[str], str],
                      limiter: ProviderLimiter) -> ModelError:
        status = exc.status_code
        response = exc.response
        retry_after = None
        if status in (429, 503):
            retry_after = retry_after_seconds(response.headers.get("retry-after"),
                                              limiter.clock)
            if retry_after is not None:
                limiter.pause(retry_after)
        try:
            text = response.text
        except Exception:  # a body that could not be read: the status says enough
            text = ""
        return self._http_error(status, _json(text), excerpt(hide(text)), hide, retry_after)

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

    def _event_error(self, chunk: dict[str, Any], hide: Callable[[str], str]) -> ModelError:
        message, codes = error_details(chunk)
        detail = excerpt(hide(message or "an error event"))
        extra: dict[str, Any] = {"url": self.endpoint}
        if codes:
            extra["code"] = codes[0]
        if _BLOCKED_CODES.intersection(codes):
            return ModelBlockedError(f"The provider refused the request: {detail}", extra=extra)
        if _RETRYABLE_EVENT_CODES.intersection(codes):
            return ModelTransportError(f"{self.endpoint} failed mid-answer: {detail}",
                                       extra=extra)
        return ModelError(f"{self.endpoint} failed mid-answer: {detail}", extra=extra)

    def _transport(self, what: str, hide: Callable[[str], str]) -> ModelTransportError:
        return ModelTransportError(hide(f"Request to {self.endpoint} {what}."),
                                   extra={"url": self.endpoint})


def _json(text: str) -> Any:
    try:
        data: Any = json.loads(text)
    except ValueError:
        return None
    if _SURROGATE_ESCAPE.search(text):  # rare: only then is the reply walked
        data = replace_lone_surrogates(data)
    return data


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _estimate_tokens(request: ModelRequest, size: int) -> int:
    budget = 0
    for name in _OUTPUT_BUDGET_PARAMS:
        value = request.selection.params.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            budget = value
            break
    return size // _BYTES_PER_TOKEN + budget


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the certificate store takes milliseconds, on every new client (one per event
    # loop): once per process instead (an SSLContext is safe to share). The system's store,
    # which honours SSL_CERT_FILE and SSL_CERT_DIR.
    return ssl.create_default_context()


def _current_loop() -> object:
    return anyio.lowlevel.current_token().native_token


def _alive(loop: object) -> bool:
    """Whether an event loop (asyncio's loop, or a trio run's token) still runs."""
    is_closed = getattr(loop, "is_closed", None)
    if callable(is_closed):
        return not cast(bool, is_closed())
    try:
        loop.run_sync_soon(lambda: None)  # type: ignore[attr-defined]
    except RuntimeError:  # trio.RunFinishedError
        return False
    return True
