"""schemathesis hooks for ``tests/web/test_fuzz.py`` (``hooks`` in ``schemathesis.toml``).

The NDJSON bodies are sent as the text they are generated as, and the refusals below are
not counted against "schema-valid data is accepted" (``positive_data_acceptance``), each
recognised by its operation, the request that earns it and the answer together, so the
same answer to any other request still fails the run. Four are rules the
document cannot state:

* ``GET /api/runs`` with ``since`` after ``until``: a rule between two parameters (OpenAPI
  describes each parameter alone); the server refuses it with 400 ``bad_parameter``.
* ``POST /ai/end`` naming no session: the session is the body's ``session`` *or* the
  ``Chat-Session-Id`` header, and "one of a header and a body field" is no OpenAPI rule.
* a run started in one project on a session of another (400 ``project_mismatch``): a
  rule between a body field and what is stored.
* text holding a NUL character: refused (400 ``invalid_text``) in every JSON body, since
  PostgreSQL cannot store it; a rule for every string of every body, which the document
  says once in its description rather than as a pattern on each.

Three more are not about the request's shape alone:

* a ``config`` the flow's config model refuses (400 ``invalid_config``) when a run is
  started: each flow's pydantic model checks it, with its conversions, and ``GET
  /api/flows`` gives each flow's schema; the document's ``config`` is any object.
* ``POST /ai/run``'s failed turns: a turn the flow itself fails (say a session of another
  flow) answers PicoFlow's reply with ``success: false`` and 400, as the contract says;
  whether a turn succeeds is the flow's doing.
* ``POST /api/ingest`` and ``POST /api/import`` refusing their body: it is lines of events,
  so to the document any text is valid, while whether the server can take it depends on
  the events, their order, runs and sessions, which no JSON Schema of one string can say.
  ``tests/web/test_fuzz_ndjson.py`` generates valid and broken lines for these two instead.

One answer to "schema-violating data" is not counted either, because the request as sent
violates nothing:

* ``GET /api/ingest/control`` with a negative example whose query, once written into the
  URL, is a valid one: a ``run`` of JSON null goes out as the text ``null`` and a ``wait``
  of ``[0.0]`` as ``0.0``, which are a run id and a number like any other. A query string
  has no types; the server answers what it received.

(``schemathesis run --checks all`` lets a check named on its command line win over a
per-operation ``enabled = false`` in the config file, so these live here, as hooks.)
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import schemathesis
from django.utils.dateparse import parse_datetime
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.openapi.checks import RejectedPositiveData

from picoflow_web.http.bodies import MAX_CONTROL_RUNS
from runtime.events import ID_PATTERN

# The ingest and import bodies are lines of text (events): generated as text, sent as is.
schemathesis.serializer.alias("application/x-ndjson", "text/plain")


def _answer(response: Any) -> dict[str, Any]:
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_code(response: Any) -> str | None:
    return _answer(response).get("error_code") if response.status_code == 400 else None


def _range_reversed(case: Any, response: Any) -> bool:
    if (case.operation.method.upper(), case.operation.path) != ("GET", "/api/runs"):
        return False
    query = case.query or {}
    try:
        since, until = parse_datetime(query.get("since") or ""), parse_datetime(
            query.get("until") or "")
    except (TypeError, ValueError):
        return False
    if since is None or until is None:
        return False
    if (since.tzinfo is None) != (until.tzinfo is None):
        return False  # the server reads a zoneless one as UTC; not worth guessing here
    return since > until and _error_code(response) == "bad_parameter"


def _names_no_session(case: Any, response: Any) -> bool:
    if (case.operation.method.upper(), case.operation.path) != ("POST", "/ai/end"):
        return False
    body = case.body if isinstance(case.body, dict) else {}
    headers = {name.lower(): value for name, value in (case.headers or {}).items()}
    return (not body.get("session") and not headers.get("chat-session-id")
            and _error_code(response) == "bad_request")


def _failed_turn(case: Any, response: Any) -> bool:
    if (case.operation.method.upper(), case.operation.path) != ("POST", "/ai/run"):
        return False
    answer = _answer(response)
    return response.status_code in (400, 409) and answer.get("success") is False \
        and "completed" in answer


def _holds_nul(case: Any, response: Any) -> bool:
    sent = response.request.body or b""
    if isinstance(sent, str):
        sent = sent.encode("utf-8", "surrogatepass")
    return (b"\\u0000" in sent or b"\x00" in sent) and _error_code(response) == "invalid_text"


def _other_projects_session(case: Any, response: Any) -> bool:
    started = (case.operation.method.upper(), case.operation.path) in (
        ("POST", "/api/runs"), ("POST", "/ai/run"))
    body = case.body if isinstance(case.body, dict) else {}
    headers = {name.lower(): value for name, value in (case.headers or {}).items()}
    named = body.get("session_id") or body.get("session") or headers.get("chat-session-id")
    return started and bool(named) and bool(body.get("project")) \
        and _error_code(response) == "project_mismatch"


def _config_refused(case: Any, response: Any) -> bool:
    started = (case.operation.method.upper(), case.operation.path) in (
        ("POST", "/api/runs"), ("POST", "/ai/run"))
    body = case.body if isinstance(case.body, dict) else {}
    return started and isinstance(body.get("config"), dict) \
        and _error_code(response) == "invalid_config"


def _event_lines_refused(case: Any, response: Any) -> bool:
    return (case.operation.method.upper() == "POST"
            and case.operation.path in ("/api/ingest", "/api/import")
            and 400 <= response.status_code < 500 and _answer(response).get("type") == "error")


BY_DESIGN = (_range_reversed, _names_no_session, _other_projects_session, _holds_nul,
             _config_refused, _failed_turn, _event_lines_refused)
"""Refusals of schema-valid requests the document cannot state (see the module doc)."""


def _control_query_valid_as_sent(case: Any, response: Any) -> bool:
    """A control long-poll whose query, as the URL carries it, is a valid one."""
    if (case.method.upper(), case.path) != ("GET", "/api/ingest/control"):
        return False
    query = parse_qs(urlsplit(response.request.url).query, keep_blank_values=True)
    if set(query) - {"run", "wait"}:
        return False
    runs, waits = query.get("run", []), query.get("wait", [])
    if not 1 <= len(runs) <= MAX_CONTROL_RUNS or len(waits) > 1:
        return False
    if not all(ID_PATTERN.fullmatch(run) for run in runs):
        return False
    try:
        wait = float(waits[0]) if waits else 25.0
    except ValueError:
        return False
    return 0 <= wait <= 60


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a refusal listed in :data:`BY_DESIGN` and a negative example
    that is none once sent (:func:`_control_query_valid_as_sent`)."""
    if isinstance(failure, AcceptedNegativeData):
        return not _control_query_valid_as_sent(case, response)
    if not isinstance(failure, RejectedPositiveData):
        return True
    return not any(rule(case, response) for rule in BY_DESIGN)
