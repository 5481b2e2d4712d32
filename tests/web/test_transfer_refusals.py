"""Bad files and bad requests are refused by ``POST /api/import`` and ``manage.py
import_events``, with the line and a stable code, and store nothing.

The file under test is two real turns of the golden HotelFlow session (runs ``hotel-1``,
lines 1-9, and ``hotel-2``, lines 10-15), broken in the second run, so a refusal that
stored the good first run would show. Another run is stored beforehand, so "nothing
changed" is checked against a database that is not empty.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import AsyncClient

from picoflow_web.models import EventRecord, Run, StoredSession
from picoflow_web.record import importing, ingest
from tests.golden.goldens import BY_NAME
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

NDJSON = "application/x-ndjson"
HOTEL = BY_NAME["hotel"].jsonl_path.read_bytes().splitlines()[:15]
Lines = list[bytes]


async def snapshot() -> tuple[Any, ...]:
    """Runs, events and sessions, with what an import could change about them."""
    runs = [r async for r in Run.objects.order_by("id").values_list("id", "status",
                                                                    "event_count")]
    sessions = [s async for s in StoredSession.objects.order_by("id").values_list(
        "id", "revision")]
    return runs, await EventRecord.objects.acount(), sessions


@pytest.fixture
async def auth() -> dict[str, str]:
    """An operator's token, with another run already stored."""
    headers = bearer(await atoken(await amake_user()))
    other = BY_NAME["turn_failure"].jsonl_path.read_bytes()
    assert (await post(other, headers)).status_code == 201
    return headers


async def post(body: bytes, auth: dict[str, str], query: str = "",
               content_type: str = NDJSON) -> Any:
    return await AsyncClient().post(f"/api/import{query}", data=body,
                                    content_type=content_type, headers=auth)


def event(line: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(line)
    return data


def edited(number: int, **changes: Any) -> Callable[[Lines], Lines]:
    """Line ``number`` (1-based) with fields changed."""
    def edit(lines: Lines) -> Lines:
        lines[number - 1] = json.dumps({**event(lines[number - 1]), **changes}).encode()
        return lines
    return edit


def without(number: int) -> Callable[[Lines], Lines]:
    return lambda lines: lines[:number - 1] + lines[number:]


def replaced(number: int, old: bytes, new: bytes) -> Callable[[Lines], Lines]:
    def edit(lines: Lines) -> Lines:
        assert old in lines[number - 1]
        lines[number - 1] = lines[number - 1].replace(old, new, 1)
        return lines
    return edit


def repeated(number: int) -> Callable[[Lines], Lines]:
    return lambda lines: lines[:number] + lines[number - 1:]


def after_the_end(lines: Lines) -> Lines:
    return [*lines, json.dumps({**event(lines[12]), "seq": 6}).encode()]


BAD_FILES = [
    # (what, edit, status, error_code, line)
    ("truncated line", lambda lines: [*lines[:11], lines[11][:200], *lines[12:]], 400,
     "malformed_json", 12),
    ("wrong schema version", edited(11, v=2), 400, "schema_version", 11),
    ("gap in seq", without(13), 400, "seq_gap", 13),
    ("seq not from 0", without(10), 400, "seq_start", 10),
    ("repeated seq", repeated(12), 400, "seq_repeated", 13),
    ("unknown event type", edited(14, type="turn.exploded"), 400, "unknown_event_type", 14),
    ("invalid event", edited(14, seq="four"), 400, "invalid_event", 14),
    ("not an object", lambda lines: [*lines[:14], b"[1, 2]", *lines[15:]], 400,
     "malformed_event", 15),
    ("non-UTF-8 bytes", replaced(15, b'"hotel-2"', b'"hotel-\xff2"'), 400, "not_utf8", 15),
    ("lone surrogate", replaced(15, b'"hotel-2"', b'"hotel-\\ud8002"'), 400, "invalid_text",
     15),
    ("event after the end", after_the_end, 400, "after_end", 16),
]


@pytest.mark.parametrize(("what", "edit", "status", "code", "line"), BAD_FILES,
                         ids=[case[0] for case in BAD_FILES])
async def test_a_bad_file_is_refused_with_its_line_and_stores_nothing(
    auth: dict[str, str], what: str, edit: Callable[[Lines], Lines], status: int,
    code: str, line: int,
) -> None:
    body = b"\n".join(edit(list(HOTEL))) + b"\n"
    before = await snapshot()
    response = await post(body, auth)
    assert response.status_code == status, response.content
    reply = response.json()
    assert (reply["type"], reply["error_code"], reply["line"]) == ("error", code, line)
    assert reply["message"].startswith(f"Line {line}: ")
    assert await snapshot() == before


async def test_a_line_over_the_limit_is_refused(auth: dict[str, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    longest = max(range(len(HOTEL)), key=lambda i: len(HOTEL[i]))
    monkeypatch.setattr(ingest, "MAX_LINE_BYTES", len(HOTEL[longest]) - 1)
    first = next(i for i, raw in enumerate(HOTEL) if len(raw) > ingest.MAX_LINE_BYTES)
    before = await snapshot()
    response = await post(b"\n".join(HOTEL), auth)
    assert response.status_code == 413
    assert (response.json()["error_code"], response.json()["line"]) == ("line_too_large",
                                                                        first + 1)
    assert await snapshot() == before


async def test_a_file_over_the_total_limit_or_empty_is_refused(
        auth: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    before = await snapshot()
    empty = await post(b"\n\n", auth)
    assert (empty.status_code, empty.json()["error_code"]) == (400, "empty_file")
    assert (await post(b"\n".join(HOTEL), auth, content_type="application/json")
            ).status_code == 415
    monkeypatch.setattr(importing, "MAX_IMPORT_BYTES", 1000)
    large = await post(b"\n".join(HOTEL), auth)
    assert (large.status_code, large.json()["error_code"]) == (413, "body_too_large")
    assert await snapshot() == before


async def test_an_existing_run_is_refused_unless_imported_as_a_copy(
        auth: dict[str, str]) -> None:
    body = b"\n".join(HOTEL)
    assert (await post(body, auth)).status_code == 201
    before = await snapshot()
    again = await post(body, auth)
    assert again.status_code == 409
    assert (again.json()["error_code"], again.json()["line"], again.json()["run_id"]) == (
        "run_exists", 1, "hotel-1")
    assert "copy" in again.json()["message"]
    renamed = body.replace(b'"run_id":"hotel-', b'"run_id":"other-')
    taken = await post(renamed, auth)  # new run ids, but the session is taken
    assert (taken.status_code, taken.json()["error_code"]) == (409, "session_exists")
    assert await snapshot() == before

    copied = await post(body, auth, "?copy=1")
    assert copied.status_code == 201, copied.content
    reply = copied.json()
    assert reply["copied"] is True
    runs = reply["runs"]
    assert [r["original_id"] for r in runs] == ["hotel-1", "hotel-2"]
    new_ids = [r["id"] for r in runs]
    assert not set(new_ids) & {"hotel-1", "hotel-2"} and len(set(new_ids)) == 2
    session = runs[0]["session_id"]
    assert {r["session_id"] for r in runs} == {session} and session != "golden-hotel"
    assert runs[1]["origin"]["label"] == "imported as a copy of hotel-2"
    for new_id, original in zip(new_ids, ("hotel-1", "hotel-2"), strict=True):
        stored = [p async for p in EventRecord.objects.filter(run_id=new_id)
                  .order_by("seq").values_list("payload", flat=True)]
        sent = [event(line) for line in HOTEL if event(line)["run_id"] == original]
        # Only the envelope's ids were rewritten, consistently.
        assert stored == [{**e, "run_id": new_id, "session_id": session} for e in sent]
    assert await StoredSession.objects.filter(id=session).aexists()


async def test_the_command_refuses_a_bad_file_with_the_same_message(
        auth: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(without(13)(list(HOTEL))))
    api = (await post(path.read_bytes(), auth)).json()
    before = await snapshot()
    with pytest.raises(CommandError) as refused:
        await sync_to_async(call_command)("import_events", str(path))
    assert str(refused.value) == f"{api['message']} [seq_gap]"
    assert await snapshot() == before
    path.write_bytes(b"\n".join(HOTEL))
    await sync_to_async(call_command)("import_events", str(path), "--project", "default")
    with pytest.raises(CommandError, match=r"Line 1: run hotel-1 exists already"):
        await sync_to_async(call_command)("import_events", str(path))
    await sync_to_async(call_command)("import_events", str(path), "--copy")
    assert await Run.objects.filter(origin__copy_of="hotel-2").acount() == 1
    with pytest.raises(CommandError, match="No project 'nowhere'"):
        await sync_to_async(call_command)("import_events", str(path), "--project", "nowhere")
