"""The run and runs-list websockets through the real ASGI application (Origin check, session
auth, routing) with ``channels.testing.WebsocketCommunicator``.

The central property: whatever moment a client connects or reconnects (``?after=<last
seq>``), the events it receives are exactly seq ``0..n-1`` of the run, with no gap and no
duplicate, equal to what the run stored.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import override_settings

from picoflow_web.asgi import application
from picoflow_web.data import selectors
from picoflow_web.data.eventlog import read_texts
from picoflow_web.execute import services
from picoflow_web.execute.engine import get_engine
from picoflow_web.live import relay, relay_sender
from picoflow_web.live.consumers import (
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
    RunConsumer,
    RunsConsumer,
)
from picoflow_web.live.groups import RUNS_GROUP, events_message, run_group
from picoflow_web.models import EventRecord, Run
from picoflow_web.record.recorder import RunRecorder
from runtime import Flow, LogicStep, ModelSelection, Step
from runtime.events import EventBus, StepEntered
from tests.webhelpers import (
    TERMINAL_EVENTS,
    amake_user,
    asession_cookie,
    assert_gap_free,
    events_of,
    receive_run_messages,
    seqs_of,
    stored_count,
    wait_run_done,
    wait_until,
    ws_headers,
)

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

LIVE_LATENCY = 0.03
"""Time unit of live runs: TimingFlow then takes about 0.4 s and stores ~10 batches."""


TICKS = 40
TICK_SECONDS = 0.008


class Ticker(LogicStep):
    """Saves its state every few milliseconds: a steady stream of small batches."""

    async def run_logic(self) -> str:
        for tick in range(TICKS):
            self.save_state({"tick": tick})
            await anyio.sleep(TICK_SECONDS)
        return f"{TICKS} ticks"


class TickerFlow(Flow):
    """A test flow whose events keep coming for about 0.3 s, evenly spread."""

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="none", name="none")

    def define_steps(self) -> list[Step]:
        return [Ticker(self)]


@pytest.fixture
def ticker(demo_latency: Callable[[float], None]) -> str:
    """Registers :class:`TickerFlow` in this test's engine; returns its name."""
    get_engine().register_flow(TickerFlow)
    return TickerFlow.id


@pytest.fixture
async def cookie() -> str:
    return await asession_cookie(await amake_user())


@pytest.fixture
def live(demo_latency: Callable[[float], None]) -> None:
    demo_latency(LIVE_LATENCY)


def socket(path: str, cookie: str | None, **headers: Any) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=ws_headers(cookie, **headers))


async def connect(path: str, cookie: str) -> WebsocketCommunicator:
    communicator = socket(path, cookie)
    connected, code = await communicator.connect(timeout=5)
    assert connected, f"{path} refused with {code}"
    return communicator


async def stored_payloads(run_id: str) -> list[dict[str, Any]]:
    return [p async for p in EventRecord.objects.filter(run_id=run_id).order_by("seq")
            .values_list("payload", flat=True)]


async def finished_run(flow: str = "ResearchFlow", message: str = "research tides") -> Run:
    run, _ = await services.run_execute(flow=flow, message=message)
    return run


async def start_live_run(flow: str = "TimingFlow") -> Run:
    """A run started as the dashboard starts it (queued), once a worker took it; it is
    still running."""
    run = await services.run_start(flow=flow, message="go")
    assert run.status == Run.Status.QUEUED

    async def taken() -> bool:
        return await Run.objects.filter(id=run.id, status=Run.Status.RUNNING).aexists()

    await wait_until(taken, what=f"a worker to take run {run.id}")
    return await Run.objects.aget(id=run.id)


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/ws/runs/", "/ws/runs/some-run/"])
async def test_anonymous_socket_is_closed_with_4401(path: str) -> None:
    # Accepted, then closed with the code: a close before accept would reach the browser
    # as a handshake failure (1006), never as 4401.
    communicator = socket(path, None)
    assert await communicator.connect(timeout=5) == (True, None)
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close", "code": CLOSE_UNAUTHENTICATED}


async def test_unknown_run_is_closed_with_4404(cookie: str) -> None:
    communicator = socket("/ws/runs/no-such-run/", cookie)
    assert await communicator.connect(timeout=5) == (True, None)
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close", "code": CLOSE_NOT_FOUND}


@pytest.mark.parametrize("origin", [None, "http://evil.example", "null", "http://[::1"])
@pytest.mark.parametrize("path", ["/ws/runs/", "/ws/runs/{run}/"])
async def test_socket_without_or_with_foreign_origin_is_refused(
    cookie: str, origin: str | None, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    run = await Run.objects.acreate(id="r1", flow="HotelFlow")
    communicator = socket(path.format(run=run.id), cookie, origin=origin)
    # Closed with its code, as every refusal (a handshake refused would reach a browser as
    # 1006), and nothing else sent.
    assert await communicator.connect(timeout=5) == (True, None)
    assert await communicator.receive_output(timeout=5) == {
        "type": "websocket.close", "code": CLOSE_FORBIDDEN}
    assert "is not an allowed host" in caplog.text and "Traceback" not in caplog.text
    # The same socket with our own Origin is accepted: only the Origin differed.
    accepted = await connect(path.format(run=run.id), cookie)
    await accepted.disconnect()


# -- replay ---------------------------------------------------------------------------------


async def test_finished_run_is_replayed_in_full(cookie: str, demo_latency: Any) -> None:
    run = await finished_run()
    stored = await stored_payloads(run.id)
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["type"] == "run"
    assert hello["run"]["id"] == run.id and hello["run"]["status"] == "finished"
    assert hello["run"]["event_count"] == len(stored)
    events = events_of(await receive_run_messages(communicator))
    assert events == stored
    assert_gap_free(seqs_of(events), len(stored))
    assert await communicator.receive_nothing(timeout=0.1)
    await communicator.disconnect()


async def test_a_replay_sends_the_events_as_stored_without_re_encoding(
        cookie: str, demo_latency: Any) -> None:
    # The stored text goes out as it is: the server does not parse and re-encode a replay.
    run = await finished_run()
    texts = [text for _, text in await selectors.run_event_texts_after(run.id)]
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    await communicator.receive_json_from(timeout=5)
    sent = ""
    while sent.count('"seq":') < len(texts):
        sent += await communicator.receive_from(timeout=5)
    await communicator.disconnect()
    assert sent.startswith('{"type":"events","events":[' + texts[0] + ",")
    assert all(text in sent for text in texts)


async def test_after_replays_only_later_events(cookie: str, demo_latency: Any) -> None:
    run = await finished_run()
    stored = await stored_payloads(run.id)
    last = len(stored) - 1
    for after in (-1, 0, 10, last - 1):
        communicator = await connect(f"/ws/runs/{run.id}/?after={after}", cookie)
        assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
        events = events_of(await receive_run_messages(communicator))
        assert events == stored[after + 1:], f"after={after}"
        await communicator.disconnect()
    for after in (last, last + 100):
        communicator = await connect(f"/ws/runs/{run.id}/?after={after}", cookie)
        assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
        assert await communicator.receive_nothing(timeout=0.1), f"after={after}"
        await communicator.disconnect()


# -- live -----------------------------------------------------------------------------------


async def test_live_run_streams_its_events(cookie: str, live: None) -> None:
    run = await start_live_run()
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["run"]["status"] == "running"
    messages = await receive_run_messages(communicator)
    await wait_run_done(run.id)
    events = events_of(messages)
    assert events == await stored_payloads(run.id)
    assert_gap_free(seqs_of(events))
    # Streamed batch by batch as the run went, not in one replay at the end.
    assert len(messages) >= 4, [len(m["events"]) for m in messages]
    await communicator.disconnect()


async def test_live_batches_reach_the_socket_as_the_text_they_were_stored_as(
        cookie: str, live: None) -> None:
    # Serialised once: the recorder's text is stored, crosses the channel layer as text
    # and is joined into the frame as it is (a re-encoding would change its spacing).
    run = await start_live_run()
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    await communicator.receive_json_from(timeout=5)
    frames: list[str] = []
    while not any('"type":"turn.finished"' in frame for frame in frames):
        frames.append(await communicator.receive_from(timeout=10))
    await communicator.disconnect()
    texts = [text for _, text in await selectors.run_event_texts_after(run.id)]
    sent = "".join(frames)
    assert len(frames) >= 4 and all(text in sent for text in texts)


async def test_resume_after_dropped_connections_is_gap_free_and_duplicate_free(
    cookie: str, live: None
) -> None:
    run = await start_live_run()
    received: list[dict[str, Any]] = []
    status_on_reconnect: list[str] = []
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    while True:
        hello = await communicator.receive_json_from(timeout=5)
        assert hello["type"] == "run"
        messages = await receive_run_messages(communicator, max_events=8)
        received.extend(events_of(messages))
        if received[-1]["type"] in TERMINAL_EVENTS:
            break
        # Drop the connection mid-run; events go on being stored meanwhile.
        await communicator.disconnect()
        before = await stored_count(run.id)
        await wait_until(lambda before=before: _grew_or_ended(run.id, before),
                         what="events while disconnected")
        communicator = await connect(f"/ws/runs/{run.id}/?after={received[-1]['seq']}",
                                     cookie)
        status_on_reconnect.append(
            (await Run.objects.aget(id=run.id)).status)
    await communicator.disconnect()
    await wait_run_done(run.id)
    assert len(status_on_reconnect) >= 2, "the run ended before two drops"
    # At least the first reconnection happened mid-run: its tail came live.
    assert status_on_reconnect[0] == "running", status_on_reconnect
    stored = await stored_payloads(run.id)
    assert_gap_free(seqs_of(received), len(stored))
    assert received == stored


async def _grew(run_id: str, before: int) -> bool:
    return await stored_count(run_id) > before


async def _grew_or_ended(run_id: str, before: int) -> bool:
    if await _grew(run_id, before):
        return True
    return await Run.objects.filter(id=run_id).exclude(status=Run.Status.RUNNING).aexists()


async def test_connecting_during_the_hand_over_is_gap_free_and_duplicate_free(
    cookie: str, ticker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forces the races of the replay-to-live hand-over on one connection.

    The consumer joins the run's group, then reads stored events until a read comes back
    empty. The patched read (1) before the first read waits until a batch is stored, and
    so broadcast, *after* the join: that batch is both replayed and queued live; (2) after
    the first read waits for a batch that read did not see; (3) after the first empty
    read waits for one more batch: only the live path can deliver that one. The client
    must still get every event exactly once.
    """
    real_read = selectors.run_event_texts_after
    reads: list[tuple[int, int]] = []

    async def racing_read(run_id: str, after: int = -1, limit: int = selectors.EVENT_PAGE,
                          *, upto: int | None = None) -> list[tuple[int, str]]:
        first = not reads
        if first:
            joined = await stored_count(run_id)
            await wait_until(lambda: _grew(run_id, joined), what="a batch after the join")
        rows = await real_read(run_id, after, limit, upto=upto)
        first_empty = not rows and all(n for _, n in reads)
        reads.append((after, len(rows)))
        if first and rows:
            await wait_until(lambda: _grew(run_id, after + 1 + len(rows)),
                             what="a batch after the first read")
        elif first_empty:
            await wait_until(lambda: _grew_or_ended(run_id, after + 1),
                             what="a batch after the replay")
        return rows

    live_batches: list[tuple[int, int]] = []
    real_live = RunConsumer.run_events

    async def recording_live(self: RunConsumer, message: dict[str, Any]) -> None:
        live_batches.append((message["first"], self.last_seq))
        await real_live(self, message)

    monkeypatch.setattr(selectors, "run_event_texts_after", racing_read)
    monkeypatch.setattr(RunConsumer, "run_events", recording_live)

    run = await start_live_run(ticker)
    await wait_until(lambda: _grew(run.id, 0), what="the first stored batch")
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["run"]["status"] == "running"
    events = events_of(await receive_run_messages(communicator))
    await communicator.disconnect()
    await wait_run_done(run.id)

    stored = await stored_payloads(run.id)
    assert_gap_free(seqs_of(events), len(stored))
    assert events == stored
    assert len(reads) >= 2
    # The hand-over really overlapped: a live batch repeated events already replayed
    # (and was filtered), and live batches brought events the replay had not.
    assert any(first <= last for first, last in live_batches), (live_batches, reads)
    assert any(first > last for first, last in live_batches), (live_batches, reads)


async def test_clients_joining_at_any_moment_all_see_every_event_once(
    cookie: str, ticker: str
) -> None:
    run = await start_live_run(ticker)

    async def client(after_stored: int) -> list[dict[str, Any]]:
        await wait_until(lambda: _at_least(run.id, after_stored),
                         what=f"{after_stored} stored events")
        communicator = await connect(f"/ws/runs/{run.id}/", cookie)
        assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
        events = events_of(await receive_run_messages(communicator))
        await communicator.disconnect()
        return events

    results = await asyncio.gather(*(client(n) for n in (0, 1, 10, 25, 40)))
    await wait_run_done(run.id)
    stored = await stored_payloads(run.id)
    assert len(stored) > 40
    for events in results:
        assert_gap_free(seqs_of(events), len(stored))
        assert events == stored


async def _at_least(run_id: str, count: int) -> bool:
    return await stored_count(run_id) >= count


# -- runs list ------------------------------------------------------------------------------


async def test_runs_list_announces_started_and_finished_runs(cookie: str, live: None) -> None:
    communicator = await connect("/ws/runs/", cookie)
    run = await start_live_run("ResearchFlow")
    queued = await communicator.receive_json_from(timeout=5)
    assert queued["type"] == "run"
    assert queued["run"]["id"] == run.id and queued["run"]["status"] == "queued"
    assert queued["run"]["flow"] == "ResearchFlow"
    started = await communicator.receive_json_from(timeout=5)
    assert started["run"]["id"] == run.id and started["run"]["status"] == "running"
    assert started["run"]["worker"] == started["run"]["origin"]["worker"] == "inline"
    finished = await communicator.receive_json_from(timeout=10)
    assert finished["run"]["id"] == run.id and finished["run"]["status"] == "finished"
    assert finished["run"]["event_count"] == await stored_count(run.id) > 0
    assert finished["run"]["reply"]["success"] is True
    await wait_run_done(run.id)
    await communicator.disconnect()


async def test_run_socket_answers_client_messages_with_an_error(
    cookie: str, demo_latency: Any
) -> None:
    run = await finished_run("HotelFlow", "Hi")
    communicator = await connect(f"/ws/runs/{run.id}/?after=1000", cookie)
    assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
    await communicator.send_json_to({"cmd": "publish"})
    reply = await communicator.receive_json_from(timeout=5)
    assert reply["type"] == "error"
    await communicator.disconnect()


# -- any run id -----------------------------------------------------------------------------

ODD_IDS = ["with space", "naïve", "a/b", 'quote"d', "tab\there", "line\r\nbreak", "run.x",
           "z" * 120]
"""Run ids Channels refuses in a group name (or nearly: ``run.x``), as a database from
before ids were checked may hold them."""


@pytest.mark.parametrize("run_id", ODD_IDS)
async def test_a_run_with_any_id_is_watched_live(cookie: str, run_id: str) -> None:
    layer = get_channel_layer()
    layer.require_valid_group_name(run_group(run_id))
    run = await Run.objects.acreate(id=run_id, flow="HotelFlow", status=Run.Status.RUNNING)
    communicator = await connect(f"/ws/runs/{quote(run_id, safe='')}/", cookie)
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["run"]["id"] == run_id
    recorder = RunRecorder(run.id)
    recorder.start()
    bus = EventBus([recorder], run_id=run.id)
    for batch in range(3):  # stored and broadcast batch by batch, every one without error
        for _ in range(5):
            bus.emit(StepEntered, step="Odd", level=1, how="child")
        await wait_until(lambda n=5 * (batch + 1): _at_least(run.id, n), what="a batch")
    await recorder.close()
    events = events_of(await receive_run_messages(communicator, until_end=False,
                                                  max_events=15))
    assert_gap_free(seqs_of(events), 15)
    assert {e["run_id"] for e in events} == {run_id}
    await communicator.disconnect()


def test_run_groups_are_valid_names_and_distinct() -> None:
    layer = get_channel_layer()
    names = {run_group(run_id) for run_id in [*ODD_IDS, "a", "A", "a b", "a_b", "x" * 64]}
    assert len(names) == len(ODD_IDS) + 5
    for name in names:
        layer.require_valid_group_name(name)
    assert run_group("a.b-c_9") == "run.a.b-c_9"  # a valid id reads as itself
    # A worker relays them as they are.
    messages = [events_message(run_id, [], 0, 0) for run_id in ODD_IDS]
    assert relay.parse(relay_sender.frames(messages)[0]) == [
        (group, relay_sender.plain(message)) for group, message in messages]


def test_what_a_worker_could_not_relay_is_owed_until_it_can() -> None:
    """A run's dropped batches are owed as one notice of how far they reach, its dropped
    summaries as the latest; a later message of the run that got through voids the
    debt (the socket sees the gap it leaves)."""
    owed = relay_sender._Owed()
    summary = {"type": "run.summary", "run": {"id": "r1", "status": "running"}}
    finished = {"type": "run.summary", "run": {"id": "r1", "status": "finished"}}
    owed.dropped([events_message("r1", [], 0, 4), events_message("r1", [], 5, 9),
                  (RUNS_GROUP, summary), events_message("r2", [], 0, 2),
                  (RUNS_GROUP, finished)])
    assert owed.take() == [
        (run_group("r1"), {"type": "run.events", "events": [], "upto": 9}),
        (run_group("r2"), {"type": "run.events", "events": [], "upto": 2}),
        (RUNS_GROUP, finished)]
    assert not owed and owed.take() == []
    owed.dropped([events_message("r1", [], 10, 12), (RUNS_GROUP, summary)])
    owed.delivered([events_message("r1", [], 13, 15), (RUNS_GROUP, finished)])
    assert not owed


# -- the bridge's batches -------------------------------------------------------------------


async def test_bridge_broadcasts_at_most_batch_events_per_message() -> None:
    run = await Run.objects.acreate(id="burst", flow="HotelFlow")
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(run_group(run.id), channel)
    recorder = RunRecorder(run.id)
    recorder.start()
    bus = EventBus([recorder], run_id=run.id)
    for _ in range(1_000):  # a burst, as a fan-out emits it: no await in between
        bus.emit(StepEntered, step="Burst", level=1, how="child")
    await recorder.close()

    sizes: list[int] = []
    while True:
        try:
            message = await asyncio.wait_for(layer.receive(channel), 0.2)
        except TimeoutError:
            break
        sizes.append(len(json.loads(message["events"])))  # the batch's stored text
    assert sum(sizes) == 1_000
    assert await stored_count(run.id) == 1_000
    assert max(sizes) <= recorder.batch_events, sizes


async def test_a_burst_of_large_events_is_stored_in_transactions_of_bounded_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A wide fork's pages of requests come in a row: stored in one transaction, the page
    # would hear of the first only once megabytes were written.
    from picoflow_web.record import append as door
    from picoflow_web.record import recorder as recording

    stored: list[list[int]] = []
    real = door.append

    def append(run: Run, events: Any, **kwargs: Any) -> Any:
        stored.append([len(text) for _, _, _, text, _ in events])
        return real(run, events, **kwargs)

    monkeypatch.setattr(recording, "append", append)
    run = await Run.objects.acreate(id="wide", flow="HotelFlow", status=Run.Status.RUNNING)
    recorder = RunRecorder(run.id, store_chars=100_000)
    recorder.start()
    bus = EventBus([recorder], run_id=run.id)
    for number in range(60):  # no await in between, as a fork emits its pages
        bus.emit(StepEntered, step=f"{number}:" + "p" * 20_000, level=1, how="child")
    await recorder.close()
    assert await stored_count(run.id) == 60
    assert sum(len(sizes) for sizes in stored) == 60
    assert len(stored) >= 12
    for sizes in stored:  # up to the limit, and one event over it at most
        assert sum(sizes[:-1]) < 100_000
    texts = await sync_to_async(read_texts)(run.id, -1, 100)
    assert [json.loads(text)["step"].split(":")[0] for _, text in texts] == [
        str(n) for n in range(60)]


@override_settings(DEBUG=True)
async def test_recording_keeps_no_debug_query_log_outside_requests() -> None:
    # DEBUG keeps every query of a connection until a request starts; a worker's run is
    # not a request, so the recorder itself must not let its INSERTs pile up.
    run = await Run.objects.acreate(id="debug-log", flow="HotelFlow")
    recorder = RunRecorder(run.id)
    recorder.start()
    bus = EventBus([recorder], run_id=run.id)
    for _ in range(1_000):
        bus.emit(StepEntered, step="Burst", level=1, how="child")
    await recorder.close()
    assert await sync_to_async(lambda: len(connection.queries))() == 0
    assert await stored_count(run.id) == 1_000


# -- the live path's cost -------------------------------------------------------------------


async def test_live_batches_take_no_database_hop_and_a_gap_read_back_does(
        cookie: str, demo_latency: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Channels closes stale database connections before every handler, by a hop to the
    # synchronous thread; a batch that is only forwarded skips it, and one that must read
    # the store first closes them itself.
    import channels.consumer

    from picoflow_web.live import consumers

    hops: list[str] = []

    def counting(where: str, original: Any) -> Any:
        async def close_old() -> None:
            hops.append(where)
            await original()
        return close_old

    monkeypatch.setattr(channels.consumer, "aclose_old_connections",
                        counting("dispatch", channels.consumer.aclose_old_connections))
    monkeypatch.setattr(consumers, "aclose_old_connections",
                        counting("read back", consumers.aclose_old_connections))
    run = await finished_run()
    texts = await selectors.run_event_texts_after(run.id)
    half = len(texts) // 2
    communicator = await connect(f"/ws/runs/{run.id}/?after={half - 1}", cookie)
    await communicator.receive_json_from(timeout=5)
    replayed = events_of(await receive_run_messages(communicator))
    assert seqs_of(replayed) == list(range(half, len(texts)))
    hops.clear()

    layer = get_channel_layer()
    batch = "[" + ",".join(text for _, text in texts[:half]) + "]"
    await layer.group_send(run_group(run.id), {"type": "run.events", "events": batch,
                                               "first": 0, "upto": half - 1})
    assert await communicator.receive_nothing(timeout=0.2)  # sent already: dropped
    assert hops == []

    await communicator.disconnect()
    communicator = await connect(f"/ws/runs/{run.id}/?after={len(texts) - 1}", cookie)
    await communicator.receive_json_from(timeout=5)
    hops.clear()
    # A notice of a batch that could not travel (too big): read back from the store.
    await layer.group_send(run_group(run.id), {"type": "run.events", "events": [],
                                               "upto": len(texts) - 1})
    assert await communicator.receive_nothing(timeout=0.2)
    assert hops == ["read back"]
    await communicator.disconnect()


async def test_a_message_for_a_client_that_just_left_is_dropped_quietly() -> None:
    # A group message handled after the client closed, before its disconnect is read:
    # Daphne's socket refuses the frame as its protocol does, with autobahn's Disconnected.
    from autobahn.exception import Disconnected

    refused: list[dict[str, Any]] = []

    async def closed_socket(message: dict[str, Any]) -> None:
        refused.append(message)
        raise Disconnected("Attempt to send on a closed protocol")

    consumer = RunsConsumer()
    consumer.scope = {"type": "websocket", "path": "/ws/runs/"}
    consumer.base_send = closed_socket
    consumer.readable = None
    await consumer.run_summary({"type": "run.summary", "run": {"id": "r1", "project": "p"}})
    assert [json.loads(m["text"]) for m in refused] == [
        {"type": "run", "run": {"id": "r1", "project": "p"}}]
