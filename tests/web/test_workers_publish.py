"""What reaches browsers from workers and what bounds a worker's run: the relay socket
(``ws/relay/``, and the frames a worker sends on it), the run socket's gap fill, the
recorder's back-pressure, the engine-wide branch cap, and remote runs that end
``turn.cancelled``."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, override_settings
from django.utils import timezone

from picoflow_web.asgi import application
from picoflow_web.execute import services
from picoflow_web.execute.engine import get_engine
from picoflow_web.live import consumers, relay, relay_sender
from picoflow_web.live.groups import RUNS_GROUP, events_message, run_group
from picoflow_web.models import ApiToken, EventRecord, Run
from picoflow_web.record import interruption, watchdog
from picoflow_web.record.recorder import RunRecorder
from runtime.events import EventBus, StepEntered
from tests.webhelpers import (
    ORIGIN,
    amake_user,
    asession_cookie,
    assert_gap_free,
    bearer,
    events_of,
    run_to_the_end,
    stored_count,
    wait_until,
    ws_headers,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_latency"),
]


GOLDEN_CANCELLED = Path(__file__).resolve().parent.parent / "golden" / "cancelled.jsonl"


@pytest.fixture
async def cookie() -> str:
    return await asession_cookie(await amake_user())


async def connect(path: str, cookie: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, path, headers=ws_headers(cookie))
    connected, code = await communicator.connect(timeout=5)
    assert connected, f"{path} refused with {code}"
    return communicator


def event(run_id: str, seq: int) -> dict[str, Any]:
    return {"v": 1, "run_id": run_id, "session_id": "s-pub", "seq": seq,
            "time": 1.0e9 + seq, "offset": float(seq), "path": "", "type": "step.entered",
            "step": f"S{seq}", "level": 1, "how": "goto"}


async def stored_run(count: int, status: str = Run.Status.RUNNING) -> Run:
    """A worker run with ``count`` stored events."""
    run = await Run.objects.acreate(id=uuid.uuid4().hex, flow="HotelFlow", message="Hi",
                                    status=status, origin={"kind": "worker"}, worker="w")
    await store(run.id, range(count))
    return run


async def store(run_id: str, seqs: range) -> None:
    await EventRecord.objects.abulk_create([
        EventRecord(run_id=run_id, seq=s, type="step.entered", path="",
                    payload=event(run_id, s)) for s in seqs])


async def receive_events(communicator: WebsocketCommunicator,
                         count: int) -> list[list[dict[str, Any]]]:
    """``events`` messages until ``count`` events came; the batches as received."""
    batches: list[list[dict[str, Any]]] = []
    while sum(len(b) for b in batches) < count:
        message = await communicator.receive_json_from(timeout=5)
        assert message["type"] == "events", message
        batches.append(message["events"])
    return batches


# -- the relay socket -----------------------------------------------------------------------


async def relay_socket(key: str | None, origin: str | None = ORIGIN
                       ) -> tuple[WebsocketCommunicator, bool, Any]:
    """A relay socket opened with ``key``: the communicator, whether it stayed open, and
    the close code if it did not."""
    headers = ws_headers(origin=origin)
    if key is not None:
        headers.append((relay.HEADER.lower().encode(), key.encode()))
    communicator = WebsocketCommunicator(application, "/ws/relay/", headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    output = await communicator.receive_output(timeout=5) if not await (
        communicator.receive_nothing(timeout=0.1)) else None
    if output is not None:
        assert output["type"] == "websocket.close", output
        return communicator, False, output.get("code")
    return communicator, True, None


def relay_body(*messages: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"messages": [{"group": g, "message": m} for g, m in messages]})


async def test_the_relay_socket_refuses_clients_without_the_installation_key(
        caplog: pytest.LogCaptureFixture) -> None:
    for key in (None, "", "0" * 64, relay.key()[:-1] + "x"):
        communicator, open_, code = await relay_socket(key)
        assert (open_, code) == (False, consumers.CLOSE_FORBIDDEN), key
        await communicator.disconnect()
    assert "relay key" in caplog.text


async def test_a_worker_opens_the_relay_socket_with_its_key_whatever_its_origin() -> None:
    # A worker is no browser: it sends no Origin (or the server's 127.0.0.1 address,
    # which ALLOWED_HOSTS need not list); its key is what authenticates it.
    for origin in (None, "http://127.0.0.1:1", "http://elsewhere.example"):
        communicator, open_, code = await relay_socket(relay.key(), origin=origin)
        assert (open_, code) == (True, None), origin
        await communicator.disconnect()


@pytest.mark.parametrize("body", [
    "{not json",
    "[]",
    json.dumps({"messages": {"group": "runs"}}),
    relay_body(("browsers", {"type": "run.summary", "run": {}})),
    relay_body(("runs", {"type": "websocket.send", "text": "x"})),
    relay_body(("run.abc", {"type": "run.events"}), ("runs", {"type": "run.summaryx"})),
    relay_body(("runs", {"run": {}})),
])
async def test_a_malformed_relay_frame_closes_the_socket_and_delivers_nothing(
        body: str, cookie: str, caplog: pytest.LogCaptureFixture) -> None:
    runs_socket = await connect("/ws/runs/", cookie)
    communicator, open_, _ = await relay_socket(relay.key())
    try:
        assert open_
        await communicator.send_to(text_data=body)
        closed = await communicator.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_BAD_REQUEST}
        # Nothing of a refused frame is delivered, not even its valid messages.
        assert await runs_socket.receive_nothing(timeout=0.1)
        assert "relay frame was refused" in caplog.text and "Traceback" not in caplog.text
    finally:
        await communicator.disconnect()
        await runs_socket.disconnect()


async def test_relay_delivers_events_to_the_run_socket_and_summaries_to_the_list(
        cookie: str) -> None:
    run = await stored_run(3)
    run_socket = await connect(f"/ws/runs/{run.id}/?after=2", cookie)
    runs_socket = await connect("/ws/runs/", cookie)
    communicator, open_, _ = await relay_socket(relay.key())
    try:
        assert open_
        assert (await run_socket.receive_json_from(timeout=5))["type"] == "run"
        assert await run_socket.receive_nothing(timeout=0.1)  # nothing after seq 2 yet
        await store(run.id, range(3, 5))
        batch = [event(run.id, 3), event(run.id, 4)]
        summary = {**run.summary(), "event_count": 5}
        [frame] = relay_sender.frames([
            (run_group(run.id), {"type": "run.events", "events": batch}),
            (RUNS_GROUP, {"type": "run.summary", "run": summary})])
        await communicator.send_to(text_data=frame)

        assert await run_socket.receive_json_from(timeout=5) == {"type": "events",
                                                                 "events": batch}
        assert await runs_socket.receive_json_from(timeout=5) == {"type": "run",
                                                                  "run": summary}
        assert await run_socket.receive_nothing(timeout=0.1)
        assert await runs_socket.receive_nothing(timeout=0.1)
    finally:
        await communicator.disconnect()
        await run_socket.disconnect()
        await runs_socket.disconnect()


async def test_a_batch_too_big_for_a_frame_travels_as_a_notice_the_socket_reads_back(
        cookie: str) -> None:
    run = await stored_run(2)
    run_socket = await connect(f"/ws/runs/{run.id}/?after=1", cookie)
    communicator, open_, _ = await relay_socket(relay.key())
    try:
        assert open_
        assert (await run_socket.receive_json_from(timeout=5))["type"] == "run"
        big = [{**event(run.id, s), "step": "x" * (relay_sender.FRAME_BYTES // 4)}
               for s in range(2, 7)]
        await EventRecord.objects.abulk_create([
            EventRecord(run_id=run.id, seq=e["seq"], type=e["type"], path="", payload=e)
            for e in big])
        small = {"type": "run.summary", "run": {**run.summary(), "event_count": 7}}
        frames = relay_sender.frames([events_message(run.id, big, 2, big[-1]["seq"]),
                                      (RUNS_GROUP, small)])
        assert all(len(f) <= relay_sender.FRAME_BYTES for f in frames)
        notice = json.loads(frames[0])["messages"][0]["message"]
        assert notice == {"type": "run.events", "events": [], "upto": 6}
        for frame in frames:
            await communicator.send_to(text_data=frame)
        received = [e for b in await receive_events(run_socket, len(big)) for e in b]
        assert received == big  # read back from the store, in order, each once
        assert await run_socket.receive_nothing(timeout=0.1)
    finally:
        await communicator.disconnect()
        await run_socket.disconnect()


def test_frames_pack_messages_in_order_under_the_frame_size() -> None:
    messages = [(f"run.r{i}", {"type": "run.events", "events": [{"seq": i, "text": "y" * 9000}]})
                for i in range(200)]
    frames = relay_sender.frames(messages)
    assert len(frames) > 1 and all(len(f) <= relay_sender.FRAME_BYTES for f in frames)
    unpacked = [m for f in frames for m in relay.parse(f)]
    assert unpacked == messages


def test_a_batch_serialised_once_travels_as_its_text() -> None:
    events = [{"seq": 0, "text": "caf\u00e9 </script> \"q\""}, {"seq": 1, "n": 1.5}]
    raw = relay_sender.RawJSON(json.dumps(events))
    [frame] = relay_sender.frames([events_message("r", raw, 0, 1)])
    # One JSON string in the frame: the web server parses a string, not each event.
    assert json.dumps(str(raw)) in frame
    assert relay.parse(frame) == [("run.r", {"type": "run.events", "events": str(raw),
                                             "first": 0, "upto": 1})]
    # In one process (or on Redis) the layer carries the same text, as a plain string.
    carried = relay_sender.plain(events_message("r", raw, 0, 1)[1])["events"]
    assert type(carried) is str and carried == raw


# -- gap fill ---------------------------------------------------------------------------------


async def test_a_live_batch_that_skips_stored_events_is_preceded_by_them(cookie: str) -> None:
    run = await stored_run(5)
    communicator = await connect(f"/ws/runs/{run.id}/", cookie)
    try:
        assert (await communicator.receive_json_from(timeout=5))["type"] == "run"
        replayed = await receive_events(communicator, 5)
        # Stored meanwhile: 5..11; the message announcing 5..7 was lost on the way.
        await store(run.id, range(5, 12))
        layer = get_channel_layer()
        await layer.group_send(run_group(run.id), {
            "type": "run.events", "events": [event(run.id, s) for s in range(8, 12)]})
        live = await receive_events(communicator, 7)
        # A late duplicate of what the socket already sent changes nothing.
        await layer.group_send(run_group(run.id), {
            "type": "run.events", "events": [event(run.id, s) for s in range(6, 12)]})
        assert await communicator.receive_nothing(timeout=0.1)
    finally:
        await communicator.disconnect()
    assert [e["seq"] for b in live for e in b][:3] == [5, 6, 7]  # the stored ones first
    received = events_of([{"type": "events", "events": b} for b in replayed + live])
    assert_gap_free([e["seq"] for e in received], 12)
    assert received == [event(run.id, s) for s in range(12)]


# -- the recorder's back-pressure -------------------------------------------------------------


async def test_a_recorder_with_a_full_buffer_is_congested_until_the_store_caught_up() -> None:
    run = await stored_run(0)
    recorder = RunRecorder(run.id, batch_events=4, max_buffered=5)
    bus = EventBus([recorder], run_id=run.id)
    for _ in range(5):
        bus.emit(StepEntered, step="Burst", level=1, how="child")
    assert not recorder.congested()  # at the limit, not over it
    for _ in range(15):
        bus.emit(StepEntered, step="Burst", level=1, how="child")
    assert recorder.congested()
    assert await stored_count(run.id) == 0

    recorder.start()

    async def caught_up() -> bool:
        return not recorder.congested()

    await wait_until(caught_up, what="the recorder's pump to store the backlog")
    await recorder.close()
    assert not recorder.congested()
    payloads = [p async for p in EventRecord.objects.filter(run_id=run.id).order_by("seq")
                .values_list("payload", flat=True)]
    assert_gap_free([p["seq"] for p in payloads], 20)
    assert recorder.stored == 20
    assert (await Run.objects.aget(id=run.id)).event_count == 20


async def test_a_batch_with_a_lone_surrogate_is_stored_whole_with_a_replacement_character(
) -> None:
    # Serialising the event raised: the pump logged it and lost the whole batch.
    run = await stored_run(0)
    recorder = RunRecorder(run.id, batch_events=10)
    bus = EventBus([recorder], run_id=run.id)
    for step in ("Before", "Caf\udce9", "After"):
        bus.emit(StepEntered, step=step, level=1, how="child")
    recorder.start()
    await recorder.close()
    payloads = [p async for p in EventRecord.objects.filter(run_id=run.id).order_by("seq")
                .values_list("payload", flat=True)]
    assert [p["step"] for p in payloads] == ["Before", "Caf\ufffd", "After"]
    assert recorder.stored == 3


async def test_a_backlog_is_stored_in_one_transaction_and_told_in_batches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = await stored_run(0)
    recorder = RunRecorder(run.id, batch_events=4, store_events=12)
    stores: list[list[int]] = []
    store = recorder._store_sync

    def counting(batch: list[Any], texts: list[str]) -> bool:
        stores.append([e.seq for e in batch])
        return store(batch, texts)

    monkeypatch.setattr(recorder, "_store_sync", counting)
    told: list[tuple[int, int, list[int]]] = []

    async def publish(messages: list[Any]) -> None:
        for _, message in messages:
            told.append((message["first"], message["upto"],
                         [e["seq"] for e in json.loads(message["events"])]))

    monkeypatch.setattr(relay, "publish", publish)
    bus = EventBus([recorder], run_id=run.id)
    for _ in range(14):  # a backlog, as a run that outpaces the store leaves
        bus.emit(StepEntered, step="Burst", level=1, how="child")
    recorder.start()
    await recorder.close()
    assert stores == [list(range(12)), [12, 13]]
    assert told == [(0, 3, [0, 1, 2, 3]), (4, 7, [4, 5, 6, 7]), (8, 11, [8, 9, 10, 11]),
                    (12, 13, [12, 13])]
    assert (await Run.objects.aget(id=run.id)).event_count == 14


# -- the engine-wide branch cap ---------------------------------------------------------------


@pytest.fixture
def branch_cap() -> Any:
    """``PICOFLOW_MAX_BRANCHES=50`` for this test's engine, and the usual one after it."""
    with override_settings(PICOFLOW_MAX_BRANCHES=50):
        get_engine.cache_clear()
        yield 50
    get_engine.cache_clear()


async def test_a_run_forking_more_branches_than_the_cap_fails_saying_so(
        branch_cap: int) -> None:
    over, reply = await run_to_the_end(flow="FanOutFlow", message="go",
                                             config={"branches": 100})
    assert over.status == Run.Status.FAILED
    assert not reply.success
    assert str(branch_cap) in reply.message, reply.message
    assert (await EventRecord.objects.filter(run_id=over.id).order_by("-seq")
            .values_list("type", flat=True).afirst()) == "turn.failed"
    assert await EventRecord.objects.filter(run_id=over.id, type="branch.started").acount() == 0

    under, reply = await run_to_the_end(flow="FanOutFlow", message="go",
                                              config={"branches": 40})
    assert under.status == Run.Status.FINISHED, reply.message
    assert reply.message.startswith("40 of 40 branches joined"), reply.message


# -- remote runs that were stopped ------------------------------------------------------------


def golden_cancelled_turn(run_id: str) -> list[str]:
    """The golden stopped turn (``cancelled-1``), renamed ``run_id``."""
    lines = []
    for line in GOLDEN_CANCELLED.read_text().splitlines():
        payload = json.loads(line)
        if payload["run_id"] == "cancelled-1":
            payload["run_id"] = run_id
            lines.append(json.dumps(payload))
    assert json.loads(lines[-1])["type"] == "turn.cancelled"
    return lines


async def test_an_ingested_turn_that_was_stopped_ends_the_run_cancelled() -> None:
    user = await amake_user("shipper")
    _, token = await sync_to_async(ApiToken.issue)(user, "ingest", ("ingest",))
    lines = golden_cancelled_turn("remote-stopped")
    response = await AsyncClient().post(
        "/api/ingest", data="".join(line + "\n" for line in lines).encode(),
        content_type="application/x-ndjson",
        headers={**bearer(token), "PicoFlow-Origin-Host": "laptop", "PicoFlow-Origin-Pid": "9"})
    assert response.status_code == 200, response.content
    assert response.json()["runs"]["remote-stopped"] == {"last_seq": len(lines) - 1,
                                                         "status": "cancelled"}
    run = await Run.objects.aget(id="remote-stopped")
    assert run.status == Run.Status.CANCELLED
    assert run.finished_at is not None
    assert run.reply["error_code"] == services.TURN_CANCELLED
    assert "Stop pressed in the dashboard" in run.reply["message"]
    assert run.cancel_requested["by"] == "ada"
    assert services.reply_of(run).error_code == services.TURN_CANCELLED

    # Long silent afterwards: ended, so the watchdog leaves it alone.
    await Run.objects.filter(id=run.id).aupdate(
        last_seen_at=timezone.now() - timedelta(days=1))
    silent = await sync_to_async(interruption.interrupt_silent_runs)()
    assert not silent.events
    assert await watchdog.sweep() == 0
    after = await Run.objects.aget(id=run.id)
    assert (after.status, after.interruption) == (Run.Status.CANCELLED, None)
    assert await stored_count(run.id) == len(lines)
    # Stopping it from here is refused: it has ended.
    answer = await AsyncClient().post(f"/api/runs/{run.id}/cancel",
                                      headers=bearer(await _run_token(user)))
    assert answer.status_code == 409
    assert answer.json()["code"] == "run_ended"


async def _run_token(user: Any) -> str:
    _, raw = await sync_to_async(ApiToken.issue)(user, "runner", ("run",))
    return raw
