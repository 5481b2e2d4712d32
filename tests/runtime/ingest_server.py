"""A real local HTTP server speaking the dashboard's ingest contract (stdlib only).

It keeps what it stores per run, applies the contract's rules (idempotent resends, gaps
refused unless a ``sink.overflowed`` in the same request names them, interrupted runs,
tokens), records every request in arrival order, and can be told to misbehave: answer the
next requests with a status, drop the connection, hold replies until released.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runtime.events import DashboardSink, Event, is_valid_id, parse_event


@dataclass
class Request:
    kind: str
    """``ingest``, ``heartbeat`` or ``control``."""
    status: int
    lines: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)


class IngestServer:
    """``with IngestServer() as server:`` serves on ``server.url`` until the block ends."""

    def __init__(self, token: str = "secret", max_line: int = 1_000_000, port: int = 0) -> None:
        self.token = token
        self.max_line = max_line
        self.lock = threading.Lock()
        self.stored: dict[str, list[Event]] = {}
        self.status: dict[str, str] = {}
        self.interrupted: set[str] = set()
        self.requests: list[Request] = []
        self.script: list[Any] = []
        """What to do with the next ingest requests instead of the contract: an int status
        (``(429, {"Retry-After": "0"})`` with headers), ``"drop"`` (close the connection
        without a reply), or ``("gap", run_id, expected_seq)``."""
        self.stops: dict[str, dict[str, Any]] = {}
        """Stop requests by run: answers for a running run carry its ``stop``."""
        self.control = True
        """Whether ``GET /api/ingest/control`` exists (else 404, as an older dashboard)."""
        self.polling: dict[str, int] = {}
        """Control long-polls waiting right now, by run they name."""
        self.changed = threading.Condition(self.lock)
        self.release = threading.Event()
        self.release.set()
        self.held = 0
        """Requests waiting for :attr:`release` right now."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave at once

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                server.handle(self, body)

            def do_GET(self) -> None:
                server.control_poll(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for serve_forever's next poll: a short one keeps teardown short.
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> IngestServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(5)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Replies wait inside the block; leaving it releases them."""
        self.release.clear()
        try:
            yield
        finally:
            self.release.set()

    # -- what the tests read --------------------------------------------------------------

    def seqs(self, run_id: str) -> list[int]:
        with self.lock:
            return [e.seq for e in self.stored.get(run_id, [])]

    def of(self, kind: str) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if r.kind == kind]

    def heartbeats_for(self, run_id: str) -> int:
        return sum(1 for r in self.of("heartbeat") if run_id in r.runs and r.status == 200)

    def request_stop(self, run_id: str, by: str | None) -> None:
        """Ask ``run_id`` to stop, as the dashboard's Stop does."""
        with self.changed:
            self.stops[run_id] = {"by": by, "at": "2026-12-05T01:00:00+00:00",
                                  "reason": f"stopped from the dashboard by {by}"}
            self.changed.notify_all()

    def polls_for(self, run_id: str) -> int:
        with self.lock:
            return self.polling.get(run_id, 0)

    def _position(self, run_id: str) -> dict[str, Any]:
        """Under the lock: a run's entry in an answer."""
        status = self.status.get(run_id, "running")
        stored = self.stored.get(run_id)
        out: dict[str, Any] = {"last_seq": stored[-1].seq if stored else -1, "status": status}
        if run_id in self.stops and status == "running":
            out["stop"] = self.stops[run_id]
        return out

    def control_poll(self, handler: BaseHTTPRequestHandler) -> None:
        """``GET /api/ingest/control?run=…&wait=…``: held until a named run is asked to
        stop (or ended), at most ``wait`` seconds."""
        parts = urllib.parse.urlsplit(handler.path)
        query = urllib.parse.parse_qs(parts.query)
        runs = query.get("run", [])
        headers = {k: v for k, v in handler.headers.items()}
        if parts.path != "/api/ingest/control" or not self.control:
            return self._reply(handler, Request("control", 404, runs=runs, headers=headers),
                               404, {"type": "error", "code": "not_found", "message": "no"})
        wait = float(query.get("wait", ["25"])[0])
        with self.changed:
            for run_id in runs:
                self.polling[run_id] = self.polling.get(run_id, 0) + 1
            self.changed.wait_for(lambda: any(
                r in self.stops or self.status.get(r, "running") != "running"
                for r in runs), timeout=wait)
            for run_id in runs:
                self.polling[run_id] -= 1
            answer = {r: self._position(r) for r in runs if r in self.stored}
        return self._reply(handler, Request("control", 200, runs=runs, headers=headers),
                           200, {"runs": answer})

    # -- the contract ---------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        path = handler.path
        headers = {k: v for k, v in handler.headers.items()}
        if not self.release.is_set():
            with self.lock:
                self.held += 1
            self.release.wait(30)
            with self.lock:
                self.held -= 1
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._reply(handler, Request("ingest" if path == "/api/ingest" else
                                                "heartbeat", 401, headers=headers),
                               401, {"type": "error", "code": "unauthorized",
                                     "message": "bad token"})
        if path == "/api/ingest/heartbeat":
            runs = json.loads(body)["runs"]
            with self.lock:
                for run_id in runs:
                    if run_id in self.interrupted:
                        self.status[run_id] = "interrupted"
                answer = {r: self._position(r) for r in runs}
            return self._reply(handler, Request("heartbeat", 200, runs=runs, headers=headers),
                               200, {"runs": answer})
        lines = body.decode("utf-8").splitlines()
        record = Request("ingest", 0, lines=lines, headers=headers)
        with self.lock:
            action = self.script.pop(0) if self.script else None
        if action == "drop":
            record.status = -1
            with self.lock:
                self.requests.append(record)
            handler.close_connection = True
            handler.connection.shutdown(2)
            return None
        if isinstance(action, int | tuple) and not (isinstance(action, tuple)
                                                     and action[0] == "gap"):
            status, extra = (action, {}) if isinstance(action, int) else action
            record.status = status
            return self._reply(handler, record, status,
                               {"type": "error", "code": "busy", "message": "try later"},
                               extra)
        if isinstance(action, tuple):
            _, run_id, expected = action
            record.status = 409
            return self._reply(handler, record, 409, {
                "type": "error", "code": "seq_gap", "message": "gap", "run_id": run_id,
                "expected_seq": expected, "line": 1})
        status, reply = self._ingest(lines)
        record.status = status
        return self._reply(handler, record, status, reply)

    def _ingest(self, lines: list[str]) -> tuple[int, dict[str, Any]]:
        events: list[Event] = []
        for number, line in enumerate(lines, 1):
            if len(line) > self.max_line:
                return 413, {"type": "error", "code": "line_too_large", "message": "too big",
                             "line": number}
            try:
                events.append(parse_event(line))
            except ValueError as exc:
                return 400, {"type": "error", "code": "bad_event", "message": str(exc)[:200],
                             "line": number}
            if not is_valid_id(events[-1].run_id):  # as a dashboard's ingest refuses it
                return 400, {"type": "error", "code": "invalid_event",
                             "error_code": "bad_run_id", "message": "bad run id",
                             "line": number}
        covers: dict[str, list[tuple[int, int]]] = {}
        for event in events:
            if event.type == "sink.overflowed":
                covers.setdefault(event.run_id, []).append((event.first_seq, event.last_seq))
        with self.lock:
            staged = {r: list(v) for r, v in self.stored.items()}
            status = dict(self.status)
            for number, event in enumerate(events, 1):
                run = event.run_id
                if run in self.interrupted:
                    return 409, {"type": "error", "code": "run_interrupted",
                                 "message": "interrupted", "run_id": run}
                stored = staged.setdefault(run, [])
                expected = stored[-1].seq + 1 if stored else 0
                if event.seq < expected:
                    continue
                if event.seq > expected and not any(
                        first <= expected and last >= event.seq - 1
                        for first, last in covers.get(run, [])):
                    return 409, {"type": "error", "code": "seq_gap", "message": "gap",
                                 "run_id": run, "expected_seq": expected, "line": number}
                stored.append(event)
                status[run] = {"turn.finished": "finished", "turn.failed": "failed",
                               "turn.cancelled": "cancelled"}.get(
                    event.type, status.get(run, "running"))
            self.stored, self.status = staged, status
            self.changed.notify_all()
            runs = {e.run_id for e in events}
            return 200, {"runs": {r: self._position(r) for r in runs}}

    def _reply(self, handler: BaseHTTPRequestHandler, record: Request, status: int,
               reply: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.requests.append(record)
        data = json.dumps(reply).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)


@contextmanager
def sinks_for(server: IngestServer) -> Iterator[Callable[..., DashboardSink]]:
    """A maker of ``DashboardSink``s shipping to ``server`` on short timers (options
    override them; ``token`` replaces the server's), each closed on the way out."""
    made: list[DashboardSink] = []

    def make(**options: Any) -> DashboardSink:
        options = {"batch_seconds": 0.01, "backoff": 0.01, "max_backoff": 0.05,
                   "heartbeat_seconds": 60.0, "timeout": 5.0, **options}
        token = options.pop("token", server.token)
        sink = DashboardSink(server.url, token, **options)
        made.append(sink)
        return sink

    try:
        yield make
    finally:
        for sink in made:
            sink.close(timeout=5)
