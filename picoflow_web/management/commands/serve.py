"""``manage.py serve``: the whole app in one command — Daphne and its workers.

Starts Daphne on ``--host``/``--port`` and ``--workers`` (default ``PICOFLOW_WORKERS``, 4)
``manage.py db_worker`` processes, each told where the web server is
(``PICOFLOW_RELAY_URL``) so their runs reach browsers live on the in-memory channel layer.
Ctrl-C (or SIGTERM) stops them all: workers finish the run they hold first. A worker that
exits unexpectedly is started again (its run, if any, becomes ``interrupted`` when its
lease expires); if Daphne exits, everything stops.

``make run`` runs this after ``migrate`` and ``collectstatic``. In production, run Daphne
and ``manage.py db_worker`` under your process manager instead (see the README).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

RESTART_DELAY = 1.0
"""Seconds before a worker that died is started again (no restart storm)."""


class Command(BaseCommand):
    help = "Run Daphne and the run workers; Ctrl-C stops them all."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=settings.PICOFLOW_WORKERS,
                            help="Worker processes (default: PICOFLOW_WORKERS, %(default)s).")

    def handle(self, *args: Any, host: str, port: int, workers: int, **options: Any) -> None:
        if workers < 0:
            raise CommandError("--workers must be 0 or more.")
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        relay_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        env = {**os.environ, "PICOFLOW_RELAY_URL": f"http://{relay_host}:{port}"}
        daphne = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
             "--websocket-max-message-size", "67108864", "picoflow_web.asgi:application"],
            env=env, start_new_session=True)
        pool = [self._worker(manage, env) for _ in range(workers)]
        self.stdout.write(f"PicoFlow Web on http://{host}:{port}/ with {workers} worker(s) "
                          "(Ctrl-C stops them all)")
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping and daphne.poll() is None:
                for i, worker in enumerate(pool):
                    if worker.poll() is not None and not stopping:
                        self.stderr.write(f"Worker {worker.pid} exited ({worker.returncode});"
                                          " starting another.")
                        time.sleep(RESTART_DELAY)
                        pool[i] = self._worker(manage, env)
                time.sleep(0.2)
        finally:
            for process in [*pool, daphne]:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in [*pool, daphne]:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()

    @staticmethod
    def _worker(manage: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        # Own sessions: Ctrl-C reaches only this command, which then stops each child
        # with one SIGTERM (a second signal makes a worker abandon its run).
        return subprocess.Popen([sys.executable, manage, "db_worker", "--no-startup-delay"],
                                env=env, start_new_session=True)
