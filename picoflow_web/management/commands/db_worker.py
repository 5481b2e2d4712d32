"""``manage.py db_worker``: django-tasks-db's worker, for PicoFlow's runs.

The same command and options as django-tasks-db's (``--interval``, ``--queue-name``,
``--worker-id``, ``--max-tasks``, ``--batch``, ...), with defaults for executing runs and
six additions:

* ``--interval`` defaults to ``PICOFLOW_WORKER_POLL`` (0.1 s): a queued run starts
  promptly; ``--worker-id`` to ``<host>-<pid>``, which names the worker on run pages;
  ``--reload`` is off (a reload would abandon the runs in flight).
* ``--concurrency N`` (default ``PICOFLOW_WORKER_CONCURRENCY``): N runs at once, one per
  thread; the upstream worker executes one task at a time.
* Its CPU priority is lowered by ``PICOFLOW_WORKER_NICE`` (10): a run is batch work, and
  on a machine shared with the web server, pages and API calls must not queue behind a
  100,000-branch fan-out for the CPU.
* Its interpreter is tuned for a run's events stored from a thread while the run keeps the
  event loop busy: a short thread switch interval and a cyclic collector that does not
  walk a wide fan-out's live objects every few hundred allocations (see
  :data:`SWITCH_INTERVAL`, :data:`GC_THRESHOLDS`).
* Its database connections are kept between polls (checked before reuse), where the
  upstream worker, under Django's default ``CONN_MAX_AGE`` of 0, opens a new one for every
  poll: on PostgreSQL a server process started and ended ten times a second by every idle
  worker (see :data:`CONN_MAX_AGE`).
* A reaper: at start-up and every quarter lease, runs whose worker lease expired are
  declared interrupted (see :mod:`picoflow_web.record.interruption`), so a killed worker's runs are
  noticed with no browser open; not while the database is stalled (a lock held
  elsewhere), when no worker can renew (see :mod:`picoflow_web.record.stalls`).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
from argparse import ArgumentParser
from types import FrameType
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.core.management.base import CommandError
from django.db import connections
from django_tasks_db.management.commands import db_worker as upstream

from picoflow_web.config import app_settings
from picoflow_web.execute import leases
from picoflow_web.record.append import broadcast_sync

logger = logging.getLogger("picoflow.web")


class _PoolWorker(upstream.Worker):
    """A worker whose shutdown (a signal, in the main thread) also stops its siblings;
    each finishes the run it has before the process exits."""

    siblings: list[upstream.Worker]

    def shutdown(self, signum: int, frame: FrameType | None) -> None:
        for sibling in self.siblings:
            sibling.running = False
        super().shutdown(signum, frame)


SWITCH_INTERVAL = 0.0002
"""Seconds a thread may hold Python's lock while another waits for it (the interpreter's
default: 0.005). A run's events are stored from a thread while the run keeps the event loop
busy, and that thread gives the lock up around every database call: at the default it
waits up to 5 ms to get it back each time, and a wide fork's first events reach the store
seconds late. Shorter turns cost the run little (a switch happens only while a thread
waits)."""


GC_THRESHOLDS = (50_000, 20, 10)
"""The cyclic collector's thresholds in a worker (the interpreter's: 700, 10, 10). A wide
fan-out allocates millions of objects that stay alive until its join — branches, their
views, their events waiting to be stored — and at the default thresholds the collector
walks them again every few hundred allocations, finding nothing: most of a wide turn's time
went there. Garbage cycles wait a little longer to be freed."""


CONN_MAX_AGE = 300
"""Seconds a worker keeps a database connection (Django's ``CONN_MAX_AGE``, for this
process only: the web server's stay per request). Each is checked before it is used after
a poll (``CONN_HEALTH_CHECKS``), so a connection the server dropped is replaced, not
failed on; a finite age still hands long-lived server processes back now and then."""


def keep_connections() -> None:
    """Keep this process's database connections between polls (see :data:`CONN_MAX_AGE`);
    a connection open already takes the new age when it is next replaced."""
    for alias in connections:
        settings = connections.settings[alias]
        settings["CONN_MAX_AGE"] = CONN_MAX_AGE
        settings["CONN_HEALTH_CHECKS"] = True


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"[:64]


class Command(upstream.Command):
    help = "Execute queued runs (django-tasks-db's worker, with a lease reaper)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.set_defaults(interval=app_settings.get("WORKER_POLL"),
                            worker_id=default_worker_id(), reload=False)
        parser.add_argument(
            "--concurrency", type=int, default=app_settings.get("WORKER_CONCURRENCY"),
            help="Runs this process executes at once, one per thread (default: "
                 "PICOFLOW_WORKER_CONCURRENCY, %(default)s).")

    def handle(self, *args: Any, **options: Any) -> None:
        concurrency: int = options.pop("concurrency")
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1.")
        in_memory = isinstance(get_channel_layer(), InMemoryChannelLayer)
        if in_memory and not app_settings.get("RELAY_URL"):
            logger.warning(
                "In-memory channel layer and no PICOFLOW_RELAY_URL: browsers will see this "
                "worker's runs only when they reload. Set PICOFLOW_RELAY_URL to the web "
                "server's URL (manage.py serve does), or REDIS_URL.")
        nice = app_settings.get("WORKER_NICE")
        if nice and hasattr(os, "nice"):
            os.nice(nice)
        sys.setswitchinterval(SWITCH_INTERVAL)
        keep_connections()
        # What is loaded by now (Django, the flows) lives as long as the process: out of
        # the collector's sight. Then collections far apart (see GC_THRESHOLDS).
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        stop = threading.Event()
        reaper = threading.Thread(
            target=leases.expire_in_background, name="lease-reaper", daemon=True,
            args=(lambda stored: broadcast_sync(stored.appended), stop))
        reaper.start()
        try:
            if concurrency == 1:
                super().handle(*args, **options)
            else:
                self._handle_pool(concurrency, options)
        finally:
            stop.set()

    def _handle_pool(self, concurrency: int, options: dict[str, Any]) -> None:
        self.configure_logging(options["verbosity"])
        queue_names = options["queue_name"].split(",")
        excluded = options["exclude_queues"].split(",") if options["exclude_queues"] else []

        def make(cls: type[upstream.Worker], index: int) -> upstream.Worker:
            return cls(queue_names=queue_names, interval=options["interval"],
                       batch=options["batch"], backend_name=options["backend_name"],
                       startup_delay=options["startup_delay"],
                       max_tasks=options["max_tasks"],
                       worker_id=f"{options['worker_id']}/{index}"[:64],
                       excluded_queue_names=excluded)

        main = make(_PoolWorker, 0)
        assert isinstance(main, _PoolWorker)
        main.siblings = [make(upstream.Worker, i) for i in range(1, concurrency)]
        threads = [threading.Thread(target=w.run, name=f"worker-{i}")
                   for i, w in enumerate(main.siblings, 1)]
        for thread in threads:
            thread.start()
        main.configure_signals()
        main.run()
        for sibling in main.siblings:
            sibling.running = False
        for thread in threads:
            thread.join()
