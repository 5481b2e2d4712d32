"""The half of :class:`~runtime.events.DashboardSink` that talks to the dashboard: the
ingest contract, client side (the module docstring of :mod:`runtime.events.dashboard` states
it), what each answer means for the buffered events, the warnings that tell the user when
events cannot be shipped, heartbeats and the stop long-poll.

The requests go out on httpx2 (:class:`runtime.transport.clients.IngestTransport`, the
``http`` extra), loaded by name when a sink is made (``runtime/LAYERS.toml``,
``[runtime.plugins]``): this package imports with pydantic alone. Each sink thread owns one
transport with one keep-alive connection; no redirect is followed; the environment's proxies
(``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) apply.
"""

from __future__ import annotations

import email.utils
import importlib
import json
import logging
import math
import os
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from .ids import id_problem

logger = logging.getLogger("picoflow")

StopHook = Callable[[str, "str | None"], None]
"""Called as ``hook(reason, by)`` when the dashboard asks a run to stop."""

HTTP_EXTRA = "pip install 'picoflow-web[http]'"

CLOSE_TIMEOUT_ENV = "PICOFLOW_DASHBOARD_CLOSE_TIMEOUT"
DEFAULT_CLOSE_TIMEOUT = 5.0


def close_timeout_from_env(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds :meth:`DashboardSink.close` waits for the dashboard:
    ``PICOFLOW_DASHBOARD_CLOSE_TIMEOUT``, else :data:`DEFAULT_CLOSE_TIMEOUT`."""
    raw = environ.get(CLOSE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_CLOSE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{CLOSE_TIMEOUT_ENV} must be a number of seconds (0 or more), "
                         f"not {raw!r}.")
    return value


MAX_SOURCE_CHARS = 40
"""The longest ``PicoFlow-Origin-Source`` the dashboard keeps (it cuts a longer one)."""


def source_problem(source: str) -> str | None:
    """Why ``source`` cannot name what recorded a run (None when it can): it is shown in
    the dashboard's origin label, so it is a short line of printable ASCII, not blank."""
    if not source.strip():
        return "is blank"
    if len(source) > MAX_SOURCE_CHARS:
        return f"is longer than {MAX_SOURCE_CHARS} characters"
    if not all(" " <= char <= "~" for char in source):
        return "has characters other than printable ASCII"
    return None


class _Line(NamedTuple):
    """A buffered event: its run, its seq and its serialised line."""

    run_id: str
    seq: int
    line: bytes


@dataclass
class _Cover:
    """A gap in a run's stream: events ``first`` .. of it must travel with the
    ``sink.overflowed`` event (seq ``overflow``, -1 until emitted) that names the gap."""

    first: int
    overflow: int = -1


@dataclass
class _Run:
    session_id: str = ""
    last_seq: int = -1
    """Highest seq handled (admitted or dropped)."""
    last_offset: float = 0.0
    running: bool = False
    ended: bool = False
    contact: float = 0.0
    """Monotonic time the server last heard of the run (batch or heartbeat)."""
    dropping: list[int] | None = None
    """``[first, last, count]`` of events lost and not yet reported."""
    covers: list[_Cover] = field(default_factory=list)


class Transport(Protocol):
    """One thread's requests to the dashboard
    (:class:`runtime.transport.clients.IngestTransport`)."""

    def request(self, method: str, url: str, *, body: bytes | None = None,
                headers: Mapping[str, str] | None = None
                ) -> tuple[int, Mapping[str, str], bytes]: ...

    def close(self) -> None: ...


def new_transport(origin: str, headers: Mapping[str, str], timeout: float) -> Transport:
    """httpx2's transport to ``origin`` with ``headers`` on every request, loaded by name:
    this package does not depend on it. ImportError, saying what to install, without httpx2."""
    try:
        module = importlib.import_module("runtime.transport.clients")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "httpx2":
            raise
        raise ImportError(f"DashboardSink sends with httpx2, which is not installed: "
                          f"{HTTP_EXTRA}", name="httpx2") from None
    transport: Transport = module.IngestTransport(origin, headers, timeout)
    return transport


class IngestClient:
    """What :class:`~runtime.events.DashboardSink` sends and how it reads the answers; the
    state is the sink's (set by its ``__init__``), guarded by its lock."""

    name: str
    url: str
    _endpoint: str
    """The dashboard's base URL without credentials or query: paths are appended."""
    _headers: dict[str, str]
    _transport: Transport
    batch_bytes: int
    batch_seconds: float
    heartbeat_seconds: float
    timeout: float
    backoff: float
    max_backoff: float
    control_seconds: float
    _failing_since: float | None
    failures: int
    _failing: int
    _said_down: bool
    _said_dropped: bool
    requests: int
    heartbeats: int
    dropped: int
    _lock: threading.Lock
    _cv: threading.Condition
    _queue: deque[_Line]
    _first_at: float
    _inflight: int
    _runs: dict[str, _Run]
    _dead: set[str]
    _bad_ids: set[str]
    _held: int
    _disabled: str | None
    _closed: bool
    _abort: threading.Event
    _warned: bool
    _stop_hooks: dict[str, StopHook]
    _stops_heard: set[str]
    _control: threading.Thread | None
    _control_off: bool

    def _refuse_ids(self, run_id: str, session_id: str) -> bool:
        """Under the lock, at a run's first event: whether its ids are ones no dashboard
        takes (see :mod:`runtime.events.ids`); then nothing of the run is sent (each
        batch would be refused, and so would the report of what was lost)."""
        problem = id_problem(run_id, "run id") or (
            id_problem(session_id, "session id") if session_id else None)
        if problem is None:
            return False
        self._dead.add(run_id)
        self._bad_ids.add(run_id)
        logger.warning("The events of run %r are not sent to the dashboard: %s", run_id,
                       problem)
        return True

    def _heard_stops(self, runs: object) -> None:
        """Call the hooks of the runs an answer (``{"runs": {id: position}}``) asks to
        stop, once each; not under the lock."""
        if not isinstance(runs, dict):
            return
        calls: list[tuple[str, StopHook, str, str | None]] = []
        with self._cv:
            for run_id, info in runs.items():
                stop = info.get("stop") if isinstance(info, dict) else None
                hook = self._stop_hooks.get(run_id)
                if not isinstance(stop, dict) or run_id in self._stops_heard:
                    continue
                self._stops_heard.add(run_id)
                by = stop.get("by") if isinstance(stop.get("by"), str) else None
                reason = stop.get("reason") if isinstance(stop.get("reason"), str) else None
                if hook is None:
                    logger.warning("The dashboard asks run %s to stop, but nothing here "
                                   "can stop it (no turn of a FlowEngine runs it)", run_id)
                    continue
                calls.append((run_id, hook, reason or "stopped from the dashboard", by))
        for run_id, hook, reason, by in calls:
            try:
                hook(reason, by)
            except Exception:
                logger.exception("Stopping run %s failed", run_id)

    def _start_control(self) -> None:
        """Under the lock: the long-poll thread, once a run has a hook."""
        if self._control is None and not self._control_off:
            self._control = threading.Thread(target=self._control_loop,
                                             name=f"picoflow-{self.name}-control", daemon=True)
            self._control.start()

    def _control_loop(self) -> None:
        """Keep ``GET /api/ingest/control`` open for the runs with hooks, while any."""
        transport: Transport | None = None
        attempt = 0
        try:
            while True:
                with self._cv:
                    while not self._closed and not self._disabled and not [
                            r for r in self._stop_hooks if r not in self._stops_heard]:
                        self._cv.wait()
                    if self._closed or self._disabled:
                        return
                    runs = sorted(r for r in self._stop_hooks if r not in self._stops_heard)
                query = urllib.parse.urlencode(
                    [("run", run_id) for run_id in runs[:500]]
                    + [("wait", f"{self.control_seconds:g}")])
                try:
                    if transport is None:  # the long-poll's own connection, with its timeout
                        transport = new_transport(self._endpoint, self._headers,
                                                  self.control_seconds + self.timeout)
                    status, _, raw = transport.request(
                        "GET", f"{self._endpoint}/api/ingest/control?{query}")
                except OSError as exc:
                    logger.debug("Dashboard control long-poll failed: %r", exc)
                    if self._abort.wait(min(self.max_backoff, self.backoff * 2 ** attempt)):
                        return
                    attempt += 1
                    continue
                if status in (404, 405):
                    logger.info("Dashboard %s has no stop long-poll; stop requests come "
                                "with its answers", self.url)
                    return
                if status != 200:
                    if self._abort.wait(min(self.max_backoff, self.backoff * 2 ** attempt)):
                        return
                    attempt += 1
                    continue
                attempt = 0
                try:
                    answer = json.loads(raw) if raw else {}
                except ValueError:
                    answer = {}
                runs_said = answer.get("runs") if isinstance(answer, dict) else None
                if not runs_said and self._abort.wait(self.batch_seconds + self.backoff):
                    return  # the dashboard knows none of them yet: their events come first
                if isinstance(runs_said, dict):
                    with self._cv:  # an ended run has nothing left to be asked
                        self._stops_heard.update(
                            run_id for run_id, info in runs_said.items()
                            if isinstance(info, dict) and info.get("status") != "running")
                    self._heard_stops(runs_said)
        except Exception:  # pragma: no cover - a bug here must not go unnoticed
            logger.exception("Dashboard sink %s stopped listening for stop requests", self.url)
        finally:
            if transport is not None:
                transport.close()
            with self._cv:
                self._control_off = True

    def _lose(self, run_id: str, first: int, last: int, count: int) -> None:
        """Under the lock: events of a run are gone for good; report them."""
        if run_id in self._dead or count <= 0:
            return
        if run_id not in self._runs and self._refuse_ids(run_id, ""):
            self.dropped += count
            return
        run = self._runs.setdefault(run_id, _Run())
        self.dropped += count
        self._say_dropped("the dashboard refused them or no longer had room for them")
        if run.dropping is None:
            run.dropping = [first, last, count]
            run.covers.append(_Cover(first))
            self._held += 1
        else:
            run.dropping = [min(first, run.dropping[0]), max(last, run.dropping[1]),
                            run.dropping[2] + count]
        # Events of the run at or after the gap wait for the report (see _take).
        for cover in run.covers:
            cover.first = min(cover.first, first) if cover.overflow == -1 else cover.first

    def _requeue(self, events: list[_Line]) -> None:
        """Under the lock: put unsent events back in front, in order."""
        live = [e for e in events if e.run_id not in self._dead]
        if live:
            if not self._queue:
                self._first_at = time.monotonic()
            self._queue.extendleft(reversed(live))

    def _kill(self, run_id: str) -> None:
        """Under the lock: the server declared the run interrupted."""
        self._dead.add(run_id)
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._held -= sum(1 for _ in run.covers)
        self._queue = deque(e for e in self._queue if e.run_id != run_id)

    # -- requests and answers -------------------------------------------------------------

    def _send(self, taken: list[_Line]) -> None:
        batch = taken
        size, cut = 0, len(batch)
        for index, item in enumerate(batch):
            size += len(item.line) + 1
            if size > self.batch_bytes and index > 0:
                cut = index
                break
        if cut < len(batch):
            with self._lock:
                if not self._held:  # a gap's events travel with its report: no cut
                    self._requeue(batch[cut:])  # sent next
                    batch = batch[:cut]
                    self._inflight = cut
        self._send_lines(batch)

    def _send_lines(self, batch: list[_Line]) -> None:
        attempt = 0
        while batch:
            body = b"\n".join([item.line for item in batch]) + b"\n"
            try:
                status, headers, reply = self._post("/api/ingest", body,
                                                     "application/x-ndjson")
            except OSError as exc:  # refused, reset, timeout: resend the same events
                logger.debug("Dashboard ingest failed (%r); retrying", exc)
                self._no_answer(repr(exc))
                if not self._wait_retry(attempt, None):
                    return self._give_up(batch)
                attempt += 1
                continue
            if status == 429 or status >= 500:
                logger.debug("Dashboard ingest answered %s; retrying", status)
                if status >= 500:
                    self._no_answer(f"HTTP {status}")
                if not self._wait_retry(attempt, headers.get("Retry-After")):
                    return self._give_up(batch)
                attempt += 1
                continue
            self._failing_since = None  # a real answer: the dashboard is up
            self._answered()
            if status == 200:
                self._accepted(batch, reply)
                return
            if status in (401, 403):
                self._refused_auth(status, reply)
                return
            if status == 409 and reply.get("code") == "run_interrupted":
                run_id = str(reply.get("run_id", ""))
                logger.warning("Dashboard interrupted run %s; no more events are sent for it",
                               run_id)
                with self._cv:
                    self._kill(run_id)
                batch = [e for e in batch if e.run_id != run_id]
                continue
            if status == 409 and reply.get("code") == "seq_gap":
                with self._cv:
                    self._repair_gap(batch, reply)
                return
            # 400, 413 and anything else: the request cannot succeed as it is.
            logger.warning("Dashboard refused a batch (%s): %s", status,
                           reply.get("message", reply))
            with self._cv:
                self._refused_batch(batch, reply)
            return

    def _accepted(self, batch: list[_Line], reply: dict[str, Any]) -> None:
        runs = reply.get("runs") if isinstance(reply.get("runs"), dict) else {}
        now = time.monotonic()
        # Per run, not per event, and outside the lock: the batch is the sender's own, and
        # a lock held for a thousand events' bookkeeping stalls the run's next receive().
        highest: dict[str, int] = {}
        for event in batch:
            if event.seq > highest.get(event.run_id, -1):
                highest[event.run_id] = event.seq
        with self._cv:
            self.requests += 1
            short: dict[str, int] = {}
            """Runs the reply acknowledged only in part: their last stored seq."""
            for run_id, top in highest.items():
                info = runs.get(run_id) if runs else None
                if isinstance(info, dict) and info.get("status") == "interrupted":
                    self._kill(run_id)
                    continue
                acked = info.get("last_seq") if isinstance(info, dict) else None
                if isinstance(acked, int) and top > acked:
                    short[run_id] = acked
                run = self._runs.get(run_id)
                if run is not None:
                    run.contact = now
                    run.last_seq = max(run.last_seq, top)
            unacked = [e for e in batch if e.run_id in short and e.seq > short[e.run_id]] \
                if short else []
            for run_id, run in list(self._runs.items()):
                if run.ended and not run.covers and run.dropping is None and not any(
                        e.run_id == run_id for e in unacked):
                    del self._runs[run_id]  # done: forget it
            if unacked:
                self._requeue(unacked)
        self._heard_stops(runs)

    def _repair_gap(self, batch: list[_Line], reply: dict[str, Any]) -> None:
        run_id = str(reply.get("run_id", ""))
        expected = reply.get("expected_seq")
        mine = [e.seq for e in batch if e.run_id == run_id] + [
            e.seq for e in self._queue if e.run_id == run_id]
        if not isinstance(expected, int) or not mine:
            logger.warning("Dashboard refused a batch: %s", reply.get("message", reply))
            return self._refused_batch(batch, {})
        keep = [e for e in batch if e.run_id != run_id or e.seq >= expected]
        if expected not in mine:  # the events the server wants are gone: report them
            following = min(s for s in mine if s > expected) if any(
                s > expected for s in mine) else expected + 1
            self._lose(run_id, expected, following - 1, following - expected)
        self._requeue(keep)

    def _refused_batch(self, batch: list[_Line], reply: dict[str, Any]) -> None:
        line = reply.get("line")
        if isinstance(line, int) and 1 <= line <= len(batch):
            bad = batch[line - 1]
            self._lose(bad.run_id, bad.seq, bad.seq, 1)
            self._requeue(batch[:line - 1] + batch[line:])
            return
        ranges: dict[str, list[int]] = {}
        for event in batch:
            r = ranges.setdefault(event.run_id, [event.seq, event.seq, 0])
            r[0], r[1], r[2] = min(r[0], event.seq), max(r[1], event.seq), r[2] + 1
        for run_id, (first, last, count) in ranges.items():
            self._lose(run_id, first, last, count)

    def _no_answer(self, problem: str) -> None:
        """A request failed for want of a working dashboard: said once per outage, from
        the second failure in a row (a kept-alive connection the server closed fails once,
        and the retry on a new one succeeds)."""
        self.failures += 1
        self._failing += 1
        if self._failing >= 2 and not self._said_down:
            self._said_down = True
            logger.warning(
                "Dashboard %s cannot be reached (%s); its events are kept and retried. "
                "Check that the dashboard runs at that address (PICOFLOW_DASHBOARD_URL) "
                "and that this machine can reach it.", self.url, problem)

    def _answered(self) -> None:
        self._failing = 0
        if self._said_down:
            self._said_down = False
            logger.info("Dashboard %s answers again; sending resumes", self.url)

    def _say_dropped(self, why: str) -> None:
        """The sink lost events for the first time: say so, once."""
        if not self._said_dropped:
            self._said_dropped = True
            logger.warning(
                "Dashboard sink %s dropped events (%s); each run concerned records the "
                "lost range as a sink.overflowed event, and DashboardSink.dropped counts "
                "them. %s", self.url, why, _DROP_ADVICE.get(why, ""))

    def _refused_auth(self, status: int, reply: dict[str, Any]) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "Dashboard %s refused the token (%s: %s); no events are sent. Create a "
                "token with the ingest scope (the dashboard's Tokens page, or picoflow-web "
                "manage create_api_token <user> <name> --scope ingest) and set it as "
                "PICOFLOW_DASHBOARD_TOKEN.",
                self.url, status, reply.get("message", ""))
        with self._cv:
            self._disabled = f"HTTP {status}"
            self.dropped += len(self._queue)
            self._queue.clear()
            self._runs.clear()

    def _give_up(self, batch: list[_Line]) -> None:
        """Closing ran out of time: what is left is lost (nobody can report it)."""
        with self._cv:
            self.dropped += len(batch) + len(self._queue)
            self._queue.clear()

    def _wait_retry(self, attempt: int, retry_after: str | None) -> bool:
        if self._failing_since is None:
            self._failing_since = time.monotonic()
        delay = min(self.max_backoff, self.backoff * 2 ** attempt)
        if retry_after:
            delay = max(delay, min(_retry_after_seconds(retry_after), 60.0))
        return not self._abort.wait(delay)

    def _due_heartbeats(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        return [run_id for run_id, run in self._runs.items()
                if run.running and now - run.contact >= self.heartbeat_seconds]

    def _heartbeat(self, runs: list[str]) -> None:
        body = json.dumps({"runs": runs}).encode("utf-8")
        now = time.monotonic()
        with self._cv:
            for run_id in runs:  # one try per interval, answered or not
                if run_id in self._runs:
                    self._runs[run_id].contact = now
        try:
            status, _, reply = self._post("/api/ingest/heartbeat", body, "application/json")
        except OSError as exc:
            logger.debug("Dashboard heartbeat failed: %r", exc)
            self._no_answer(repr(exc))
            return
        if status >= 500:
            self._no_answer(f"HTTP {status}")
        elif status != 429:
            self._answered()
        if status in (401, 403):
            self._refused_auth(status, reply)
            return
        if status == 409 and reply.get("code") == "run_interrupted":
            with self._cv:
                self._kill(str(reply.get("run_id", "")))
            return
        if status != 200:
            return
        with self._cv:
            self.heartbeats += 1
            answered = reply.get("runs")
            if isinstance(answered, dict):
                for run_id, info in answered.items():
                    if isinstance(info, dict) and info.get("status") == "interrupted":
                        self._kill(run_id)
        self._heard_stops(answered)

    def _post(self, path: str, body: bytes, content_type: str
              ) -> tuple[int, Mapping[str, str], dict[str, Any]]:
        """One POST on the kept-alive connection; OSError on transport failures."""
        status, headers, raw = self._transport.request(
            "POST", self._endpoint + path, body=body, headers={"Content-Type": content_type})
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        return status, headers, parsed if isinstance(parsed, dict) else {}


_DROP_ADVICE = {
    "its buffer is full": "The run emitted faster than the dashboard took events in, "
                          "for longer than the buffer holds: check that the dashboard is "
                          "up and keeps pace, or give the sink a larger hard_cap.",
    "the dashboard refused them or no longer had room for them":
        "The warnings before this one say what the dashboard answered.",
}


def _retry_after_seconds(value: str) -> float:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, when.timestamp() - time.time())
