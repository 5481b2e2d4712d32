"""concurrent_steps(): batches of child flow requests over real HTTP to a local stand-in of
the app's /ai/run (tests/self_app.py). The real app behind Daphne with workers is tested
in tests/e2e."""

from __future__ import annotations

import socket
from typing import Any, ClassVar

import pytest

from runtime import Flow, FlowEngine, LogicStep, ModelSelection, Routable, Step
from runtime.concurrent import ChildReply
from runtime.errors import ConcurrentConfigError, ConcurrentDepthError
from runtime.events import MemorySink, parse_event
from tests.self_app import SelfApp, self_app

pytestmark = pytest.mark.anyio


class Coordinate(LogicStep):
    async def run_logic(self) -> Routable:
        return "not a coordinator"


class Survey(Flow):
    """Coordinates one child per item; records what on_response saw, in order."""

    items: ClassVar[list[int]] = list(range(6))
    seen: ClassVar[list[ChildReply]] = []
    options: ClassVar[dict[str, Any]] = {}

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Coordinate(self)]

    async def spawn_steps(self) -> str:
        seen = type(self).seen
        result = await self.concurrent_steps(
            type(self).items, batch_size=4,
            on_config=lambda item: {"question": f"q{item}"},
            on_response=lambda item, reply: seen.append(reply),
            **{"timeout": 5.0, "retries": 2, "backoff": 0.01, **type(self).options})
        return f"{len(result.fulfilled)} of {len(result.replies)} answered"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Survey.items = list(range(6))
    Survey.seen = []
    Survey.options = {}


async def _coordinate(app: SelfApp, **engine: Any) -> tuple[Any, list[Any]]:
    sink = MemorySink()
    flows = FlowEngine(flows=[Survey], self_url=engine.pop("url", app.url),
                       self_token=engine.pop("token", "pf_test"), ship_to_dashboard=False)
    reply = await flows.run("Survey", None, config={"_concurrent": True}, sinks=[sink])
    return reply, sink.events


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


async def test_batches_run_in_order_each_item_once_with_its_own_run_and_session() -> None:
    with self_app() as app:
        reply, events = await _coordinate(app)
    assert reply.success and reply.message == "6 of 6 answered"
    # One request per item, to /ai/run, with the token, the child flow and new sessions.
    assert sorted(r["item"] for r in app.requests) == list(range(6))
    assert {r["path"] for r in app.requests} == {"/ai/run"}
    assert {r["headers"]["Authorization"] for r in app.requests} == {"Bearer pf_test"}
    assert {r["body"]["flowName"] for r in app.requests} == {"Survey"}
    sessions = [r["body"]["session"] for r in app.requests]
    assert len(set(sessions)) == 6
    run_ids = [r["headers"]["PicoFlow-Run-Id"] for r in app.requests]
    assert len(set(run_ids)) == 6
    # The depth guard travels with the config; the coordinator's run id with the headers.
    assert {r["body"]["config"]["_concurrent_depth"] for r in app.requests} == {1}
    assert {r["body"]["config"]["question"] for r in app.requests} == {f"q{i}" for i in range(6)}
    coordinator = events[0].run_id
    assert {r["headers"]["PicoFlow-Coordinator-Run"] for r in app.requests} == {coordinator}
    # A child's ids follow from its coordinator, call and item: the same child, the same ids.
    assert set(run_ids) == {f"{coordinator}-c0-{i}" for i in range(6)}
    assert set(sessions) == {f"{coordinator}-c0-{i}-s" for i in range(6)}
    # Batches strictly in order: batch 1 starts after every child of batch 0 ended.
    kinds = [(e.type, getattr(e, "batch", None)) for e in events
             if e.type.startswith("concurrent.")]
    first_end = kinds.index(("concurrent.batch_finished", 0))
    assert kinds.index(("concurrent.batch_started", 1)) == first_end + 1
    assert [k for k in kinds[:first_end] if k[0] == "concurrent.child_finished"] == \
        [("concurrent.child_finished", 0)] * 4
    started = _of(events, "concurrent.batch_started")
    assert [e.items for e in started] == [[0, 1, 2, 3], [4, 5]]
    assert {e.batches for e in started} == {2}
    finished = _of(events, "concurrent.child_finished")
    assert sorted(e.item for e in finished) == list(range(6))
    assert {e.status for e in finished} == {"fulfilled"}
    # The events name the same child ids the requests carried.
    assert {e.child_run_id for e in finished} == set(run_ids)
    assert {e.child_session_id for e in finished} == set(sessions)
    assert [e.fulfilled for e in _of(events, "concurrent.batch_finished")] == [4, 2]
    # on_response saw every reply; the events validate against the schema.
    assert sorted(r.item for r in Survey.seen) == list(range(6))
    assert {r.message for r in Survey.seen} == {f"done {i}" for i in range(6)}
    for event in events:
        parse_event(event.model_dump_json())


async def test_failures_are_data_and_only_safe_ones_are_retried() -> None:
    Survey.options = {"timeout": 0.5}
    Survey.items = list(range(8))
    with self_app() as app:
        app.behaviour = {0: ["fail"], 1: ["slow"], 2: ["401"], 3: ["503", "503", "ok"],
                         4: ["500"], 5: ["junk"], 6: ["html"], 7: ["202"]}
        reply, events = await _coordinate(app)
    assert reply.success and reply.message == "2 of 8 answered"
    by_item = {r.item: r for r in Survey.seen}
    assert by_item[0].status == "failed" and by_item[0].error_code == "step_failed"
    assert by_item[0].message == "child 0 failed"
    assert by_item[1].status == "timed_out"
    assert by_item[2].status == "refused" and by_item[2].http_status == 401
    assert by_item[3].status == "fulfilled" and by_item[3].attempts == 3
    assert by_item[4].status == "error" and by_item[4].http_status == 500
    assert by_item[5].status == "malformed" and by_item[5].http_status == 200
    assert by_item[6].status == "fulfilled" and by_item[6].content_type == "text/html"
    assert by_item[6].message == "<p>report</p>"
    # The app still runs the child after its own wait: a timeout (the child runs on), not
    # a malformed reply, and never sent again.
    assert by_item[7].status == "timed_out" and by_item[7].http_status == 202
    # Sent once each, but for the 503s (the app did not start the child): never a child
    # that may have run (the timeout, the 500, the failure) twice.
    counts = {i: sum(1 for r in app.requests if r["item"] == i) for i in range(8)}
    assert counts == {0: 1, 1: 1, 2: 1, 3: 3, 4: 1, 5: 1, 6: 1, 7: 1}
    # A retry resends the same run id: the app can refuse a second run of it.
    assert len({r["headers"]["PicoFlow-Run-Id"] for r in app.requests if r["item"] == 3}) == 1
    finished = {e.item: e for e in _of(events, "concurrent.child_finished")}
    assert {i: e.status for i, e in finished.items()} == {i: r.status for i, r in by_item.items()}
    assert finished[2].error is not None and "401" in finished[2].error.message
    assert finished[0].error is not None and finished[0].error.code == "step_failed"
    assert [e.attempt for e in _of(events, "concurrent.child_started") if e.item == 3] == [1, 2, 3]
    assert [(e.fulfilled, e.failed) for e in _of(events, "concurrent.batch_finished")] == \
        [(1, 3), (1, 3)]


async def test_an_app_that_is_down_is_retried_then_reported_unreachable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    Survey.items = [0, 1]
    with self_app() as app:
        reply, events = await _coordinate(app, url=f"http://127.0.0.1:{port}")
    assert reply.success and reply.message == "0 of 2 answered"
    assert {r.status for r in Survey.seen} == {"unreachable"}
    assert {r.attempts for r in Survey.seen} == {3}
    assert len(_of(events, "concurrent.child_started")) == 6


async def test_an_on_config_that_raises_fails_its_item_only() -> None:
    class Picky(Survey):
        async def spawn_steps(self) -> str:
            def config(item: int) -> dict[str, Any]:
                if item == 1:
                    raise ValueError("no config for 1")
                return {}
            result = await self.concurrent_steps([0, 1, 2], batch_size=3, on_config=config)
            return ",".join(f"{r.item}:{r.status}" for r in result.replies)

    with self_app() as app:
        engine = FlowEngine(flows=[Picky], self_url=app.url, self_token="t",
                            ship_to_dashboard=False)
        reply = await engine.run("Picky", None, config={"_concurrent": 1})
    assert reply.message == "0:fulfilled,1:error,2:fulfilled"
    assert sorted(r["item"] for r in app.requests) == [0, 2]


async def test_without_self_url_or_token_nothing_is_sent_and_the_turn_says_why() -> None:
    with self_app() as app:
        for engine in (FlowEngine(flows=[Survey], self_token="t", ship_to_dashboard=False),
                       FlowEngine(flows=[Survey], self_url=app.url, ship_to_dashboard=False)):
            reply = await engine.run("Survey", None, config={"_concurrent": True})
            assert not reply.success and reply.error_code == ConcurrentConfigError.code
        assert app.requests == []


async def test_the_depth_guard_refuses_a_recursive_fan_out_before_sending() -> None:
    class Recursive(Survey):
        async def spawn_steps(self) -> str:
            await self.concurrent_steps([0], batch_size=1,
                                        on_config=lambda item: {"_concurrent": True})
            return "sent"

    with self_app() as app:
        engine = FlowEngine(flows=[Recursive], self_url=app.url, self_token="t",
                            ship_to_dashboard=False)
        # A coordinator one level down may not start another (default max_depth 2).
        reply = await engine.run("Recursive", None,
                                 config={"_concurrent": True, "_concurrent_depth": 1})
        assert not reply.success and reply.error_code == ConcurrentDepthError.code
        assert app.requests == []
        # At the top it may: its child carries depth 1.
        reply = await engine.run("Recursive", None, config={"_concurrent": True})
        assert reply.success and app.requests[0]["body"]["config"]["_concurrent_depth"] == 1


async def test_without_coordinator_mode_the_current_step_runs() -> None:
    with self_app() as app:
        engine = FlowEngine(flows=[Survey], self_url=app.url, self_token="t",
                            ship_to_dashboard=False)
        reply = await engine.run("Survey", None)
    assert reply.message == "not a coordinator" and app.requests == []


async def test_bad_arguments_are_refused_clearly() -> None:
    for options in ({"batch_size": 0}, {"timeout": -1}, {"retries": -2}):
        class Bad(Survey):
            async def spawn_steps(self, options: dict[str, Any] = options) -> str:
                args: dict[str, Any] = {"batch_size": 2, **options}
                await self.concurrent_steps([1], on_config=lambda item: {}, **args)
                return "sent"

        engine = FlowEngine(flows=[Bad], self_url="http://127.0.0.1:9", self_token="t",
                            ship_to_dashboard=False)
        reply = await engine.run("Bad", None, config={"_concurrent": True})
        assert not reply.success and reply.error_code == ConcurrentConfigError.code, options



async def test_a_token_per_item_goes_with_that_items_request_only() -> None:
    Survey.items = [0, 1, 2]
    Survey.options = {"token": lambda item: "pf_other" if item == 1 else None}
    with self_app() as app:
        await _coordinate(app)
    tokens = {r["item"]: r["headers"]["Authorization"] for r in app.requests}
    assert tokens == {0: "Bearer pf_test", 1: "Bearer pf_other", 2: "Bearer pf_test"}


async def test_a_redirect_is_not_followed_and_a_dropped_answer_is_not_resent() -> None:
    Survey.items = [0, 1]
    with self_app() as app:
        app.behaviour = {0: ["307"], 1: ["drop"]}
        reply, _ = await _coordinate(app)
    assert reply.success and reply.message == "0 of 2 answered"
    by_item = {r.item: r for r in Survey.seen}
    # The request, and its token, never go where a reply points.
    assert by_item[0].status == "malformed" and by_item[0].http_status == 307
    # The child may have run: an error, never a second request.
    assert by_item[1].status == "error" and "may have run" in (by_item[1].error or "")
    assert [(r["item"], r["path"]) for r in sorted(app.requests, key=lambda r: r["item"])] == \
        [(0, "/ai/run"), (1, "/ai/run")]


async def test_the_children_go_through_the_proxy_the_environment_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    Survey.items = [0, 1]
    with self_app() as app:
        # The stand-in plays the proxy: the app's name need not resolve here.
        monkeypatch.setenv("HTTP_PROXY", app.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        reply, _ = await _coordinate(app, url="http://app.invalid")
    assert reply.message == "2 of 2 answered"
    assert {r["path"] for r in app.requests} == {"http://app.invalid/ai/run"}
