"""A stand-in for the app's own ``POST /ai/run``, for ``concurrent_steps()`` tests and the
``coordinator`` golden: stdlib ``http.server`` in a thread, answering each request by the
item it carries (``PicoFlow-Coordinator-Item``), attempt by attempt, as the app would.

Behaviours per attempt: ``ok`` (the child's turn succeeded), ``fail`` (it ran and failed:
400 with the reply), ``slow`` (no answer until the test ends), ``401`` / ``503`` / ``500``
(the JSON error shape), ``junk`` (a 200 that is not a flow reply), ``html`` (a flow whose
reply is not plain text: its own payload), ``307`` (a redirect to another path of the
app), ``drop`` (the connection closed once the request was read, without an answer).
``delay`` holds an item's answer back that many seconds, so the order children end in is
fixed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class SelfApp:
    """What the stand-in saw: each request's item, headers and body, in arrival order."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    behaviour: dict[int, list[str]] = field(default_factory=dict)
    """Per item, what to answer on each attempt (the last one repeats); default ``ok``."""
    delay: dict[int, float] = field(default_factory=dict)
    """Per item, seconds to wait before answering."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)


@contextmanager
def self_app() -> Iterator[SelfApp]:
    """A stand-in serving while the block runs."""
    app, stop = start_self_app()
    try:
        yield app
    finally:
        stop()


def start_self_app() -> tuple[SelfApp, Callable[[], None]]:
    """A stand-in serving from a daemon thread, and the function that stops it (a process
    may also just end with it running)."""
    app = SelfApp(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            item = int(self.headers["PicoFlow-Coordinator-Item"])
            with app.lock:
                attempt = sum(1 for r in app.requests if r["item"] == item)
                app.requests.append({"item": item, "body": body, "headers": dict(self.headers),
                                     "path": self.path})
            plan = app.behaviour.get(item, ["ok"])
            what = plan[min(attempt, len(plan) - 1)]
            time.sleep(app.delay.get(item, 0.0))
            if what == "slow":
                app.release.wait(10)  # past the coordinator's timeout; then let go
            if what in ("401", "503", "500"):
                data = {"error": "no", "code": "refused", "message": f"answered {what}"}
                return self._send(int(what), json.dumps(data).encode())
            if what == "202":  # the dashboard's answer when its wait for the turn ran out
                run_id = self.headers["PicoFlow-Run-Id"]
                data = {"run": run_id, "status": "running", "follow": f"/api/runs/{run_id}",
                        "message": "still running"}
                return self._send(202, json.dumps(data).encode())
            if what == "307":
                self.send_response(307)
                self.send_header("Location", app.url + "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if what == "drop":  # the child may have run; its answer never came
                self.close_connection = True
                self.connection.shutdown(2)
                return None
            if what == "junk":
                return self._send(200, b'{"nope": true}')
            if what == "html":  # a flow whose reply is not plain text: its own payload
                return self._send(200, b"<p>report</p>", "text/html")
            success = what in ("ok", "slow")
            reply = {"success": success, "completed": success,
                     "message": f"done {item}" if success else f"child {item} failed",
                     "session": body["session"], "contentType": "text/plain"}
            if not success:
                reply["error_code"] = "step_failed"
            self._send(200 if success else 400, json.dumps(reply).encode())

        def _send(self, status: int, data: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # shutdown() waits for serve_forever's next poll: a short one keeps teardown short.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    app.url = f"http://127.0.0.1:{server.server_address[1]}"

    def stop() -> None:
        app.release.set()
        server.shutdown()
        server.server_close()

    return app, stop
