"""Hostile input answers a 4xx in the error shape, never a 500, and stores nothing.

Every door that takes events or ids is tried with what an attacker (or a buggy client)
sends: an event whose ``type`` or envelope field has the wrong JSON type, ids outside the
one id definition (``runtime.events.ID_PATTERN``), numbers JSON has no room for
(``NaN``, ``Infinity``, thousands of digits, an ``Infinity`` spelled ``1e400``), integers
the database's columns cannot hold, and JSON bodies sent as another media type. The
events are the first turn of the golden HotelFlow session (run ``hotel-1``, 9 lines).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from picoflow_web.data import eventlog, exporting
from picoflow_web.models import EventRecord, Run
from tests.golden.goldens import BY_NAME
from tests.web.test_transfer_refusals import snapshot
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

NDJSON = "application/x-ndjson"
HOTEL = BY_NAME["hotel"].jsonl_path.read_bytes().splitlines()[:9]
DOORS = {"ingest": ("/api/ingest", ("ingest",)), "import": ("/api/import", None)}
"""Where events come in: path and the token's scopes (None: the default scopes)."""
USERS = itertools.count()


async def auth(scopes: tuple[str, ...] | None = None) -> dict[str, str]:
    """A new operator's token (a new user each time: a test may need several)."""
    return bearer(await atoken(await amake_user(f"user-{next(USERS)}"), scopes=scopes))


def edited(number: int, **changes: Any) -> list[bytes]:
    """The hotel lines with line ``number`` (1-based) changed."""
    lines = list(HOTEL)
    lines[number - 1] = json.dumps({**json.loads(lines[number - 1]), **changes}).encode()
    return lines


def every_line(**changes: Any) -> list[bytes]:
    return [json.dumps({**json.loads(line), **changes}).encode() for line in HOTEL]


def raw_field(number: int, name: str, raw: str) -> list[bytes]:
    """The hotel lines with line ``number``'s field ``name`` set to ``raw`` JSON text
    (numbers Python's own encoder would never write)."""
    lines = list(HOTEL)
    data = json.loads(lines[number - 1])
    data[name] = "\x00placeholder"
    text = json.dumps(data).replace(json.dumps("\x00placeholder"), raw)
    lines[number - 1] = text.encode()
    return lines


async def send(door: str, lines: list[bytes]) -> Any:
    path, scopes = DOORS[door]
    return await AsyncClient().post(path, data=b"\n".join(lines) + b"\n",
                                    content_type=NDJSON, headers=await auth(scopes))


def assert_refused(response: Any, status: int, error_code: str, line: int | None = None
                   ) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    reply: dict[str, Any] = response.json()
    assert reply["type"] == "error" and reply["error_code"] == error_code, reply
    if line is not None:
        assert reply["line"] == line and reply["message"].startswith(f"Line {line}: "), reply
    return reply


# -- an event's fields, checked by type before use ------------------------------------------

WRONG_TYPES: list[tuple[str, Callable[[], list[bytes]], str, int]] = [
    ("type a list", lambda: edited(3, type=["step.entered"]), "unknown_event_type", 3),
    ("type an object", lambda: edited(3, type={"step": "entered"}), "unknown_event_type", 3),
    ("type a number", lambda: edited(3, type=3), "unknown_event_type", 3),
    ("v true", lambda: edited(3, v=True), "schema_version", 3),
    ("run_id a number", lambda: edited(3, run_id=7), "invalid_event", 3),
    ("run_id a list", lambda: edited(3, run_id=["hotel-1"]), "invalid_event", 3),
    ("session_id an object", lambda: edited(3, session_id={"id": "s"}), "invalid_event", 3),
    ("seq a string", lambda: edited(3, seq="2"), "invalid_event", 3),
    ("seq true", lambda: edited(2, seq=True), "invalid_event", 2),
    ("seq a float", lambda: edited(3, seq=2.0), "invalid_event", 3),
    ("time a string", lambda: edited(3, time="1796152108.5"), "invalid_event", 3),
    ("offset a string", lambda: edited(3, offset="0.5"), "invalid_event", 3),
    ("path a list", lambda: edited(3, path=["a"]), "invalid_event", 3),
    ("revision a string", lambda: edited(4, revision="1"), "invalid_event", 4),
    ("success a string", lambda: edited(9, success="yes"), "invalid_event", 9),
    ("message a number", lambda: edited(1, message=5), "invalid_event", 1),
]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("what", "lines", "code", "line"), WRONG_TYPES,
                         ids=[case[0] for case in WRONG_TYPES])
async def test_a_field_of_the_wrong_json_type_is_refused_with_its_line(
        door: str, what: str, lines: Callable[[], list[bytes]], code: str, line: int
) -> None:
    before = await snapshot()
    assert_refused(await send(door, lines()), 400, code, line)
    assert await snapshot() == before


# -- ids: one definition, at every door -------------------------------------------------------

BAD_IDS = {
    "a space": "hotel 1", "a non-ASCII letter": "hôtel-1", "a slash": "hotel/1",
    "a quote": 'hotel"1', "a tab": "hotel\t1", "CR LF": "hotel\r\n1", "a colon": "hotel:1",
    "a leading dot": ".hotel", "65 characters": "h" * 65,
}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("bad", BAD_IDS.values(), ids=BAD_IDS.keys())
async def test_a_run_id_outside_the_definition_is_refused(door: str, bad: str) -> None:
    before = await snapshot()
    reply = assert_refused(await send(door, every_line(run_id=bad)), 400, "bad_run_id", 1)
    assert reply["code"] == "invalid_event"  # what clients read before error_code existed
    assert await snapshot() == before


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("bad", BAD_IDS.values(), ids=BAD_IDS.keys())
async def test_a_session_id_outside_the_definition_is_refused(door: str, bad: str) -> None:
    before = await snapshot()
    assert_refused(await send(door, every_line(session_id=bad)), 400, "bad_session_id", 1)
    assert await snapshot() == before


async def test_an_empty_run_id_is_refused_and_an_empty_session_id_is_none() -> None:
    assert_refused(await send("ingest", every_line(run_id="")), 400, "bad_run_id", 1)
    accepted = await send("ingest", every_line(session_id=""))
    assert accepted.status_code == 200, accepted.content


async def test_a_copy_of_a_file_gets_valid_ids_and_a_bad_id_is_refused_copy_or_not() -> None:
    headers = await auth()
    body = b"\n".join(HOTEL) + b"\n"
    copied = await AsyncClient().post("/api/import?copy=1", data=body, content_type=NDJSON,
                                      headers=headers)
    assert copied.status_code == 201, copied.content
    from runtime.events import ID_PATTERN

    for run in copied.json()["runs"]:
        assert ID_PATTERN.fullmatch(run["id"]) and ID_PATTERN.fullmatch(run["session_id"])
    bad = b"\n".join(every_line(run_id="hotel 1")) + b"\n"
    refused = await AsyncClient().post("/api/import?copy=1", data=bad, content_type=NDJSON,
                                       headers=headers)
    assert_refused(refused, 400, "bad_run_id", 1)


RUN_HEADERS = {"a space": "coord 1", "a slash": "coord/1", "a quote": 'coord"1',
               "a tab": "coord\t1", "a leading dash": "-coord", "65 characters": "c" * 65}


@pytest.mark.parametrize("bad", RUN_HEADERS.values(), ids=RUN_HEADERS.keys())
async def test_ai_run_refuses_a_run_id_header_outside_the_definition(bad: str) -> None:
    before = await snapshot()
    response = await AsyncClient().post(
        "/ai/run", data={"flowName": "HotelFlow", "message": "Hi"},
        content_type="application/json", headers={**await auth(), "PicoFlow-Run-Id": bad})
    assert_refused(response, 400, "bad_run_id")
    assert await snapshot() == before


SESSION_IDS = {"a space": "my session", "a non-ASCII letter": "séance", "a slash": "a/b",
               "a quote": 'a"b', "CR LF": "a\r\nb", "a colon": "a:b", "65 characters": "s" * 65}


@pytest.mark.parametrize("bad", SESSION_IDS.values(), ids=SESSION_IDS.keys())
@pytest.mark.parametrize(("path", "field"), [("/api/runs", "session_id"),
                                             ("/ai/run", "session")])
async def test_a_run_is_not_started_in_a_session_outside_the_definition(
        path: str, field: str, bad: str) -> None:
    before = await snapshot()
    flow = "flow" if path == "/api/runs" else "flowName"
    response = await AsyncClient().post(
        path, data={flow: "HotelFlow", "message": "Hi", field: bad},
        content_type="application/json", headers=await auth())
    # RunStart's own limit (the body's model) answers a session id too long first.
    long_body = path == "/api/runs" and len(bad) > 64
    assert_refused(response, 400, "wrong_type" if long_body else "bad_session_id")
    assert await snapshot() == before


async def test_ai_run_refuses_a_session_header_outside_the_definition() -> None:
    response = await AsyncClient().post(
        "/ai/run", data={"flowName": "HotelFlow", "message": "Hi"},
        content_type="application/json",
        headers={**await auth(), "Chat-Session-Id": "my session"})
    assert_refused(response, 400, "bad_session_id")


@pytest.mark.parametrize(("path", "body"), [
    ("/ai/run", {"flowName": "HotelFlow", "message": "Hi", "session": "s-good"}),
    ("/ai/end", {"session": "s-good"})])
async def test_a_bad_session_header_is_refused_even_when_the_body_names_a_session(
        path: str, body: dict[str, str]) -> None:
    before = await snapshot()
    response = await AsyncClient().post(
        path, data=body, content_type="application/json",
        headers={**await auth(), "Chat-Session-Id": "my session"})
    assert_refused(response, 400, "bad_session_id")
    assert await snapshot() == before


@pytest.mark.parametrize("path", ["/api/runs/{}", "/api/runs/{}/events", "/api/runs/{}/otlp",
                                  "/api/runs/{}/export", "/api/sessions/{}",
                                  "/api/sessions/{}/export"])
@pytest.mark.parametrize("bad", ["a b", "h\u00f4tel", 'a"b', "a\r\nb", "x" * 65])
async def test_an_id_outside_the_definition_in_a_path_is_unknown(path: str, bad: str) -> None:
    response = await AsyncClient().get(path.format(quote(bad, safe="")),
                                       headers=await auth())
    assert_refused(response, 404, "not_found")


# -- download names ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["export", "otlp"])
async def test_a_download_name_is_plain_ascii_with_the_id_in_rfc_6266_form(kind: str
                                                                           ) -> None:
    # A run stored before ids were checked (or written by another tool): its name must
    # not break the header, nor carry a quote, a line break or raw UTF-8 into it.
    headers = await auth()
    imported = await AsyncClient().post("/api/import", data=b"\n".join(HOTEL) + b"\n",
                                        content_type=NDJSON, headers=headers)
    assert imported.status_code == 201, imported.content
    odd = 'hotel "1";\r\nSet-Cookie: x=1'  # (the test client mangles non-ASCII paths)
    await sync_to_async(_clone_run)("hotel-1", odd)
    response = await AsyncClient().get(f"/api/runs/{quote(odd, safe='')}/{kind}",
                                       headers=headers)
    assert response.status_code == 200, response.content
    suffix = ".jsonl" if kind == "export" else ".otlp.json"
    plain, extended = response["Content-Disposition"].split("; filename*=")
    assert re.fullmatch(rf'attachment; filename="run-[A-Za-z0-9._-]+{re.escape(suffix)}"',
                        plain), plain
    assert extended == "UTF-8''" + quote(f"run-{odd}{suffix}", safe="")
    assert "Set-Cookie" not in response.headers


def test_a_non_ascii_id_is_named_in_utf_8_beside_its_plain_form() -> None:
    assert exporting.disposition("session", "h\u00f4tel 1") == (
        "attachment; filename=\"session-h_tel_1.jsonl\"; "
        "filename*=UTF-8''session-h%C3%B4tel%201.jsonl")
    assert exporting.disposition("run", "hotel-1", ".otlp.json") == (
        'attachment; filename="run-hotel-1.otlp.json"')


def _clone_run(old: str, new: str) -> None:
    """Run ``old`` and its events stored again under id ``new``, as no door takes it."""
    run = Run.objects.get(id=old)
    run.pk = new
    run.save(force_insert=True)
    texts = dict(eventlog.read_texts(old, -1, 1000))
    rows = EventRecord.objects.filter(run_id=old).order_by("seq").values_list(
        "seq", "type", "path")
    eventlog.insert_rows(new, [(seq, kind, path, texts[seq].replace(
        f'"run_id":"{old}"', f'"run_id":{json.dumps(new)}')) for seq, kind, path in rows])


# -- numbers JSON has no room for -------------------------------------------------------------

CONSTANTS = ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("constant", CONSTANTS)
@pytest.mark.parametrize(("path", "body"), [
    ("/api/runs", '{"flow": "HotelFlow", "message": "Hi", "config": {"x": %s}}'),
    ("/api/runs", '{"flow": %s}'),
    ("/ai/run", '{"flowName": "HotelFlow", "message": "Hi", "config": {"x": %s}}'),
    ("/api/ingest/heartbeat", '{"runs": [%s]}'),
])
async def test_nan_and_infinity_are_refused_in_every_json_body(path: str, body: str,
                                                               constant: str) -> None:
    before = await snapshot()
    scopes = ("ingest",) if "ingest" in path else None
    response = await AsyncClient().post(path, data=body % constant,
                                        content_type="application/json",
                                        headers=await auth(scopes))
    reply = assert_refused(response, 400, "malformed_json")
    assert constant in reply["message"]
    assert await snapshot() == before


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("constant", CONSTANTS)
async def test_nan_and_infinity_are_refused_in_events(door: str, constant: str) -> None:
    reply = assert_refused(await send(door, raw_field(3, "offset", constant)), 400,
                           "malformed_json", 3)
    assert constant in reply["message"]


HUGE = "7" * 5000


@pytest.mark.parametrize(("path", "body"), [
    ("/api/runs", '{"flow": "HotelFlow", "message": "Hi", "config": {"x": %s}}'),
    ("/api/runs", '{"flow": "HotelFlow", "message": "Hi", "config": {"x": -%s}}'),
    ("/api/runs", '{"flow": "HotelFlow", "message": "Hi", "config": {"x": 0.%s}}'),
])
async def test_a_number_of_thousands_of_digits_is_refused_in_the_products_words(
        path: str, body: str) -> None:
    response = await AsyncClient().post(path, data=body % HUGE,
                                        content_type="application/json",
                                        headers=await auth())
    reply = assert_refused(response, 400, "number_too_large")
    assert reply["message"].startswith("Body has a number too large (more than ")
    assert "4300" not in reply["message"] and "sys." not in reply["message"]


@pytest.mark.parametrize("door", DOORS)
async def test_an_event_number_of_thousands_of_digits_is_refused(door: str) -> None:
    reply = assert_refused(await send(door, raw_field(3, "seq", HUGE)), 400,
                           "number_too_large", 3)
    assert "4300" not in reply["message"] and "sys." not in reply["message"]


def after_a_loss(last_lost: int) -> list[bytes]:
    """Two events, a sink's report that it lost seqs 3 to ``last_lost``, then the event
    after them: a gap on purpose, so the next seq is as large as the report says."""
    third = json.loads(HOTEL[2])
    report = {**{key: third[key] for key in ("v", "run_id", "session_id", "time", "offset",
                                             "path")},
              "seq": 2, "type": "sink.overflowed", "sink": "dashboard", "first_seq": 3,
              "last_seq": last_lost, "dropped": 1}
    return [HOTEL[0], HOTEL[1], json.dumps(report).encode(),
            json.dumps({**third, "seq": last_lost + 1}).encode()]


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("lines", "line"), [
    (lambda: after_a_loss(2**31 - 1), 4),  # PostgreSQL's integer column: seq 2**31
    (lambda: after_a_loss(2**63 - 1), 3),  # SQLite's: the report's last_seq, then seq 2**63
    (lambda: raw_field(8, "revision", str(2**31)), 8),
    (lambda: raw_field(8, "revision", str(2**63)), 8),
], ids=["seq past 2**31", "seq past 2**63", "revision past 2**31", "revision past 2**63"])
async def test_an_integer_the_database_cannot_hold_is_refused(
        door: str, lines: Callable[[], list[bytes]], line: int) -> None:
    before = await snapshot()
    reply = assert_refused(await send(door, lines()), 400, "number_too_large", line)
    assert str(2**31 - 1) in reply["message"]
    assert await snapshot() == before


async def test_seqs_up_to_the_columns_limit_are_stored() -> None:
    ok = after_a_loss(2**31 - 2)
    response = await send("ingest", ok)
    assert response.status_code == 200, response.content
    assert response.json()["runs"]["hotel-1"]["last_seq"] == 2**31 - 1


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("raw", ["1e400", "-1e400"])
async def test_a_number_that_overflows_to_infinity_is_refused(door: str, raw: str) -> None:
    before = await snapshot()
    reply = assert_refused(await send(door, raw_field(1, "time", raw)), 400,
                           "number_too_large", 1)
    assert "too large" in reply["message"]
    assert await snapshot() == before


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("time", ["1e20", "-1e20", "-62135596801"])
async def test_a_time_that_is_no_date_is_refused(door: str, time: str) -> None:
    before = await snapshot()
    assert_refused(await send(door, raw_field(1, "time", time)), 400, "invalid_event", 1)
    assert await snapshot() == before


# -- JSON endpoints take JSON ---------------------------------------------------------------

JSON_POSTS = [("/api/runs", {"flow": "HotelFlow", "message": "Hi"}, None),
              ("/ai/run", {"flowName": "HotelFlow", "message": "Hi"}, None),
              ("/api/ingest/heartbeat", {"runs": ["nope"]}, ("ingest",))]


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded",
                                   "application/x-ndjson", "application/json; charset=latin-1",
                                   ""])
@pytest.mark.parametrize(("path", "body", "scopes"), JSON_POSTS,
                         ids=[case[0] for case in JSON_POSTS])
async def test_a_json_endpoint_refuses_another_media_type(
        path: str, body: dict[str, Any], scopes: tuple[str, ...] | None, media: str) -> None:
    before = await snapshot()
    response = await AsyncClient().post(path, data=json.dumps(body), content_type=media,
                                        headers=await auth(scopes))
    assert_refused(response, 415, "unsupported_media_type")
    assert await snapshot() == before


@pytest.mark.parametrize("media", ["application/json; charset=utf-8",
                                   "Application/JSON; charset=UTF-8"])
@pytest.mark.parametrize(("path", "body", "scopes"), JSON_POSTS,
                         ids=[case[0] for case in JSON_POSTS])
async def test_a_json_endpoint_takes_json_with_its_charset(
        path: str, body: dict[str, Any], scopes: tuple[str, ...] | None, media: str) -> None:
    response = await AsyncClient().post(path, data=json.dumps(body), content_type=media,
                                        headers=await auth(scopes))
    assert response.status_code in (200, 201), response.content


async def test_the_openapi_document_says_json_bodies_may_be_refused_as_415() -> None:
    document = (await AsyncClient().get("/api/openapi.json")).json()
    for path, method in [("/api/runs", "post"), ("/ai/run", "post"),
                         ("/api/ingest/heartbeat", "post"), ("/api/ingest", "post"),
                         ("/api/import", "post")]:
        assert "415" in document["paths"][path][method]["responses"], path
    from runtime.events import ID_PATTERN

    for param in document["paths"]["/api/runs/{run_id}"]["get"]["parameters"]:
        assert param["schema"]["pattern"] == f"^{ID_PATTERN.pattern}$"
