"""``manage.py serve``: the whole app in one command — Daphne and its workers.

Starts Daphne on ``--host``/``--port`` and ``--workers`` (default ``PICOFLOW_WORKERS``, 4)
``manage.py db_worker`` processes, each told where the web server is
(``PICOFLOW_RELAY_URL``) so their runs reach browsers live on the in-memory channel layer.
Ctrl-C (or SIGTERM) stops them all: workers finish the run they hold first. A worker that
exits unexpectedly is started again (its run, if any, becomes ``interrupted`` when its
lease expires); if Daphne exits, everything stops.

Its start-up lines say when Django's debug page is on (``PICOFLOW_DEBUG=1``) and when plain
HTTP is redirected to HTTPS (then a browser needs TLS in front).

``picoflow-web serve`` (and so ``make run``) runs this after ``migrate``, ``collectstatic``
and ``ensure_admin`` (:mod:`picoflow_web.cli`). In a project of your own that includes the
app, ``manage.py serve`` serves that project's ``ASGI_APPLICATION`` the same way. In
production, run Daphne and ``manage.py db_worker`` under your process manager instead (see
the README).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from picoflow_web.config import app_settings

RESTART_DELAY = 1.0
"""Seconds before a worker that died is started again (no restart storm)."""


class Command(BaseCommand):
    help = "Run Daphne and the run workers; Ctrl-C stops them all."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=app_settings.get("WORKERS"),
                            help="Worker processes (default: PICOFLOW_WORKERS, %(default)s).")

    def handle(self, *args: Any, host: str, port: int, workers: int, **options: Any) -> None:
        if workers < 0:
            raise CommandError("--workers must be 0 or more.")
        relay_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        env = child_env(f"http://{relay_host}:{port}")
        env.update(self_call_env(env))
        daphne = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
             "--websocket-max-message-size", "67108864", asgi_target()],
            env=env, start_new_session=True)
        pool = [self._worker(env) for _ in range(workers)]
        self.stdout.write(banner(host, port, workers))
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
                        pool[i] = self._worker(env)
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
    def _worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
        # Own sessions: Ctrl-C reaches only this command, which then stops each child
        # with one SIGTERM (a second signal makes a worker abandon its run).
        # ``python -m django``: no manage.py is needed (an installed wheel has none).
        return subprocess.Popen(
            [sys.executable, "-m", "django", "db_worker", "--no-startup-delay"],
            env=env, start_new_session=True)


def banner(host: str, port: int, workers: int) -> str:
    """The start-up lines: where, how many workers, and the modes a user must know of
    (Daphne and the workers run on these very settings)."""
    lines = [f"PicoFlow Web on http://{host}:{port}/ with {workers} worker(s) "
             "(Ctrl-C stops them all)"]
    if settings.DEBUG:
        lines.append("Django's debug page on (PICOFLOW_DEBUG=1): for development only.")
    if getattr(settings, "SECURE_SSL_REDIRECT", False):
        lines.append("HTTPS hardening on: plain HTTP is redirected to https:// (serve it "
                     "behind TLS; PICOFLOW_HTTPS=0 serves plain HTTP, on a trusted network "
                     "only).")
    return "\n".join(lines)


def asgi_target() -> str:
    """The project's ``ASGI_APPLICATION`` as Daphne names it (``module:attribute``)."""
    target = getattr(settings, "ASGI_APPLICATION", "")
    module, _, attribute = target.rpartition(".")
    if not module:
        raise CommandError("Set ASGI_APPLICATION (e.g. \"mysite.asgi.application\"): "
                           "serve starts Daphne on it.")
    return f"{module}:{attribute}"


def child_env(relay_url: str) -> dict[str, str]:
    """The environment of Daphne and the workers: this process's settings module, and its
    script's folder on the path (a project's manage.py folder holds its settings)."""
    env = {**os.environ, "PICOFLOW_RELAY_URL": relay_url,
           "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE or "picoflow_web.config.settings"}
    head = sys.path[0] if sys.path and sys.path[0] else os.getcwd()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (head, env.get("PYTHONPATH", "")) if p)
    return env


SELF_TOKEN_NAME = "serve: coordinators"
"""The name of the run-scoped token ``serve`` issues for coordinators' child requests."""


def self_call_env(env: dict[str, str]) -> dict[str, str]:
    """What a coordinator (``concurrent_steps()``) needs to call this dashboard, unless the
    environment says it already: ``PICOFLOW_SELF_URL`` (this server) and
    ``PICOFLOW_SELF_TOKEN`` (a fresh ``run``-scoped token of the first superuser in the
    default project; the one an earlier start issued is revoked). Nothing for the token
    without a superuser."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from picoflow_web.models import ApiToken

    extra: dict[str, str] = {}
    if not env.get("PICOFLOW_SELF_URL"):
        extra["PICOFLOW_SELF_URL"] = env["PICOFLOW_RELAY_URL"]
    if env.get("PICOFLOW_SELF_TOKEN"):
        return extra
    admin = get_user_model().objects.filter(is_superuser=True, is_active=True).order_by(
        "pk").first()
    if admin is None:
        return extra
    ApiToken.objects.filter(user=admin, name=SELF_TOKEN_NAME, revoked_at=None).update(
        revoked_at=timezone.now())
    _, raw = ApiToken.issue(admin, SELF_TOKEN_NAME, ("run",))
    extra["PICOFLOW_SELF_TOKEN"] = raw
    return extra
