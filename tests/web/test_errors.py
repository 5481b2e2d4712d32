"""Every error of the JSON API is the JSON error shape with a stable ``error_code``: never
HTML, never a 500, never internals, and nothing half-stored. Regression tests for inputs
that once answered 500 (a lone surrogate, deep nesting), an HTML 400 (a large body) and a
400 for a session conflict; and the websockets' answer to junk and to a bad ``after``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.db.models import F
from django.test import AsyncClient, override_settings

from picoflow_web.asgi import application
from picoflow_web.errors import ApiError, Conflict, Forbidden, InputError, NotFound
from picoflow_web.execute import services
from picoflow_web.execute.engine import get_engine
from picoflow_web.http.jsonbody import MAX_DEPTH
from picoflow_web.live.consumers import CLOSE_BAD_REQUEST
from picoflow_web.models import EventRecord, Run, StoredSession
from runtime import Flow, LogicStep, ModelSelection, Step
from tests.webhelpers import amake_user, asession_cookie, atoken, bearer, wait_run_done, ws_headers

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]

PATHS = ("/ai/run", "/api/runs")


async def auth() -> dict[str, str]:
    return bearer(await atoken(await amake_user()))


async def post_raw(path: str, body: bytes, headers: dict[str, str],
                   content_type: str = "application/json") -> Any:
    return await AsyncClient().post(path, data=body, content_type=content_type,
                                    headers=headers)


def assert_shape(response: Any, status: int, error_code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json", response.content[:200]
    body: dict[str, Any] = response.json()
    assert body["type"] == "error" and body["error_code"] == error_code, body
    assert "Traceback" not in body["message"] and "Error" not in body["message"], body
    return body


async def nothing_stored() -> None:
    assert await Run.objects.acount() == 0
    assert await StoredSession.objects.acount() == 0
    assert await EventRecord.objects.acount() == 0


def start(path: str, **fields: Any) -> dict[str, Any]:
    return {"flowName": "HotelFlow", "flow": "HotelFlow", **fields}


@pytest.mark.parametrize("path", PATHS)
async def test_a_lone_surrogate_escape_is_a_400(path: str) -> None:
    headers = await auth()
    body = b'{"flowName": "HotelFlow", "flow": "HotelFlow", "message": "a\\ud800b"}'
    assert_shape(await post_raw(path, body, headers), 400, "invalid_text")
    in_config = b'{"flowName": "HotelFlow", "flow": "HotelFlow", "config": {"\\udfff": 1}}'
    assert_shape(await post_raw(path, in_config, headers), 400, "invalid_text")
    await nothing_stored()


def nested_lists(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_dicts(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("config", [nested_lists(30_000), nested_dicts(5_000),
                                    nested_dicts(900), nested_dicts(MAX_DEPTH)],
                         ids=["lists-30000", "dicts-5000", "dicts-900", "just-too-deep"])
async def test_a_deeply_nested_config_is_a_400_and_stores_nothing(path: str,
                                                                   config: bytes) -> None:
    body = b'{"flowName": "HotelFlow", "flow": "HotelFlow", "message": "Hi", "config": ' + \
        config + b"}"
    assert_shape(await post_raw(path, body, await auth()), 400, "too_deep")
    await nothing_stored()


async def test_nesting_up_to_the_limit_is_not_refused_for_depth() -> None:
    config = nested_dicts(MAX_DEPTH - 2)  # body (1) + config (1) + the rest: the limit
    body = b'{"flowName": "HotelFlow", "message": "Hi", "config": ' + config + b"}"
    response = await post_raw("/ai/run", body, await auth())
    assert response.json().get("error_code") != "too_deep", response.content


@pytest.mark.parametrize("path", PATHS)
async def test_a_large_body_is_a_413_in_the_error_shape(path: str) -> None:
    headers = await auth()
    huge = json.dumps(start(path, message="x" * 2_600_000)).encode()
    assert_shape(await post_raw(path, huge, headers), 413, "body_too_large")
    over = json.dumps(start(path, message="x" * 70_000)).encode()
    assert_shape(await post_raw(path, over, headers), 413, "body_too_large")
    await nothing_stored()


async def test_a_large_form_body_from_a_browser_is_a_413_not_html() -> None:
    cookie = await asession_cookie(await amake_user())
    name, value = cookie.split("=", 1)
    client = AsyncClient()
    client.cookies[name] = value
    response = await client.post("/api/runs", data=b"a=" + b"x" * 2_600_000,
                                 content_type="application/x-www-form-urlencoded")
    assert_shape(response, 413, "body_too_large")


@pytest.mark.parametrize("body", [b"[]", b'"x"', b"42"])
async def test_a_body_of_the_wrong_type_is_a_400(body: bytes) -> None:
    assert_shape(await post_raw("/api/runs", body, await auth()), 400, "wrong_type")


async def test_unknown_api_paths_and_methods_answer_json() -> None:
    headers = await auth()
    assert_shape(await AsyncClient().get("/api/nope", headers=headers), 404, "not_found")
    assert_shape(await AsyncClient().get("/ai/nope"), 404, "not_found")
    response = await AsyncClient().delete("/api/runs", headers=headers)
    assert_shape(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET, POST"


class Interloper(LogicStep):
    """Saves over the session behind the turn's back, as another process would."""

    async def run_logic(self) -> str:
        await StoredSession.objects.filter(id=self.flow.session_id).aupdate(
            revision=F("revision") + 1)
        return "saved by someone else meanwhile"


class InterloperFlow(Flow):
    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Interloper(self)]


async def test_a_session_conflict_is_a_409() -> None:
    get_engine().register_flow(InterloperFlow)
    headers = await auth()
    response = await post_raw("/ai/run", json.dumps(
        {"flowName": InterloperFlow.id, "message": "go"}).encode(), headers)
    assert response.status_code == 409, response.content
    body = response.json()
    assert (body["success"], body["error_code"]) == (False, "session_conflict")


# -- websockets -------------------------------------------------------------------------


async def socket_to(path: str) -> WebsocketCommunicator:
    cookie = await asession_cookie(await amake_user("socket-user"))
    communicator = WebsocketCommunicator(application, path, headers=ws_headers(cookie))
    assert (await communicator.connect(timeout=5))[0]
    return communicator


async def finished_run() -> Run:
    run = await services.run_start(flow="HotelFlow", message="Hi")
    return await wait_run_done(run.id)


async def drain_until_close(communicator: WebsocketCommunicator) -> tuple[list[Any], Any]:
    received = []
    while True:
        output = await communicator.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            return received, output.get("code")
        received.append(json.loads(output["text"]))


@pytest.mark.parametrize("junk", [{"text": "not json {"}, {"text": '{"a": 1}'},
                                  {"bytes": b"\x00\xff"}], ids=["text", "json", "binary"])
@pytest.mark.parametrize("kind", ["run", "runs"])
async def test_junk_closes_the_socket_with_a_warning_not_a_traceback(
        junk: dict[str, Any], kind: str, caplog: pytest.LogCaptureFixture) -> None:
    path = f"/ws/runs/{(await finished_run()).id}/" if kind == "run" else "/ws/runs/"
    communicator = await socket_to(path)
    if kind == "run":
        await drain_initial(communicator)
    with caplog.at_level(logging.WARNING):
        await communicator.send_input({"type": "websocket.receive", **junk})
        received, code = await drain_until_close(communicator)
    assert code == CLOSE_BAD_REQUEST
    assert received[-1]["type"] == "error" and received[-1]["error_code"] == "junk"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("sent" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


async def drain_initial(communicator: WebsocketCommunicator) -> None:
    """The run message and the replay of a finished run."""
    assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
    while True:
        message = await communicator.receive_json_from(timeout=5)
        if any(e["type"] == "turn.finished" for e in message["events"]):
            return


@pytest.mark.parametrize("after", ["abc", "1.5", "", "99999999999999"])
async def test_a_bad_after_is_refused_as_the_http_api_refuses_it(after: str) -> None:
    run = await finished_run()
    headers = await auth()
    http = await AsyncClient().get(f"/api/runs/{run.id}/events?after={after}", headers=headers)
    http_body = assert_shape(http, 400, "bad_parameter")
    communicator = await socket_to(f"/ws/runs/{run.id}/?after={after}")
    received, code = await drain_until_close(communicator)
    assert code == CLOSE_BAD_REQUEST
    assert [m["type"] for m in received] == ["error"], "nothing replayed"
    assert received[0]["error_code"] == http_body["error_code"]
    assert received[0]["message"] == http_body["message"]


# -- JSON under the API's paths, whoever answers and in DEBUG too ------------------------

DEBUG_MODES = pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])


@DEBUG_MODES
@pytest.mark.parametrize("path", ["/api/no-such-endpoint", "/ai/nope", "/v1/nope",
                                  "/api/runs/x/nope"])
async def test_an_unknown_api_path_is_a_json_404(path: str, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        assert_shape(await AsyncClient().get(path), 404, "not_found")


@DEBUG_MODES
async def test_a_method_a_plain_view_refuses_is_a_json_405(debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = await AsyncClient().post("/api/openapi.json")
    assert_shape(response, 405, "method_not_allowed")
    assert response["Allow"] == "GET, HEAD"


@DEBUG_MODES
async def test_a_query_with_more_fields_than_django_parses_is_a_json_400(debug: bool) -> None:
    # With the debug page on, its report lists the query again, which raised once more and
    # escaped as Daphne's HTML 500 (found by the fuzzer on the control long-poll).
    user = await amake_user("poller")
    query = "&".join(f"run=r{i}" for i in range(1200))
    with override_settings(DEBUG=debug):
        response = await AsyncClient().get(f"/api/ingest/control?{query}", headers=bearer(
            await atoken(user, scopes=("ingest",))))
    assert_shape(response, 400, "bad_request")


@DEBUG_MODES
async def test_a_failing_api_view_is_a_json_500(debug: bool) -> None:
    with override_settings(DEBUG=debug, ROOT_URLCONF="tests.web.faulty_urls"):
        response = await AsyncClient(raise_request_exception=False).get("/api/fail")
    body = assert_shape(response, 500, "internal_error")
    assert "cannot reach" not in body["message"]


@DEBUG_MODES
async def test_a_project_without_the_apps_handlers_still_answers_json(debug: bool) -> None:
    """A project of one's own (its URLconf includes the app, Django's pages answer its
    errors): the middleware the install guide lists makes them JSON under the API's paths."""
    with override_settings(DEBUG=debug, ROOT_URLCONF="tests.web.project_urls"):
        assert_shape(await AsyncClient().get("/api/no-such-endpoint"), 404, "not_found")
        page = await AsyncClient().get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


# -- the one root: every refusal a client is told is an ApiError, answered in one shape ------


async def test_every_refusal_a_client_is_told_derives_from_the_one_root() -> None:
    from picoflow_web.data import access, otlp_export, runs_query
    from picoflow_web.record.ingest import IngestError

    for refusal in (services.InputError, services.RunEnded, access.Forbidden, access.NotFound,
                    runs_query.BadQuery, otlp_export.OtlpUnavailable, IngestError):
        assert issubclass(refusal, ApiError), refusal


def _shape(message: str, code: str, error_code: str | None = None,
           **details: Any) -> dict[str, Any]:
    return {"type": "error", "message": message, "code": code,
            "error_code": error_code or code, **details}


@pytest.mark.parametrize(("raised", "status", "body"), [
    (NotFound("No run 'r'."), 404, _shape("No run 'r'.", "not_found")),
    (InputError("q is too long.", error_code="bad_parameter"), 400,
     _shape("q is too long.", "bad_request", "bad_parameter")),
    (InputError("Bad config.", code="invalid_config", fields={"n": "must be an integer"}), 400,
     _shape("Bad config.", "invalid_config", fields={"n": "must be an integer"})),
    (Conflict("Run r has ended.", code="run_ended"), 409, _shape("Run r has ended.", "run_ended")),
    (Forbidden("Not yours.", code="role"), 403, _shape("Not yours.", "role")),
])
async def test_an_api_error_is_answered_in_the_one_shape(raised: ApiError, status: int,
                                                         body: dict[str, Any]) -> None:
    from picoflow_web.http.error_answers import answer_error

    response = answer_error(raised)
    assert (response.status_code, json.loads(response.content)) == (status, body)


async def test_ingest_refusals_keep_their_details_in_the_shape() -> None:
    from picoflow_web.http.error_answers import answer_error
    from picoflow_web.record.ingest import IngestError

    refused = IngestError("Line 2: a gap.", code="seq_gap", status=409, line=2, expected=1)
    response = answer_error(refused)
    assert (response.status_code, json.loads(response.content)) == (
        409, _shape("Line 2: a gap.", "seq_gap", line=2, expected=1))


async def test_an_error_any_api_view_raises_is_answered_by_the_one_clause(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from picoflow_web.data import otlp_export
    from picoflow_web.models import Project

    await Project.objects.aget_or_create(name="default")
    await Run.objects.acreate(id="otlp-run", flow="hotel", project_id="default",
                              status=Run.Status.FINISHED)

    def unavailable(run_id: str) -> str:
        raise otlp_export.OtlpUnavailable("OTLP export needs the otlp extra.")

    monkeypatch.setattr(otlp_export, "run_to_json", unavailable)
    response = await AsyncClient().get("/api/runs/otlp-run/otlp", headers=await auth())
    body = assert_shape(response, 501, "otlp_unavailable")
    assert body == _shape("OTLP export needs the otlp extra.", "otlp_unavailable")
