"""The event log's table: built for appending in bulk, and migrated without losing an event."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from picoflow_web.data import eventlog

pytestmark = pytest.mark.django_db(transaction=True)


def _indexes_on_run() -> list[tuple[list[str], bool]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, eventlog.TABLE)
    return [(info["columns"], bool(info["unique"])) for info in constraints.values()
            if (info["index"] or info["unique"]) and "run_id" in info["columns"]]


def test_one_index_serves_lookups_by_run() -> None:
    # The unique (run, seq) index leads with the run: a second index on the run alone
    # only slowed every insert.
    assert _indexes_on_run() == [(["run_id", "seq"], True)]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's table definition")
def test_sqlite_appends_without_a_counter_table_or_a_second_json_parse() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE name = %s", [eventlog.TABLE])
        (sql,) = cursor.fetchone()
    assert "PRIMARY KEY" in sql
    assert "AUTOINCREMENT" not in sql and "JSON_VALID" not in sql


def test_migrating_the_event_log_keeps_every_event_and_its_order() -> None:
    before = ("picoflow_web", "0005_run_rejected_count_duration")
    after = ("picoflow_web", "0006_event_log_for_bulk_appends")
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("picoflow_web")
    executor.migrate([before])
    try:
        old = executor.loader.project_state([before]).apps
        old.get_model("picoflow_web", "Run").objects.create(id="old-run", flow="HotelFlow")
        payloads = [{"v": 1, "run_id": "old-run", "seq": seq, "type": "step.entered",
                     "text": "\u00e9\U0001f600 <b>"} for seq in range(5)]
        old.get_model("picoflow_web", "EventRecord").objects.bulk_create(
            old.get_model("picoflow_web", "EventRecord")(
                run_id="old-run", seq=p["seq"], type=p["type"], path="", payload=p)
            for p in reversed(payloads))
        MigrationExecutor(connection).migrate([after])
        stored = eventlog.read_texts("old-run", -1, 100)
        assert [seq for seq, _ in stored] == [0, 1, 2, 3, 4]
        assert [json.loads(text) for _, text in stored] == payloads
        assert _indexes_on_run() == [(["run_id", "seq"], True)]
    finally:
        MigrationExecutor(connection).migrate(latest)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's statements")
@pytest.mark.parametrize("count", [1, 3, 511, 512, 1000])
def test_a_batch_is_stored_in_a_few_statements_of_many_rows(count: int) -> None:
    # One statement per row would release and retake Python's lock per row; with the
    # event loop busy, each retaking waited out a switch interval (measured: 200 rows
    # in 1.6 s instead of 22 ms).
    from picoflow_web.models import Run

    Run.objects.create(id="bulk", flow="HotelFlow")
    rows = [(seq, "step.entered", f"0.{seq}", json.dumps({"seq": seq, "text": "é\U0001f600"}))
            for seq in range(count)]
    statements: list[str] = []
    connection.ensure_connection()
    connection.connection.set_trace_callback(statements.append)
    try:
        eventlog.insert_rows("bulk", rows)
    finally:
        connection.connection.set_trace_callback(None)
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT")]
    assert len(inserts) <= bin(count).count("1")  # 512, 256, ... 1: one each at most
    stored = eventlog.read_texts("bulk", -1, 2 * count)
    assert [(seq, text) for seq, text in stored] == [(seq, text) for seq, _, _, text in rows]


def test_a_taken_seq_is_djangos_integrity_error_and_keeps_nothing_of_the_batch() -> None:
    # The recorder and ingest tell a seq stored meanwhile by Django's IntegrityError; the
    # rows go in through the driver's own cursor, so the error must still be Django's.
    from django.db import IntegrityError, transaction

    from picoflow_web.models import Run

    Run.objects.create(id="taken", flow="HotelFlow")
    eventlog.insert_rows("taken", [(0, "step.entered", "", '{"seq":0}')])
    with pytest.raises(IntegrityError), transaction.atomic():
        eventlog.insert_rows("taken", [(seq, "step.entered", "", "{}") for seq in (1, 2, 0)])
    assert eventlog.read_texts("taken", -1, 10) == [(0, '{"seq":0}')]


def test_a_reader_may_ask_for_some_event_types_only() -> None:
    from picoflow_web.models import Run

    Run.objects.create(id="typed", flow="HotelFlow")
    kinds = ["turn.started", "state.replaced", "model.started", "state.replaced",
             "turn.finished"]
    rows = [(seq, kind, "", json.dumps({"seq": seq, "type": kind}))
            for seq, kind in enumerate(kinds)]
    eventlog.insert_rows("typed", rows)
    wanted = {"turn.started", "model.started", "turn.finished"}
    assert [seq for seq, _ in eventlog.read_texts("typed", -1, 100, types=wanted)] == [0, 2, 4]
    assert [seq for seq, _ in eventlog.read_texts("typed", 0, 1, types=wanted)] == [2]
    assert eventlog.read_texts("typed", -1, 100, types=()) == []
    assert len(eventlog.read_texts("typed", -1, 100)) == 5
