"""The dashboard sink: ship a process's events to a PicoFlow dashboard over HTTP.

:class:`DashboardSink` is an :class:`~runtime.events.bus.EventSink` for runs that execute
outside the web app (a script, a user's own service). ``receive`` serialises the event (the
one time it is: :func:`~runtime.events.sinks.event_json`) and appends the line to a buffer
under a lock; a daemon thread batches the buffer (by count and by age) and POSTs the lines
to the dashboard's ingest endpoint, on httpx2 (the ``http`` extra, loaded by
:mod:`runtime.events.ingest_client` when a sink is made).

Why serialise in ``receive`` rather than in the thread: a buffered event kept as a model
keeps its object graph alive for the garbage collector to walk until it is sent, and the
thread's serialising competes for the interpreter lock with the run anyway. A line is bytes
(nothing to walk), and the thread is left with joining lines and waiting on the socket, which
releases the lock.

The ingest contract, client side:

* ``POST {url}/api/ingest`` with ``Authorization: Bearer <token>``, ``Content-Type:
  application/x-ndjson``, ``PicoFlow-Origin-Host``, ``PicoFlow-Origin-Pid`` and, when the
  sink names one, ``PicoFlow-Origin-Source`` (what records the runs: ``LangGraph``); the
  body is one event per line, of any number of runs, in emission order. A 200 reply names the last
  stored seq of each run of the request; events the reply does not acknowledge are kept and
  sent again.
* Resending is idempotent (the server ignores seqs it already stored), so 5xx, 429
  (``Retry-After`` is respected), connection errors and timeouts are retried with capped
  exponential backoff, resending the same events.
* 409 ``seq_gap``: nothing was stored; the sink resends from ``expected_seq`` when it still
  holds that event, else the events are lost, and it says so with a ``sink.overflowed`` event
  naming the missing range, sent in the same request as the events after the gap.
* 409 ``run_interrupted`` (or a reply saying the run is ``interrupted``): the server gave up
  on the run; its events are dropped and nothing more is sent for it.
* 401/403: logged once (logger ``picoflow``); the sink stops sending and drops everything.
* A dashboard that cannot be reached (two attempts in a row without an answer, or with a
  5xx) is logged once at WARNING, and again only after it answered in between; so is the
  first event the sink loses (:attr:`DashboardSink.dropped` counts them all).
* 400/413: logged; the offending line (the reply's ``line``, 1-based) or else the whole batch
  is dropped, and reported as lost.
* A run whose run or session id is not a valid id (:mod:`runtime.events.ids`; the engine
  refuses such ids, an :class:`~runtime.events.bus.EventBus` used directly does not) is
  never sent: its events are dropped, counted in ``dropped``, with one warning.
* Heartbeats: every ``heartbeat_seconds`` the sink POSTs ``{url}/api/ingest/heartbeat``
  ``{"runs": [...]}`` for the runs between ``turn.started`` and ``turn.finished`` /
  ``turn.failed`` that no batch reached meanwhile, so the server does not declare them
  interrupted.
* Stop: someone pressed Stop on a run's page. A run's entry in an ingest or heartbeat
  answer then carries ``stop`` (``{"by", "at", "reason"}``), and so does the answer of
  ``GET {url}/api/ingest/control?run=<id>…`` , a long-poll a second thread keeps open while
  a run has a stop hook (:meth:`DashboardSink.on_stop`; the engine sets one for every
  turn). The hook is called once per run, from the sink's threads; the engine's cancels
  the turn's token, as a local Stop does. A dashboard without that endpoint (404) is
  not asked again: its answers still carry the request.

Back-pressure. Above ``max_buffer`` buffered events :meth:`DashboardSink.congested` is true;
the runtime then holds the run at its next await point (a branch start, a model call) until
the buffer drains, so a slow dashboard slows the run instead of losing events. Only past
``hard_cap`` (far above ``max_buffer``: code that emits without ever awaiting) are events
dropped; the sink then returns the dropped range from ``receive`` and the bus emits
``sink.overflowed``, which is shipped like any other event. A dashboard that is down (every
attempt failing for ``outage_seconds``) stops holding runs, so an outage cannot stall them;
delivery resumes when it answers again. A loss the sink learns of after
the run's last event is reported by a ``sink.overflowed`` event of its own, stamped with the
run's next seq.

``flush()`` sends what is buffered; ``close()`` flushes and stops the thread, giving up after
``close_timeout`` seconds (``PICOFLOW_DASHBOARD_CLOSE_TIMEOUT``, default 5) with a warning
that says how many events were not shipped. Every open sink is closed at interpreter exit
(``atexit``), so a script that ends normally loses nothing while the dashboard answers.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
import urllib.parse
import weakref
from collections import deque
from collections.abc import Callable

from .ingest_client import (
    CLOSE_TIMEOUT_ENV,
    DEFAULT_CLOSE_TIMEOUT,
    MAX_SOURCE_CHARS,
    IngestClient,
    StopHook,
    _Cover,
    _Line,
    _Run,
    close_timeout_from_env,
    new_transport,
    source_problem,
)
from .schema import Event, SinkOverflowed
from .sinks import event_json

logger = logging.getLogger("picoflow")

_TERMINAL = frozenset({"turn.finished", "turn.failed"})
_SPECIAL = frozenset({"turn.started", "turn.finished", "turn.failed", "sink.overflowed"})
_LIVE: weakref.WeakSet[DashboardSink] = weakref.WeakSet()

_tuple_new = tuple.__new__  # a _Line without the named tuple's own (Python) __new__


def _line_of(event: Event) -> _Line:
    return _tuple_new(_Line, (event.run_id, event.seq, event_json(event)))


class IngestRefused(Exception):
    """The dashboard refused a request for good (not retried)."""


class DashboardSink(IngestClient):
    """Ships events to a dashboard's ``/api/ingest`` in batches (see the module docstring).

    Args:
        url: the dashboard's base URL (``http://host:8000``).
        token: an API token with the ingest scope.
        batch_events: send as soon as this many events are buffered (at most this many
            per request).
        batch_bytes: at most this many bytes of lines per request (a single larger line
            goes alone).
        batch_seconds: send buffered events at the latest this long after the oldest came.
        max_buffer: above this many buffered (or unacknowledged) events the sink is
            congested and the runtime holds runs at their next await point.
        hard_cap: buffered events past which new ones are dropped (default 10 x
            ``max_buffer``); reported as ``sink.overflowed``.
        heartbeat_seconds: how often running runs no batch reached are kept alive.
        timeout: seconds one HTTP request may take.
        backoff: the first retry delay; doubled per failure, capped at ``max_backoff``.
        outage_seconds: when every attempt has failed for this long (the dashboard is
            down, not slow), the sink stops holding runs: they go on, and what exceeds
            ``hard_cap`` meanwhile is dropped and reported.
        source: what records the runs (``"LangGraph"``), for the dashboard's origin label;
            at most :data:`MAX_SOURCE_CHARS` printable ASCII characters.
        control_seconds: how long the dashboard holds the stop long-poll open (0: no
            long-poll; a stop request then arrives with the next answer).
        close_timeout: seconds :meth:`close` waits for the dashboard before it gives up
            (None: ``PICOFLOW_DASHBOARD_CLOSE_TIMEOUT``, default 5).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        batch_events: int = 1000,
        batch_bytes: int = 1_000_000,
        batch_seconds: float = 0.2,
        max_buffer: int = 10_000,
        hard_cap: int | None = None,
        heartbeat_seconds: float = 5.0,
        timeout: float = 10.0,
        backoff: float = 0.1,
        max_backoff: float = 5.0,
        outage_seconds: float = 60.0,
        name: str = "dashboard",
        source: str | None = None,
        control_seconds: float = 25.0,
        close_timeout: float | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"Dashboard URL must be http(s)://host[:port][/path], not {url!r}.")
        problem = None if source is None else source_problem(source)
        if problem:
            raise ValueError(f"The sink's source {source!r} {problem}.")
        self.name = name
        self.url = url.rstrip("/")
        # Requests go to the URL's host and path: never its credentials (the token
        # authenticates) nor its query.
        self._endpoint = urllib.parse.urlunsplit(
            (parts.scheme, parts.netloc.rpartition("@")[2], parts.path.rstrip("/"), "", ""))
        self._headers = {
            "Authorization": f"Bearer {token}",
            "PicoFlow-Origin-Host": socket.gethostname(),
            "PicoFlow-Origin-Pid": str(os.getpid()),
        }
        if source is not None:
            self._headers["PicoFlow-Origin-Source"] = source
        # Made here, not in the thread: a sink without httpx2 fails where it is created, and
        # the client's set-up does not compete with the run for the interpreter.
        self._transport = new_transport(self._endpoint, self._headers, timeout)
        self.batch_events = max(1, batch_events)
        self.batch_bytes = batch_bytes
        self.batch_seconds = batch_seconds
        self.max_buffer = max_buffer
        self.hard_cap = hard_cap if hard_cap is not None else 10 * max_buffer
        self.heartbeat_seconds = heartbeat_seconds
        self.timeout = timeout
        self.backoff, self.max_backoff = backoff, max_backoff
        self.outage_seconds = outage_seconds
        self.close_timeout = close_timeout_from_env() if close_timeout is None \
            else close_timeout
        self._failing_since: float | None = None
        self.failures = 0
        """Requests that got no answer (refused, reset, timed out) or a 5xx."""
        self._failing = 0
        """Failures since the last answer (or since the sink started)."""
        self._said_down = False
        self._said_dropped = False
        self.requests = 0
        """Ingest requests answered 200 (batches delivered)."""
        self.heartbeats = 0
        """Heartbeat requests answered 200."""
        self.dropped = 0
        """Events lost (hard cap, refused lines, gaps that could not be repaired)."""
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._queue: deque[_Line] = deque()
        self._first_at = 0.0
        self._inflight = 0
        self._sending = False
        self._runs: dict[str, _Run] = {}
        self._dead: set[str] = set()
        self._bad_ids: set[str] = set()
        """Runs whose run or session id no dashboard takes (also in ``_dead``)."""
        self._held = 0
        """Number of open covers (gaps) across runs: the batch taker's slow path."""
        self._disabled: str | None = None
        self._flushing = 0
        self._closed = False
        self._closing = False
        self._stuck = False
        self._abort = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._loop, name=f"picoflow-{name}", daemon=True)
        self._thread.start()
        self.control_seconds = control_seconds
        self._stop_hooks: dict[str, StopHook] = {}
        self._stops_heard: set[str] = set()
        self._control: threading.Thread | None = None
        self._control_off = control_seconds <= 0
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- the event loop's side (must not block) -------------------------------------------

    def receive(self, event: Event) -> tuple[int, int] | None:
        """Buffer one event; returns a lost range for the bus to report, if any."""
        with self._lock:
            # A run losing events holds a cover (_held), so one test covers every run.
            if event.type in _SPECIAL or self._held or self._dead or self._disabled \
                    or self._closing:
                return self._handle_special(event)
            queue = self._queue
            if len(queue) + self._inflight >= self.hard_cap:
                self._drop(event)
                return None
            if not queue:  # a new batch starts aging: the sender sets its clock by it
                self._first_at = time.monotonic()
                self._cv.notify()
            queue.append(_line_of(event))
            if len(queue) == self.batch_events:
                self._cv.notify()
            return None

    def _handle_special(self, event: Event) -> tuple[int, int] | None:
        run_id = event.run_id
        if self._closing or self._disabled or run_id in self._dead:
            self.dropped += run_id in self._bad_ids
            return None
        run = self._runs.get(run_id)
        if run is None:
            if self._refuse_ids(run_id, event.session_id):
                self.dropped += 1
                return None
            run = self._runs[run_id] = _Run(session_id=event.session_id)
        run.last_seq = max(run.last_seq, event.seq)
        run.last_offset = event.offset
        kind = event.type
        if kind == "turn.started":
            run.running, run.contact = True, time.monotonic()
        elif kind in _TERMINAL:
            run.running, run.ended = False, True
            run.session_id = event.session_id
        if len(self._queue) + self._inflight >= self.hard_cap:
            self._drop(event)
            return None
        if not self._queue:
            self._first_at = time.monotonic()
            self._cv.notify()
        self._queue.append(_line_of(event))
        if kind == "sink.overflowed" and getattr(event, "sink", None) == self.name:
            for cover in run.covers:
                if cover.overflow == -1:
                    cover.overflow = event.seq
                    break
            self._cv.notify()
        if run.dropping is not None:
            first, last, count = run.dropping
            run.dropping = None
            self._cv.notify()
            del count  # the bus reports last - first + 1; self.dropped keeps the count
            return first, last
        if len(self._queue) >= self.batch_events:
            self._cv.notify()
        return None

    def _drop(self, event: Event) -> None:
        run = self._runs.get(event.run_id)
        if run is None:
            run = self._runs[event.run_id] = _Run(session_id=event.session_id)
        run.last_seq = max(run.last_seq, event.seq)
        run.last_offset = event.offset
        self.dropped += 1
        self._say_dropped("its buffer is full")
        if run.dropping is None:
            run.dropping = [event.seq, event.seq, 1]
            run.covers.append(_Cover(event.seq))
            self._held += 1
        else:
            run.dropping[1], run.dropping[2] = event.seq, run.dropping[2] + 1
        if event.type in _TERMINAL:
            run.running, run.ended = False, True
        self._cv.notify()  # an ended run's loss is reported by the sender

    # -- stop requests ---------------------------------------------------------------------

    def on_stop(self, run_id: str, hook: StopHook) -> Callable[[], None]:
        """Call ``hook(reason, by)`` (once, from one of the sink's threads) when the
        dashboard asks run ``run_id`` to stop; returns what removes the hook (call it when
        the turn ended)."""
        with self._cv:
            self._stop_hooks[run_id] = hook
            self._start_control()
            self._cv.notify_all()

        def remove() -> None:
            with self._cv:
                if self._stop_hooks.get(run_id) is hook:
                    del self._stop_hooks[run_id]
                self._stops_heard.discard(run_id)

        return remove

    def congested(self) -> bool:
        """Whether the run should wait: more than ``max_buffer`` events unsent."""
        if len(self._queue) + self._inflight <= self.max_buffer:
            return False
        # Left only with events that wait for a loss report (which the run's next event
        # brings), the run must go on: never block on those.
        if self._disabled or self._closing or self._stuck or not self._thread.is_alive():
            return False
        failing = self._failing_since
        return failing is None or time.monotonic() - failing < self.outage_seconds

    # -- flushing and closing -------------------------------------------------------------

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Send everything buffered now; True when all of it was answered in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            self._flushing += 1
            self._cv.notify_all()
            try:
                while (self._queue or self._sending or self._pending_reports()) \
                        and self._thread.is_alive():
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cv.wait(left)
                return not self._queue
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> bool:
        """Flush, then stop the sending thread; True when nothing was left unsent.

        Gives up after ``timeout`` seconds (None: :attr:`close_timeout`) and then says, at
        WARNING, how many events were not shipped; they are lost."""
        limit = self.close_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._cv:
            self._closing = True  # from now on nothing is taken, so every run has ended
        done = self.flush(limit)
        with self._cv:
            self._closed = True
            unsent = 0 if done else len(self._queue) + self._inflight
            self._cv.notify_all()
        if not done or self._control is not None:  # a long-poll's retries end too
            self._abort.set()
        # A request blocked on the network is not waited for: the thread is a daemon.
        self._thread.join(max(0.0, deadline - time.monotonic()))
        _LIVE.discard(self)
        if unsent:
            logger.warning(
                "Dashboard sink %s gave up closing after %gs: %d events were not shipped "
                "and are lost. Check that the dashboard runs and answers, or set "
                "PICOFLOW_DASHBOARD_CLOSE_TIMEOUT to wait longer.", self.url, limit, unsent)
        return done

    def _pending_reports(self) -> bool:
        return any(r.dropping is not None and (r.ended or self._closing)
                   for r in self._runs.values())

    # -- the sending thread ---------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while True:
                with self._cv:
                    batch = self._next_batch()
                    if batch is None:
                        if self._closed and not self._queue:
                            return
                        continue
                    beats = self._due_heartbeats() if not batch else []
                    self._sending = True
                    self._inflight = len(batch)
                try:
                    if batch:
                        self._send(batch)
                    elif beats:
                        self._heartbeat(beats)
                finally:
                    with self._cv:
                        self._sending = False
                        self._inflight = 0
                        self._cv.notify_all()
        except Exception:  # pragma: no cover - a bug here must not go unnoticed
            logger.exception("Dashboard sink %s stopped", self.url)
        finally:
            self._transport.close()

    def _next_batch(self) -> list[_Line] | None:
        """Under the lock: the events to send now, [] for a heartbeat, None after a wait."""
        self._report_ended_losses()
        now = time.monotonic()
        due = self._closing or self._flushing or len(self._queue) >= self.batch_events
        held = False
        if self._queue and (due or now - self._first_at >= self.batch_seconds):
            batch = self._take()
            if batch:
                return batch
            held = self._stuck = True  # all left waits for a loss report: for receive()
        if self._due_heartbeats(now):
            return []
        if self._closed and not self._queue:
            return None
        waits = [self.heartbeat_seconds]
        if self._queue and not held:
            waits.append(self.batch_seconds - (now - self._first_at))
        for run in self._runs.values():
            if run.running:
                waits.append(run.contact + self.heartbeat_seconds - now)
        self._cv.wait(max(0.001, min(waits)))
        return None

    def _take(self) -> list[_Line]:
        queue = self._queue
        if not self._held:
            count = min(self.batch_events, len(queue))
            batch = [queue.popleft() for _ in range(count)]
        else:
            batch, kept = [], deque[_Line]()
            owed: dict[str, int] = {}
            for event in queue:
                run = self._runs.get(event.run_id)
                cover = _cover_of(run, event.seq) if run is not None else None
                if cover is not None and cover.overflow == -1:
                    kept.append(event)
                    continue
                if len(batch) >= self.batch_events and not owed:
                    kept.append(event)
                    continue
                batch.append(event)
                if cover is not None:
                    owed[event.run_id] = cover.overflow
                    if event.seq == cover.overflow:
                        assert run is not None
                        run.covers.remove(cover)
                        self._held -= 1
                        del owed[event.run_id]
            self._queue = kept
        if self._queue:
            self._first_at = time.monotonic()
        if batch:
            self._stuck = False
        return batch

    def _report_ended_losses(self) -> None:
        """Under the lock: a run that emits no more gets a ``sink.overflowed`` of ours."""
        for run_id, run in self._runs.items():
            if run.dropping is None or not (run.ended or self._closing):
                continue
            first, last, count = run.dropping
            run.dropping = None
            seq = max([run.last_seq, *(e.seq for e in self._queue if e.run_id == run_id)]) + 1
            run.last_seq = seq
            overflow = SinkOverflowed(
                run_id=run_id, session_id=run.session_id, seq=seq, time=time.time(),
                offset=run.last_offset, path="", sink=self.name, first_seq=first,
                last_seq=last, dropped=count)
            for cover in run.covers:
                if cover.overflow == -1:
                    cover.overflow = seq
                    break
            if not self._queue:
                self._first_at = time.monotonic()
            self._queue.append(_line_of(overflow))


def _cover_of(run: _Run, seq: int) -> _Cover | None:
    """The last gap at or before ``seq``: the report the event must travel with."""
    found = None
    for cover in run.covers:
        if seq >= cover.first:
            found = cover
    return found


@atexit.register
def _flush_at_exit() -> None:
    for sink in list(_LIVE):
        sink.close()


__all__ = ["CLOSE_TIMEOUT_ENV", "DEFAULT_CLOSE_TIMEOUT", "MAX_SOURCE_CHARS", "DashboardSink",
           "IngestRefused", "StopHook", "close_timeout_from_env", "source_problem"]
