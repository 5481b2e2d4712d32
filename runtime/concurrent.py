"""``Flow.concurrent_steps()``: a coordinator's batches of independent child flow requests.

The second scope of parallelism: where ``run_steps()`` forks branches inside one turn,
``concurrent_steps()`` sends each item as a new, independent flow request to the
application's own run endpoint (``POST /ai/run`` at ``PICOFLOW_SELF_URL``), with a token
of the coordinator's project (``PICOFLOW_SELF_TOKEN``). Each child is a run of its own,
in a session of its own; the coordinator gets every child's reply back as data.

* Batches run strictly one after another; the items of a batch run concurrently.
* ``on_config(item)`` builds a child's config; ``on_response(item, reply)`` receives each
  child's :class:`ChildReply` as it ends, whatever the outcome: a child that failed, timed
  out, was refused or could not be reached is a reply with that ``status``, never an
  exception and never dropped. The call returns every reply, in item order.
* The coordinator chooses each child's run id and session id (derived from its own run
  id, the call and the item) and sends them, so its events link to the child before the
  child has answered, and so a resent request can never run a child twice: the app
  refuses a second run with the same id.
* Only failures that are safe to retry are retried, with exponential backoff: no
  connection (nothing was sent), 429, and 503 (the app did not start the child). A child
  that may have run (timeout, a dropped connection after sending, any other answer) is
  never sent again.
* A depth guard: every child's config carries ``_concurrent_depth``, one more than its
  coordinator's; a child config that asks for coordinator mode (``_concurrent``) at
  ``max_depth`` or deeper raises :class:`~runtime.errors.ConcurrentDepthError` before its
  batch is sent.

Events: ``concurrent.batch_started``, ``concurrent.child_started`` (per attempt, with the
child's ids), ``concurrent.child_finished`` and ``concurrent.batch_finished``, on the
coordinator's run.

The requests go out on httpx2 (:mod:`runtime.transport.clients`, the ``http`` extra), loaded
by name at the first call, so the core imports without it; without httpx2 a call raises
:class:`~runtime.errors.ConcurrentConfigError` naming the extra. No redirect is followed,
and the environment's proxies (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``) apply.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import anyio

from . import events as ev
from .errors import ConcurrentConfigError, ConcurrentDepthError
from .jsonutil import json_copy

if TYPE_CHECKING:
    from .flow import Flow

T = TypeVar("T")

SELF_URL_ENV = "PICOFLOW_SELF_URL"
SELF_TOKEN_ENV = "PICOFLOW_SELF_TOKEN"
COORDINATOR_KEY = "_concurrent"
"""A request config key: truthy makes the turn a coordinator (``spawn_steps()`` runs)."""
DEPTH_KEY = "_concurrent_depth"
"""A request config key: how many coordinators up the chain of this request (0: none)."""
RESERVED_KEYS = (COORDINATOR_KEY, DEPTH_KEY)
"""Config keys of the framework, kept out of a flow's config schema validation."""

_RETRY_STATUSES = frozenset({429, 503})
HTTP_EXTRA = "pip install 'picoflow-web[http]'"


class ChildSendError(Exception):
    """No reply was had to a child's request, which may have been processed. The message
    is safe to show (it never holds the request)."""


class ChildNotSent(ChildSendError):
    """No connection could be opened (refused, unreachable, bad name): nothing was sent, so
    the request is safe to send again."""


class ChildTimeout(ChildSendError):
    """Connecting, or a wait for the reply, took longer than the call's timeout."""


class _Poster(Protocol):
    """What sends a call's requests (:class:`runtime.transport.clients.ChildPoster`)."""

    async def post(self, url: str, *, headers: Mapping[str, str], body: bytes,
                   timeout: float) -> tuple[int, Mapping[str, str], bytes]: ...

    async def aclose(self) -> None: ...


def _new_poster(url: str) -> _Poster:
    """httpx2's client, loaded by name: the core does not depend on it (LAYERS.toml)."""
    try:
        module = importlib.import_module("runtime.transport.clients")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "httpx2":
            raise
        raise ConcurrentConfigError(
            f"concurrent_steps() sends its requests with httpx2, which is not installed: "
            f"{HTTP_EXTRA}") from None
    poster: _Poster = module.ChildPoster(url)
    return poster


@dataclass(frozen=True)
class ChildReply:
    """How one child ended, as the coordinator sees it."""

    item: int
    """The item's index in ``items``."""
    batch: int
    status: ev.ChildStatus
    run_id: str
    session_id: str
    attempts: int
    duration: float
    success: bool = False
    completed: bool | None = None
    message: str | None = None
    """The child's reply message (its body, for a reply that is not plain text)."""
    content_type: str | None = None
    http_status: int | None = None
    error_code: str | None = None
    error: str | None = None
    """Why it did not succeed, for people."""

    @property
    def ok(self) -> bool:
        """Whether the child's turn succeeded."""
        return self.status == "fulfilled"


@dataclass(frozen=True)
class ConcurrentResult:
    """Every child's reply, in item order."""

    replies: list[ChildReply] = field(default_factory=list)

    @property
    def fulfilled(self) -> list[ChildReply]:
        return [r for r in self.replies if r.ok]

    @property
    def failed(self) -> list[ChildReply]:
        """The replies of children that did not succeed, whatever the reason."""
        return [r for r in self.replies if not r.ok]


@dataclass(frozen=True)
class _Target:
    url: str
    token: str


@dataclass
class _Call(Generic[T]):
    """One ``concurrent_steps()`` call of a coordinator."""

    flow: Flow
    group: str
    items: Sequence[T]
    batch_size: int
    on_config: Callable[[T], Mapping[str, Any]]
    on_response: Callable[[T, ChildReply], Awaitable[None] | None] | None
    timeout: float
    retries: int
    backoff: float
    child_flow: str
    target: _Target
    depth: int
    max_depth: int
    token: str | Callable[[T], str | None] | None = None
    """Another token than the self token, for every item or per item (None: the default)."""

    def token_for(self, item: T) -> str:
        chosen = self.token(item) if callable(self.token) else self.token
        return chosen or self.target.token


async def run_concurrent(
    flow: Flow, items: Sequence[T], *, batch_size: int,
    on_config: Callable[[T], Mapping[str, Any]],
    on_response: Callable[[T, ChildReply], Awaitable[None] | None] | None = None,
    timeout: float = 300.0, retries: int = 2, backoff: float = 0.5,
    flow_name: str | None = None, max_depth: int = 2,
    token: str | Callable[[T], str | None] | None = None,
) -> ConcurrentResult:
    """What :meth:`runtime.Flow.concurrent_steps` does (see the module docstring)."""
    from .current import turn_of

    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConcurrentConfigError(f"batch_size must be a positive integer, not {batch_size!r}.")
    if not callable(on_config) or (on_response is not None and not callable(on_response)):
        raise ConcurrentConfigError("on_config (and on_response, when given) must be callable.")
    if not (isinstance(timeout, int | float) and timeout > 0 and math.isfinite(timeout)):
        raise ConcurrentConfigError(
            f"timeout must be a positive number of seconds, not {timeout!r}.")
    if not isinstance(retries, int) or retries < 0:
        raise ConcurrentConfigError(f"retries must be 0 or more, not {retries!r}.")
    config = flow.get_context("config") or {}
    depth = config.get(DEPTH_KEY, 0) if isinstance(config, dict) else 0
    depth = depth if isinstance(depth, int) and depth >= 0 else 0
    turn = turn_of(flow)
    call: _Call[T] = _Call(
        flow=flow, group=f"c{turn.next_concurrent_group()}", items=list(items),
        batch_size=batch_size, on_config=on_config, on_response=on_response,
        timeout=float(timeout), retries=retries, backoff=backoff,
        child_flow=flow_name or flow.id, target=_target(flow, token is not None), depth=depth,
        max_depth=max_depth, token=token)
    replies: list[ChildReply | None] = [None] * len(call.items)
    poster = _new_poster(call.target.url)
    try:
        await _batches(call, turn, replies, poster)
    finally:
        # Keep-alive connections serve the call's batches; none outlives it (a socket
        # belongs to this event loop, which may end with the turn).
        with anyio.move_on_after(5.0, shield=True):
            await poster.aclose()
    return ConcurrentResult([r for r in replies if r is not None])


async def _batches(call: _Call[T], turn: Any, replies: list[ChildReply | None],
                   poster: _Poster) -> None:
    batch_size, retries = call.batch_size, call.retries
    batches = math.ceil(len(call.items) / batch_size)
    for batch in range(batches):
        indices = list(range(batch * batch_size, min(len(call.items), (batch + 1) * batch_size)))
        started = time.monotonic()
        turn.emit(ev.ConcurrentBatchStarted, group=call.group, batch=batch, batches=batches,
                  total=len(call.items), items=indices, flow=call.child_flow, batch_size=batch_size,
                  timeout=call.timeout, retries=retries)
        configs = {index: _child_config(call, index) for index in indices}
        async with anyio.create_task_group() as tg:
            for index in indices:
                tg.start_soon(_child, call, batch, index, configs[index], replies, poster)
        done = [replies[i] for i in indices]
        fulfilled = sum(1 for r in done if r is not None and r.ok)
        turn.emit(ev.ConcurrentBatchFinished, group=call.group, batch=batch,
                  fulfilled=fulfilled, failed=len(indices) - fulfilled,
                  duration=time.monotonic() - started)


def _target(flow: Flow, own_token: bool = False) -> _Target:
    engine = flow.require_engine()
    url = engine.self_url or os.environ.get(SELF_URL_ENV, "")
    token = engine.self_token or os.environ.get(SELF_TOKEN_ENV, "")
    if not url:
        raise ConcurrentConfigError(
            f"concurrent_steps() needs the app's own URL: set {SELF_URL_ENV} (or "
            "FlowEngine(self_url=...)).")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConcurrentConfigError(f"{SELF_URL_ENV} must be an http(s) URL, not {url!r}.")
    if not token and not own_token:
        raise ConcurrentConfigError(
            f"concurrent_steps() needs a token with the run scope: set {SELF_TOKEN_ENV} (or "
            "FlowEngine(self_token=...)).")
    # The run endpoint itself, or the app's base URL.
    endpoint = url if parts.path.rstrip("/").endswith("/ai/run") else url.rstrip("/") + "/ai/run"
    return _Target(endpoint, token)


def child_ids(coordinator: str, group: str, item: int) -> tuple[str, str]:
    """The run id and session id of a coordinator run's child: derived from the three, so
    the same child always has the same ids (a resend, a replayed coordinator) and two
    children never share one."""
    base = f"{coordinator or uuid.uuid4().hex}-{group}-{item}"
    if len(base) > 56:  # ids are at most 64 characters
        base = uuid.uuid5(uuid.NAMESPACE_URL, base).hex
    return base, f"{base}-s"


def _child_config(call: _Call[T], index: int) -> dict[str, Any] | BaseException:
    """The child's config, or what ``on_config`` raised (the child's reply says so)."""
    try:
        built = call.on_config(call.items[index])
        if not isinstance(built, Mapping):
            raise ConcurrentConfigError(
                f"on_config must return a JSON object, not {type(built).__name__}.")
        config: dict[str, Any] = json_copy(dict(built))
    except Exception as exc:  # the item's reply says so; the other items go on
        return exc
    if config.get(COORDINATOR_KEY) and call.depth + 1 >= call.max_depth:
        raise ConcurrentDepthError(
            f"Item {index}'s child would be a coordinator at depth {call.depth + 1}; "
            f"the limit is {call.max_depth} (recursive fan-out).",
            extra={"item": index, "depth": call.depth + 1, "max_depth": call.max_depth})
    config[DEPTH_KEY] = call.depth + 1
    return config


async def _child(call: _Call[T], batch: int, index: int,
                 config: dict[str, Any] | BaseException, replies: list[ChildReply | None],
                 poster: _Poster) -> None:
    from .current import turn_of

    turn = turn_of(call.flow)
    run_id, session_id = child_ids(turn.bus.run_id if turn.bus is not None else "",
                                   call.group, index)
    started = time.monotonic()
    if isinstance(config, BaseException):
        reply = ChildReply(item=index, batch=batch, status="error", run_id=run_id,
                           session_id=session_id, attempts=0, duration=0.0,
                           error_code=getattr(config, "code", "internal"),
                           error=f"on_config raised {type(config).__name__}: {config}")
    else:
        reply = await _send(call, turn, batch, index, config, run_id, session_id, started,
                            poster)
    replies[index] = reply
    turn.emit(ev.ConcurrentChildFinished, group=call.group, batch=batch, item=index,
              child_run_id=run_id, child_session_id=session_id, status=reply.status,
              duration=reply.duration, attempts=reply.attempts, http_status=reply.http_status,
              completed=reply.completed,
              reply=ev.safe_value(reply.message) if reply.message is not None else None,
              error=None if reply.ok else ev.ErrorInfo(
                  type="ChildReply", code=reply.error_code or reply.status,
                  message=reply.error or reply.status))
    if call.on_response is not None:
        result = call.on_response(call.items[index], reply)
        if inspect.isawaitable(result):
            await result


async def _send(call: _Call[T], turn: Any, batch: int, index: int, config: dict[str, Any],
                run_id: str, session_id: str, started: float, poster: _Poster) -> ChildReply:
    body = json.dumps({"flowName": call.child_flow, "config": config,
                       "session": session_id}).encode()
    coordinator = turn.bus.run_id if turn.bus is not None else ""
    headers = {
        "Authorization": f"Bearer {call.token_for(call.items[index])}",
        "Content-Type": "application/json",
        "Accept": "application/json", "PicoFlow-Run-Id": run_id,
        "PicoFlow-Coordinator-Run": coordinator, "PicoFlow-Coordinator-Item": str(index),
        "PicoFlow-Coordinator-Batch": str(batch), "PicoFlow-Coordinator-Group": call.group,
    }

    def ended(status: ev.ChildStatus, attempts: int, **fields: Any) -> ChildReply:
        return ChildReply(item=index, batch=batch, status=status, run_id=run_id,
                          session_id=session_id, attempts=attempts,
                          duration=time.monotonic() - started, **fields)

    attempt = 0
    while True:
        attempt += 1
        turn.emit(ev.ConcurrentChildStarted, group=call.group, batch=batch, item=index,
                  child_run_id=run_id, child_session_id=session_id, flow=call.child_flow,
                  attempt=attempt)
        retry = attempt <= call.retries
        try:
            with anyio.fail_after(call.timeout):
                status, reply_headers, reply_body = await poster.post(
                    call.target.url, headers=headers, body=body, timeout=call.timeout)
        except (TimeoutError, ChildTimeout):
            return ended("timed_out", attempt,
                         error=f"no reply within {call.timeout:g} s (the child may have run)")
        except ChildNotSent as exc:
            if retry:
                await anyio.sleep(call.backoff * 2 ** (attempt - 1))
                continue
            return ended("unreachable", attempt, error=str(exc))
        except ChildSendError as exc:
            return ended("error", attempt, error=f"{exc} (the child may have run)")
        if status in _RETRY_STATUSES and retry:
            await anyio.sleep(_retry_after(reply_headers, call.backoff * 2 ** (attempt - 1)))
            continue
        return _read_reply(status, reply_headers, reply_body, ended, attempt)


def _retry_after(headers: Mapping[str, str], default: float) -> float:
    try:
        return min(60.0, max(default, float(headers.get("retry-after", ""))))
    except ValueError:
        return default


def _read_reply(status: int, headers: Mapping[str, str], body: bytes,
                ended: Callable[..., ChildReply], attempts: int) -> ChildReply:
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    text = body.decode("utf-8", errors="replace")
    if status == 200 and kind and kind != "application/json":
        # A reply that is not plain text comes as its own payload (PicoFlow's contract).
        return ended("fulfilled", attempts, success=True, message=text, content_type=kind,
                     http_status=status, completed=None)
    try:
        data = json.loads(text) if kind == "application/json" else None
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("success"), bool) \
            and isinstance(data.get("message"), str):
        fields = {"success": data["success"], "message": data["message"],
                  "completed": data.get("completed") if isinstance(data.get("completed"), bool)
                  else None,
                  "content_type": data.get("contentType") if isinstance(
                      data.get("contentType"), str) else None,
                  "http_status": status,
                  "error_code": data.get("error_code") if isinstance(
                      data.get("error_code"), str) else None}
        if data["success"] and status == 200:
            return ended("fulfilled", attempts, **fields)
        return ended("failed", attempts, error=data["message"], **fields)
    if status == 202:
        # The app's wait for the turn ran out (a dashboard's PICOFLOW_RUN_WAIT): the child
        # runs on, so it is this call's timeout, never a reason to send it again.
        follow = data.get("follow") if isinstance(data, dict) else None
        return ended("timed_out", attempts, http_status=status,
                     error="the app still runs the child after its own wait"
                     + (f"; follow it at {follow}" if isinstance(follow, str) else ""))
    if status >= 500:
        return ended("error", attempts, http_status=status,
                     error=f"the app answered {status} (the child may have run)")
    if 400 <= status < 500:
        message = data.get("message") if isinstance(data, dict) else None
        code = data.get("code") if isinstance(data, dict) else None
        return ended("refused", attempts, http_status=status,
                     error_code=code if isinstance(code, str) else None,
                     error=f"the app refused the request ({status})"
                     + (f": {message}" if isinstance(message, str) else ""))
    return ended("malformed", attempts, http_status=status,
                 error=f"a {status} reply that is not a flow reply: {text[:200]!r}")


__all__ = ["COORDINATOR_KEY", "DEPTH_KEY", "RESERVED_KEYS", "SELF_TOKEN_ENV", "SELF_URL_ENV",
           "ChildReply", "ConcurrentResult", "child_ids", "run_concurrent"]
