"""Database stalls, as the rounds that declare runs lost see them.

A run is declared lost (``interrupted``, :mod:`picoflow_web.record.interruption`) when its
worker did not renew its lease in time, or its remote process did not report in time. Both
prove they live by writing to the database, so while the database takes no writes (another
connection holds the write lock, a table is locked, the disk stopped answering) no executor
can prove anything: a deadline that passes meanwhile says nothing about the executor.

Each round that may declare runs lost therefore runs in one transaction that takes the
write lock first (SQLite's ``BEGIN IMMEDIATE``; on PostgreSQL the round's reads wait
behind a table or row lock), and times how long getting there took (:class:`Round`). A
round kept waiting for ``patience`` seconds or more saw a stall: it declares nothing, and
neither does any round of this process until executors had ``grace`` seconds (a whole
lease, a whole silence timeout) of a writable database to renew, since the stall is
counted against a lease only once it ended. A round waits at most a quarter of a lease
after a stall began (the rounds are that frequent), so a stall long enough to cost a
lease is always seen.

What a process knows is what its own rounds waited: one that starts in the last moments
of a stall (a web server starting up) does not know the database was stalled before.
"""

from __future__ import annotations

import threading
import time

_LOCK = threading.Lock()
_writable_again: float | None = None
"""``time.monotonic()`` when this process last saw a stall end."""


class Round:
    """One expiry round, timed from its start: from before its first read, which may
    wait behind a lock too (see the module docstring)."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def calm(self, *, patience: float, grace: float) -> bool:
        """Whether this round may declare runs lost: getting here (the write lock and
        the round's reads) took less than ``patience`` seconds, and the last stall this
        process saw ended ``grace`` seconds ago or more. A round that waited that long
        records a stall that ends now."""
        global _writable_again
        now = time.monotonic()
        with _LOCK:
            if now - self.started >= patience:
                _writable_again = now
            return _writable_again is None or now - _writable_again >= grace


__all__ = ["Round"]
