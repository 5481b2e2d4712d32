"""The event log as text: a batch of events appended as the JSON text they were
serialised to, and read back as that text (for pages that replay a run, so the server
does not parse and re-encode what it only passes on).

A batch of ``(run, seq, type, path, payload)`` rows goes in as a few many-row INSERTs
(SQLite) or one ``COPY`` (PostgreSQL). The ORM's ``bulk_create`` does per-field Python work
for every event (model instances, value preparation, the JSON field's encoder), which is
most of a worker's time on a big fan-out, and would encode every payload a second time;
here the text the recorder already made is stored as it is, in a text
column on both databases (:class:`~picoflow_web.models.TrustedJSONField`), and read back
as that same text.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Collection, Sequence
from typing import Any

from django.db import connection

from runtime.events import Event

TABLE = "picoflow_web_eventrecord"
COLUMNS = ("run_id", "seq", "type", "path", "payload")
""":class:`~picoflow_web.models.EventRecord`'s table and columns (fixed by its migrations;
an insert into anything else fails loudly)."""


def _insert_sql(rows: int = 1) -> str:
    """An INSERT of ``rows`` rows (several rows only on SQLite, see :func:`_insert_sqlite`)."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(name) for name in COLUMNS)
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * rows)
    return f"INSERT INTO {quote(TABLE)} ({columns}) VALUES {values}"


def insert_events(run_id: str, events: Sequence[Event], texts: Sequence[str]) -> None:
    """Store ``events`` of run ``run_id``; ``texts`` are their JSON (``model_dump_json``).

    Raises :class:`django.db.IntegrityError` when a seq is taken (nothing of the batch is
    stored if the caller holds a transaction).
    """
    insert_rows(run_id, [(e.seq, e.type, e.path, text)
                         for e, text in zip(events, texts, strict=True)])


Row = tuple[int, str, str, str] | tuple[int, str, str, str, Any]
"""An event as stored: ``(seq, type, path, JSON text)``, maybe followed by what its caller
keeps with it (read nowhere here), so a caller's own tuples need no copy."""


def insert_rows(run_id: str, rows: Sequence[Row]) -> None:
    """Store events of run ``run_id`` given as :data:`Row`: the text is stored as it is (it
    must be one valid JSON object). Raises as :func:`insert_events`.

    On PostgreSQL with more than a few rows, one ``COPY``: the rows stream in one
    statement, where ``executemany`` runs (and the server plans and casts) one ``INSERT``
    per row — five times slower for a batch of a thousand.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and len(rows) > _COPY_FROM:
            _copy(cursor, run_id, rows)
        elif connection.vendor == "sqlite":
            _insert_sqlite(cursor, run_id, rows)
        else:
            cursor.executemany(_insert_sql(), [(run_id, *row[:4]) for row in rows])


_COPY_FROM = 8
"""Rows above which PostgreSQL gets a COPY (below it, starting one costs more)."""

_SHAPES = (512, 256, 128, 64, 32, 16, 8, 4, 2, 1)
"""Rows per SQLite INSERT: a batch is cut into these, largest first, so a handful of
statement shapes (each prepared once, then cached by the driver) serve every batch size."""


def _insert_sqlite(cursor: Any, run_id: str, rows: Sequence[Row]) -> None:
    """Rows in statements of many rows each, not ``executemany``'s one per row.

    A statement runs in SQLite with Python's lock released once; ``executemany`` releases
    and retakes it for every row, and each retaking waits for the thread that holds it (a
    run on the event loop) to let go: a batch stored in a worker's thread crawled at the
    pace of the run's switch interval. It is also a fifth cheaper per row.
    """
    start = 0
    # The driver's own cursor, with the statement in its own placeholders: Django's
    # wrapper rewrites every placeholder of a statement on each execution (a regular
    # expression over thousands of them), a good part of storing a batch. Errors are
    # Django's, as through the wrapper.
    execute = sqlite3.Cursor.execute
    raw = cursor.cursor
    with connection.wrap_database_errors:
        for size in _SHAPES:
            while len(rows) - start >= size:
                chunk = rows[start:start + size]
                execute(raw, _sqlite_sql(size),
                        [value for row in chunk
                         for value in (run_id, row[0], row[1], row[2], row[3])])
                start += size


@functools.lru_cache(maxsize=len(_SHAPES))
def _sqlite_sql(rows: int) -> str:
    """The INSERT of ``rows`` rows in sqlite3's own ``?`` placeholders."""
    return _insert_sql(rows).replace("%s", "?")


def _copy(cursor: Any, run_id: str, rows: Sequence[Row]) -> None:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(name) for name in COLUMNS)
    # COPY's text format, written whole: one call, not a Python call per row (a worker
    # stores from a thread while its run holds the interpreter's lock).
    run = _copy_text(run_id)
    body = "".join([f"{run}\t{row[0]}\t{_copy_text(row[1])}\t{_copy_text(row[2])}\t"
                    f"{_copy_text(row[3])}\n" for row in rows])
    # Django's wrapper has no COPY: the psycopg cursor under it does. An integrity error
    # (a taken seq) surfaces as Django's, as from executemany.
    with connection.wrap_database_errors, cursor.cursor.copy(
            f"COPY {quote(TABLE)} ({columns}) FROM STDIN") as copy:
        copy.write(body)


def _copy_text(value: str) -> str:
    """``value`` as a field of COPY's text format: backslash, tab, newline and carriage
    return escaped (a compact JSON payload holds backslashes at most; each test is one
    scan in C)."""
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def read_texts(run_id: str, after: int, limit: int, upto: int | None = None, *,
               types: Collection[str] | None = None) -> list[tuple[int, str]]:
    """``(seq, JSON text)`` of run ``run_id``'s stored events with ``after < seq``
    (``<= upto`` when given; of the event ``types`` when given), in order, at most
    ``limit``."""
    quote = connection.ops.quote_name
    payload = quote("payload")
    bound = "" if upto is None else f" AND {quote('seq')} <= %s"
    kinds = sorted(types) if types is not None else []
    if types is not None:
        if not kinds:
            return []
        bound += f" AND {quote('type')} IN ({', '.join(['%s'] * len(kinds))})"
    sql = (f"SELECT {quote('seq')}, {payload} FROM {quote(TABLE)} WHERE "
           f"{quote('run_id')} = %s AND {quote('seq')} > %s{bound} "
           f"ORDER BY {quote('seq')} LIMIT %s")
    params: list[str | int] = [run_id, after, *([] if upto is None else [upto]), *kinds,
                               limit]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        # Both drivers answer (int, str) already: no per-row conversion (a run's export
        # or page load reads hundreds of thousands of rows).
        return cursor.fetchall()  # type: ignore[no-any-return]


__all__ = ["Row", "insert_events", "insert_rows", "read_texts"]
