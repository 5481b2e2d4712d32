"""Our own fuzzer for the NDJSON doors, ``POST /api/ingest`` and ``POST /api/import``,
against a live Daphne (``tests/livedaphne.py``): hypothesis builds runs of events from the
runtime's own event schema (the JSON Schema generated from ``runtime/events/schema.py``),
then breaks one line of them in one of the ways a sender gets wrong or an attacker tries
(a ``type``, ``seq`` or ``run_id`` of another JSON type, ``NaN``/``Infinity``, huge numbers,
lone surrogates, deep nesting, bad UTF-8, an unknown or reserved type, a field too many or
too few, a gap in the sequence, another media type).

Whatever it sends, the answer is never a 5xx, every refusal is a 4xx in the one error
shape (``{"type": "error", "message", "code", "error_code"}``), and a refused request
stores nothing: the runs it names keep their event counts (a new one stays unknown).
A request of valid runs is stored whole.
"""

from __future__ import annotations

import http.client
import json
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.events import EVENT_TYPES, SCHEMA_VERSION
from runtime.events.schema import json_schema
from tests.livedaphne import LiveDaphne, SharedServer

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("PICOFLOW_FUZZ_EXAMPLES", "100"))
"""Requests per property (a few seconds each against a local server); more with
``PICOFLOW_FUZZ_EXAMPLES`` for a longer hunt."""

FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))

SCHEMA = json_schema()
DEFS: dict[str, Any] = SCHEMA["$defs"]
ENDINGS = ("turn.finished", "turn.failed", "turn.cancelled")
SENT_TYPES = sorted(set(EVENT_TYPES) - {"turn.started", "run.interrupted", *ENDINGS})
"""What a run's middle may hold (``run.interrupted`` is the dashboard's own record)."""


# -- a live server and a small client -----------------------------------------------------


class Api:
    """Bytes in, (status, JSON or None) out, as a client of the live server sees them."""

    def __init__(self, live: LiveDaphne, token: str) -> None:
        self.live, self.token = live, token

    def request(self, method: str, path: str, body: bytes | None = None,
                content_type: str | None = None) -> tuple[int, Any]:
        connection = http.client.HTTPConnection(self.live.host, self.live.port, timeout=60)
        headers = {"Authorization": f"Bearer {self.token}"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, None

    def event_count(self, run_id: str) -> int | None:
        """The run's stored events (None: no such run)."""
        status, body = self.request("GET", f"/api/runs/{run_id}")
        if status == 404:
            return None
        assert status == 200, (status, body)
        return int(body["run"]["event_count"])


@pytest.fixture(scope="module")
def api(shared_daphne: SharedServer) -> Api:
    # The shared server declares no run silent while the session lasts.
    return Api(shared_daphne.server, shared_daphne.token)


# -- events from the event schema ----------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
"""Text any store takes (a NUL or a lone surrogate is a refusal: see BREAKS)."""
JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6)


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid for ``schema``: the keywords pydantic's JSON Schema of the events uses
    (``$ref``, ``const``, ``enum``, ``anyOf``/``oneOf``, the JSON types with their bounds,
    objects with required and optional properties, ``additionalProperties``)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: from_schema(DEFS[name]))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return st.one_of([from_schema(option) for option in options])
    kind = schema.get("type")
    if kind == "string":
        return TEXT
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1 - 10**6) + 1)
        return st.integers(low, low + 10**6)
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1e6))
        return st.floats(low, 1e6, exclude_min="exclusiveMinimum" in schema,
                         allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})), max_size=3)
    if kind == "object" or "properties" in schema:
        return _object(schema)
    return JSON_VALUES


def _object(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    fixed = st.fixed_dictionaries(
        {name: from_schema(sub) for name, sub in properties.items() if name in required},
        optional={name: from_schema(sub) for name, sub in properties.items()
                  if name not in required})
    extra = schema.get("additionalProperties", not properties)
    if extra is False:
        return fixed
    values = JSON_VALUES if extra is True else from_schema(extra)
    more = st.dictionaries(TEXT.filter(lambda key: key not in properties), values,
                           max_size=3)
    return st.tuples(fixed, more).map(lambda parts: {**parts[1], **parts[0]})


def event_of(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid event of type ``kind`` (its envelope is set by :func:`run_of`)."""
    return from_schema(DEFS[EVENT_TYPES[kind].__name__]).map(
        lambda event: {**event, "type": kind})


IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


def fresh_id(drawn: str) -> str:
    """A valid id of its own for each example (the server keeps what earlier ones stored)."""
    return f"{drawn}-{uuid.uuid4().hex[:16]}"


@st.composite
def run_of(draw: st.DrawFn, *, ending: bool | None = None) -> list[dict[str, Any]]:
    """A run as a sender ships it: ``turn.started`` (seq 0), some events of any type,
    maybe an ending; the envelope (ids, seq, times) consistent throughout."""
    run_id = fresh_id(draw(IDS))
    session_id = draw(st.just("") | IDS.map(fresh_id))
    kinds = ["turn.started", *draw(st.lists(st.sampled_from(SENT_TYPES), max_size=6))]
    if ending if ending is not None else draw(st.booleans()):
        kinds.append(draw(st.sampled_from(ENDINGS)))
    start = draw(st.floats(1.6e9, 2e9))
    events = []
    for seq, kind in enumerate(kinds):
        event = draw(event_of(kind))
        event.update(v=SCHEMA_VERSION, run_id=run_id, session_id=session_id, seq=seq,
                     time=start + seq, offset=float(seq), type=kind)
        events.append(event)
    return events


def interleaved(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The runs' events in one request, interleaved as concurrent senders do."""
    ordered = [event for run in runs for event in run]
    ordered.sort(key=lambda event: event["seq"])  # stable: each run keeps its order
    return ordered


def lines(events: list[dict[str, Any]]) -> list[bytes]:
    """One JSON line per event, as UTF-8 text and as ASCII with escapes by turns."""
    return [json.dumps(event, ensure_ascii=i % 2 == 0).encode() for i, event in
            enumerate(events)]


def broken_at(events: list[dict[str, Any]], breaking: tuple[str, Break], data: st.DataObject
              ) -> bytes:
    """The events as a body with one line (drawn) broken by ``breaking``."""
    sent = lines(events)
    at = data.draw(st.integers(0, len(sent) - 1), label="broken line")
    sent[at] = breaking[1](events[at])
    return b"\n".join(sent)


def still_valid(name: str, events: list[dict[str, Any]]) -> bool:
    """Whether a break may have left the request valid: a jump in ``seq`` over events a
    ``sink.overflowed`` of the same request says were lost is no gap."""
    return name.startswith("seq +") and any(e["type"] == "sink.overflowed" for e in events)


# -- ways to break a line -------------------------------------------------------------------

Break = Callable[[dict[str, Any]], bytes]


def _field(name: str, value: Any) -> Break:
    return lambda event: json.dumps({**event, name: value}).encode()


def _literal(name: str, text: str) -> Break:
    # NaN, Infinity and numbers past what json.dumps writes: spliced in as text.
    def broken(event: dict[str, Any]) -> bytes:
        return json.dumps({**event, name: "@@"}).encode().replace(b'"@@"', text.encode())
    return broken


def _nested(depth: int) -> Break:
    def broken(event: dict[str, Any]) -> bytes:
        return json.dumps({**event, "path": "@@"}).encode().replace(
            b'"@@"', b"[" * depth + b"]" * depth)
    return broken


def _in_text(raw: bytes) -> Break:
    def broken(event: dict[str, Any]) -> bytes:
        return json.dumps({**event, "path": "@@"}).encode().replace(b"@@", raw)
    return broken


WRONG_TYPES = [["turn.started"], {"type": "turn.started"}, 7, 7.5, True, None]

BREAKS: st.SearchStrategy[tuple[str, Break]] = st.one_of(
    st.sampled_from(WRONG_TYPES).map(lambda v: (f"type={v!r}", _field("type", v))),
    st.sampled_from(["0", 0.5, True, None, [0], {"n": 0}, -1]).map(
        lambda v: (f"seq={v!r}", _field("seq", v))),
    st.sampled_from([7, ["r"], {"id": "r"}, None, True, "", "a b", "é", "a/b", "a\"b",
                     "a\tb", "a\r\nb", "x" * 65, ".hidden"]).map(
        lambda v: (f"run_id={v!r}", _field("run_id", v))),
    st.sampled_from([7, "a b", "x" * 65]).map(
        lambda v: (f"session_id={v!r}", _field("session_id", v))),
    st.tuples(st.sampled_from(["time", "offset", "seq"]),
              st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])).map(
        lambda nv: (f"{nv[0]}={nv[1]}", _literal(*nv))),
    st.tuples(st.sampled_from(["seq", "time", "v"]), st.integers(19, 6000)).map(
        lambda nd: (f"{nd[0]}=10**{nd[1]}", _literal(nd[0], "1" + "0" * nd[1]))),
    st.sampled_from(["\\ud800", "\\udfff", "a\\ud83d", "\\u0000"]).map(
        lambda s: (f"path={s}", _literal("path", f'"{s}"'))),
    st.integers(33, 100_000).map(lambda d: (f"nested {d}", _nested(d))),
    st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]).map(
        lambda raw: (f"bytes {raw!r}", _in_text(raw))),
    st.sampled_from([b"[1, 2]", b'"text"', b"42", b"null", b"{", b"{}}", b"\x00",
                     b"\xef\xbb\xbf{}"]).map(
        lambda raw: (f"line {raw!r}", lambda event: raw)),
    st.sampled_from(["no.such_type", "Turn.Started", "run.interrupted", ""]).map(
        lambda v: (f"type={v!r}", _field("type", v))),
    st.sampled_from([0, 2, "1", 1.0]).map(lambda v: (f"v={v!r}", _field("v", v))),
    st.just(("extra field", lambda event: json.dumps({**event, "surplus": 1}).encode())),
    st.sampled_from(["run_id", "seq", "time", "type", "session_id"]).map(
        lambda name: (f"without {name}", lambda event: json.dumps(
            {k: v for k, v in event.items() if k != name}).encode())),
    st.integers(2, 2**31 + 5).map(lambda gap: (f"seq +{gap}", lambda event: json.dumps(
        {**event, "seq": event["seq"] + gap}).encode())),
)


def assert_refusal(status: int, body: Any, what: str) -> None:
    assert 400 <= status < 500, (what, status, body)
    assert isinstance(body, dict) and body.get("type") == "error", (what, status, body)
    for name in ("message", "code", "error_code"):
        assert isinstance(body.get(name), str) and body[name], (what, name, body)


# -- ingest --------------------------------------------------------------------------------


@given(runs=st.lists(run_of(), min_size=1, max_size=3))
@settings(FUZZ, deadline=None)
def test_valid_runs_are_stored_whole(api: Api, runs: list[list[dict[str, Any]]]) -> None:
    body = b"\n".join(lines(interleaved(runs))) + b"\n"
    status, reply = api.request("POST", "/api/ingest", body, "application/x-ndjson")
    assert status == 200, (status, reply)
    for run in runs:
        run_id = run[0]["run_id"]
        assert reply["runs"][run_id]["last_seq"] == len(run) - 1
        assert api.event_count(run_id) == len(run)


@pytest.fixture(scope="module")
def going(api: Api) -> dict[str, Any]:
    """A remote run that is going on: each example may continue it."""
    start = {"v": SCHEMA_VERSION, "run_id": f"going-{uuid.uuid4().hex[:12]}",
             "session_id": "", "seq": 0, "time": 1.8e9, "offset": 0.0, "path": "",
             "type": "turn.started", "flow": "Remote", "message": "hi"}
    status, reply = api.request("POST", "/api/ingest", json.dumps(start).encode(),
                                "application/x-ndjson")
    assert status == 200, reply
    return start


@given(runs=st.lists(run_of(), max_size=2), more=st.lists(
    st.sampled_from(["step.entered", "state.replaced", "cursor.moved"]).flatmap(event_of),
    min_size=1, max_size=3), breaking=BREAKS, data=st.data())
@settings(FUZZ, deadline=None)
def test_a_request_with_one_broken_line_is_refused_whole(
        api: Api, going: dict[str, Any], runs: list[list[dict[str, Any]]],
        more: list[dict[str, Any]], breaking: tuple[str, Break], data: st.DataObject) -> None:
    # Valid lines for new runs and for a run going on, one of them broken.
    stored = api.event_count(going["run_id"])
    assert stored is not None
    continued = [{**event, "v": SCHEMA_VERSION, "run_id": going["run_id"], "session_id": "",
                  "seq": stored + i, "time": going["time"] + stored + i,
                  "offset": float(stored + i)}
                 for i, event in enumerate(more)]
    events = interleaved(runs) + continued
    status, reply = api.request("POST", "/api/ingest", broken_at(events, breaking, data),
                                "application/x-ndjson")
    name = breaking[0]
    if status == 200 and still_valid(name, events):
        return
    assert_refusal(status, reply, name)
    assert api.event_count(going["run_id"]) == stored, name
    for run in runs:
        assert api.event_count(run[0]["run_id"]) is None, name


MEDIA_TYPES = [None, "text/plain", "application/json", "application/x-www-form-urlencoded",
               "multipart/form-data; boundary=x", "application/ndjson", "application/jsonl",
               "application/x-ndjson-x", "text/x-ndjson"]


@given(runs=st.lists(run_of(), min_size=1, max_size=2), media=st.sampled_from(MEDIA_TYPES),
       path=st.sampled_from(["/api/ingest", "/api/import"]))
@settings(FUZZ, deadline=None)
def test_another_media_type_is_refused_with_415(api: Api, runs: list[list[dict[str, Any]]],
                                               media: str | None, path: str) -> None:
    body = b"\n".join(lines(interleaved(runs)))
    if media is not None and media.startswith("multipart/"):
        # A well-formed upload: Daphne's HTTP layer (Twisted) answers a malformed multipart
        # body itself, with a bare 400, before the application sees the request.
        body = (b'--x\r\nContent-Disposition: form-data; name="file"; filename="runs.jsonl"'
                b"\r\nContent-Type: application/x-ndjson\r\n\r\n" + body + b"\r\n--x--\r\n")
    status, reply = api.request("POST", path, body, media)
    assert status == 415, (media, status, reply)
    assert_refusal(status, reply, media or "no Content-Type")
    assert reply["error_code"] == "unsupported_media_type"
    for run in runs:
        assert api.event_count(run[0]["run_id"]) is None


# -- import --------------------------------------------------------------------------------


@given(runs=st.lists(run_of(ending=True), min_size=1, max_size=3))
@settings(FUZZ, deadline=None)
def test_an_export_of_whole_runs_is_imported(api: Api, runs: list[list[dict[str, Any]]]
                                             ) -> None:
    body = b"\n".join(lines(interleaved(runs))) + b"\n"
    status, reply = api.request("POST", "/api/import", body, "application/x-ndjson")
    assert status == 201, (status, reply)
    assert [run["id"] for run in reply["runs"]] == [run[0]["run_id"] for run in runs]
    for run in runs:
        assert api.event_count(run[0]["run_id"]) == len(run)


@given(runs=st.lists(run_of(ending=True), min_size=1, max_size=3), breaking=BREAKS,
       data=st.data())
@settings(FUZZ, deadline=None)
def test_an_export_with_one_broken_line_stores_nothing(
        api: Api, runs: list[list[dict[str, Any]]], breaking: tuple[str, Break],
        data: st.DataObject) -> None:
    events = interleaved(runs)
    status, reply = api.request("POST", "/api/import", broken_at(events, breaking, data),
                                "application/x-ndjson")
    name = breaking[0]
    if status == 201 and still_valid(name, events):
        return
    assert_refusal(status, reply, name)
    for run in runs:
        assert api.event_count(run[0]["run_id"]) is None, name


def whole_run(name: str, message: str = "hi") -> list[dict[str, Any]]:
    """A run of two events: started and finished."""
    envelope = {"v": SCHEMA_VERSION, "run_id": fresh_id(name), "session_id": "",
                "time": 1.8e9, "offset": 0.0, "path": ""}
    return [{**envelope, "seq": 0, "type": "turn.started", "flow": "Remote",
             "message": message},
            {**envelope, "seq": 1, "type": "turn.finished", "success": True,
             "completed": True, "message": "bye", "content_type": "text/plain"}]


@pytest.mark.parametrize("path", ["/api/ingest", "/api/import"])
def test_an_over_long_line_is_refused_whole(api: Api, path: str) -> None:
    from picoflow_web.record.ingest import MAX_LINE_BYTES

    first, long = whole_run("short"), whole_run("long", "x" * MAX_LINE_BYTES)
    status, reply = api.request("POST", path, b"\n".join(lines([*first, *long])),
                                "application/x-ndjson")
    assert status == 413, (status, reply)
    assert_refusal(status, reply, "over-long line")
    assert reply["error_code"] == "line_too_large"
    assert api.event_count(first[0]["run_id"]) is None
