"""Provider quotas shared by every branch of a process: in-flight calls, requests and
tokens per minute, and the pause a ``Retry-After`` asks for.

A fan-out multiplies calls to one provider; the provider's quota is per key, not per
branch, so the limits live in one :class:`ProviderLimiter` per provider identity (API root
plus a fingerprint of the key) for the whole process (:func:`shared_limiter`), whichever
model instances and event loops the calls come from.

Requests and tokens per minute are counted over a sliding 60-second window of the calls
admitted. A call's tokens are not known before its answer, so it is admitted on an
estimate (its prompt size plus its ``max_tokens``) and the estimate is replaced by the
usage the provider reports.

Time comes from a :class:`Clock`, so tests drive the limiter on a virtual clock.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import anyio
import anyio.lowlevel

from .errors import ModelError

WINDOW = 60.0
"""Seconds over which requests and tokens per minute are counted."""
MAX_PAUSE = 600.0
"""Longest pause a ``Retry-After`` may impose: a broken header must not stall a process."""

ENV_MAX_IN_FLIGHT = "PICOFLOW_MODEL_MAX_IN_FLIGHT"
ENV_RPM = "PICOFLOW_MODEL_RPM"
ENV_TPM = "PICOFLOW_MODEL_TPM"


class Clock(Protocol):
    """Where the limiter reads time and waits."""

    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Seconds since the epoch (for ``Retry-After`` given as an HTTP date)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


@dataclass(frozen=True)
class ProviderLimits:
    """Per-provider limits; None is unlimited.

    Attributes:
        max_in_flight: calls awaiting an answer at once.
        requests_per_minute: calls admitted in any 60 seconds.
        tokens_per_minute: tokens (estimated, then as reported) in any 60 seconds.
    """

    max_in_flight: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_in_flight", "requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ModelError(f"{name} must be a positive integer or None, got {value!r}.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ProviderLimits:
        """``PICOFLOW_MODEL_MAX_IN_FLIGHT``, ``PICOFLOW_MODEL_RPM``, ``PICOFLOW_MODEL_TPM``;
        unset, empty or ``0`` is unlimited.

        Raises:
            ModelError: a value that is not a non-negative integer.
        """

        def read(name: str) -> int | None:
            raw = environ.get(name, "").strip()
            if not raw:
                return None
            if not raw.isdigit():
                raise ModelError(f"{name} must be a non-negative integer, got {raw!r}.")
            return int(raw) or None

        return cls(read(ENV_MAX_IN_FLIGHT), read(ENV_RPM), read(ENV_TPM))

    def tightest(self, other: ProviderLimits) -> ProviderLimits:
        """Each limit the smaller of the two (None yields to a number)."""

        def low(a: int | None, b: int | None) -> int | None:
            return b if a is None else a if b is None else min(a, b)

        return replace(
            self,
            max_in_flight=low(self.max_in_flight, other.max_in_flight),
            requests_per_minute=low(self.requests_per_minute, other.requests_per_minute),
            tokens_per_minute=low(self.tokens_per_minute, other.tokens_per_minute),
        )


class Admission:
    """One admitted call: holds its in-flight slot until released."""

    __slots__ = ("_leave", "_released", "_settle")

    def __init__(self, settle: Callable[[int], None], leave: Callable[[], None]) -> None:
        self._settle = settle
        self._leave = leave
        self._released = False

    def settle(self, tokens: int) -> None:
        """Replace the estimate with the tokens the provider reported (if any)."""
        if tokens > 0:
            self._settle(tokens)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._leave()


class ProviderLimiter:
    """The limits of one provider, shared by every task and thread that calls it.

    Waiting for an in-flight slot is first come, first served; a cancelled waiter leaves
    the queue, and a cancelled call gives its slot back (:meth:`Admission.release` runs in
    a ``finally``).
    """

    def __init__(self, limits: ProviderLimits | None = None, *, clock: Clock | None = None):
        self.limits = limits or ProviderLimits()
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._waiters: deque[tuple[anyio.lowlevel.EventLoopToken, anyio.Event]] = deque()
        self._window: deque[list[float]] = deque()
        """[admitted at, tokens] of the calls of the last WINDOW seconds, oldest first."""
        self._paused_until = float("-inf")
        self.max_in_flight_seen = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def tighten(self, limits: ProviderLimits) -> None:
        with self._lock:
            self.limits = self.limits.tightest(limits)

    def pause(self, seconds: float) -> None:
        """Admit no call for ``seconds`` (capped at :data:`MAX_PAUSE`): the provider
        said when to come back."""
        seconds = min(max(seconds, 0.0), MAX_PAUSE)
        with self._lock:
            self._paused_until = max(self._paused_until, self.clock.monotonic() + seconds)

    async def acquire(self, estimated_tokens: int = 0) -> Admission:
        """Wait for an in-flight slot, then for the rate limits; the caller must
        :meth:`~Admission.release` the admission (in a ``finally``)."""
        await self._enter()
        try:
            entry = await self._admit(max(estimated_tokens, 0))
        except BaseException:
            self._leave()
            raise
        return Admission(lambda tokens: self._settle(entry, tokens), self._leave)

    def _settle(self, entry: list[float], tokens: int) -> None:
        with self._lock:
            entry[1] = float(tokens)

    # -- in flight -----------------------------------------------------------------------

    async def _enter(self) -> None:
        with self._lock:
            limit = self.limits.max_in_flight
            if not self._waiters and (limit is None or self._in_flight < limit):
                self._count_in()
                return
            event = anyio.Event()
            waiter = (anyio.lowlevel.current_token(), event)
            self._waiters.append(waiter)
        try:
            await event.wait()
        except BaseException:
            with self._lock:
                # Out of the queue means counted in, even if the wake-up is still on its way
                # from another thread.
                handed = waiter not in self._waiters
                if not handed:
                    self._waiters.remove(waiter)
            if handed:  # the slot arrived as the wait was cancelled: pass it on
                self._leave()
            raise

    def _count_in(self) -> None:
        self._in_flight += 1
        self.max_in_flight_seen = max(self.max_in_flight_seen, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            limit = self.limits.max_in_flight
            woken = []
            while self._waiters and (limit is None or self._in_flight < limit):
                # The slot is counted for the waiter now, so nobody overtakes it.
                self._count_in()
                woken.append(self._waiters.popleft())
        for token, event in woken:
            _set_soon(token, event)

    # -- rate ----------------------------------------------------------------------------

    async def _admit(self, tokens: int) -> list[float]:
        while True:
            with self._lock:
                now = self.clock.monotonic()
                wait = self._wait_needed(now, tokens)
                if wait <= 0:
                    entry = [now, float(tokens)]
                    if self.limits.requests_per_minute or self.limits.tokens_per_minute:
                        self._window.append(entry)
                    return entry
            await self.clock.sleep(wait)

    def _wait_needed(self, now: float, tokens: int) -> float:
        if now < self._paused_until:
            return self._paused_until - now
        window = self._window
        while window and window[0][0] <= now - WINDOW:
            window.popleft()
        rpm, tpm = self.limits.requests_per_minute, self.limits.tokens_per_minute
        wait = 0.0
        if rpm is not None and len(window) >= rpm:
            wait = window[len(window) - rpm][0] + WINDOW - now
        if tpm is not None:
            # A call bigger than the whole quota is admitted on an empty window, or never.
            need = min(float(tokens), float(tpm))
            excess = sum(entry[1] for entry in window) + need - tpm
            for admitted_at, used in window:
                if excess <= 0:
                    break
                excess -= used
                wait = max(wait, admitted_at + WINDOW - now)
        return wait


def _set_soon(token: anyio.lowlevel.EventLoopToken, event: anyio.Event) -> None:
    """Set ``event`` on the loop that waits on it, which may run in another thread."""
    try:
        here = anyio.lowlevel.current_token()
    except RuntimeError:
        here = None
    if here == token:
        event.set()
        return
    native = token.native_token
    # asyncio loops and trio tokens both take a thread-safe callback, under two names.
    schedule: Callable[[Callable[[], None]], object] = (
        getattr(native, "call_soon_threadsafe", None) or native.run_sync_soon  # type: ignore[attr-defined]
    )
    with contextlib.suppress(RuntimeError):  # that loop is closed, its waiter gone with it
        schedule(event.set)


_REGISTRY: dict[tuple[str, str], ProviderLimiter] = {}
_REGISTRY_LOCK = threading.Lock()


def provider_identity(base_url: str, api_key: str | None) -> tuple[str, str]:
    """The API root and a fingerprint of the key: quotas are per key, and the key itself
    is not kept."""
    fingerprint = hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else ""
    return base_url.rstrip("/"), fingerprint


def shared_limiter(identity: tuple[str, str], limits: ProviderLimits) -> ProviderLimiter:
    """The process's limiter for ``identity``; configured again with other limits, it keeps
    the tightest of each."""
    with _REGISTRY_LOCK:
        limiter = _REGISTRY.get(identity)
        if limiter is None:
            limiter = _REGISTRY[identity] = ProviderLimiter(limits)
        elif limiter.limits != limits:
            limiter.tighten(limits)
        return limiter


def retry_after_seconds(value: str | None, clock: Clock) -> float | None:
    """A ``Retry-After`` header as seconds from now: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(seconds, 0.0) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(when.timestamp() - clock.time(), 0.0)
