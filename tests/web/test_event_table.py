"""The event log's table: built for appending in bulk, and migrated without losing an event."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from picoflow_web import eventlog

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
