"""One door for events: a run stored from any source is the same run.

The same golden trace goes in through the in-process recorder (a worker's turn), through
``POST /api/ingest`` (a remote process) and through ``POST /api/import`` (an exported
file); the stored rows and the run's counters come out identical. The door itself
(:func:`picoflow_web.record.append.append`) is checked for what it refuses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError
from django.test import AsyncClient
from django.utils import timezone

from picoflow_web.data.eventlog import read_texts
from picoflow_web.execute import services
from picoflow_web.models import EventRecord, Run, StoredSession
from picoflow_web.record.append import (
    Incoming,
    NotAppended,
    SeqBroken,
    append,
    check_continuity,
    counted,
)
from picoflow_web.record.recorder import RunRecorder
from runtime.events import EventBus, StepEntered, parse_event
from tests.golden.goldens import GOLDENS, Golden
from tests.webhelpers import amake_user, atoken, bearer

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

NDJSON = "application/x-ndjson"
ORIGIN = {"PicoFlow-Origin-Host": "laptop-7", "PicoFlow-Origin-Pid": "4242"}
GOLDEN_NAMES = ("nested_fanout", "conflict", "cancellation", "cancelled", "turn_failure",
                "sink_overflow")
"""Goldens a remote process could send (ingest refuses the ``run.interrupted`` a
dashboard records), with forks, conflicts, rejected branches, a stop, a failure and a
sink's reported loss among them."""
COUNTERS = ("event_count", "last_seq", "has_conflicts", "branch_count", "rejected_count",
            "duration", "status", "session_id")
WORKER = "w-append"


def golden(name: str) -> Golden:
    return next(g for g in GOLDENS if g.name == name)


def runs_of(lines: list[str]) -> dict[str, list[str]]:
    """The lines by run, runs in the order they first appear."""
    grouped: dict[str, list[str]] = {}
    for line in lines:
        grouped.setdefault(parse_event(line).run_id, []).append(line)
    return grouped


async def stored() -> dict[str, Any]:
    """Every run's rows ``(seq, type, path, text)`` and counters."""
    out: dict[str, Any] = {}
    async for run in Run.objects.order_by("id"):
        rows = [row async for row in EventRecord.objects.filter(run_id=run.id).order_by(
            "seq").values_list("seq", "type", "path")]
        texts = [text for _, text in await sync_to_async(read_texts)(run.id, -1, 100_000)]
        out[run.id] = {"rows": rows, "texts": texts,
                       **{name: getattr(run, name) for name in COUNTERS}}
    return out


async def wipe() -> None:
    await EventRecord.objects.all().adelete()
    await Run.objects.all().adelete()
    await StoredSession.objects.all().adelete()


async def through_the_recorder(lines: list[str]) -> None:
    """As a worker records its turn: the run claimed, its events fed to a recorder in
    small batches, then the turn's end recorded with the reply its engine returned."""
    for run_id, run_lines in runs_of(lines).items():
        events = [parse_event(line) for line in run_lines]
        first = events[0]
        await Run.objects.acreate(id=run_id, flow=getattr(first, "flow", ""),
                                  status=Run.Status.RUNNING, origin={"kind": "worker"},
                                  worker=WORKER)
        recorder = RunRecorder(run_id, batch_events=4, store_events=7, worker=WORKER)
        for event in events:
            recorder.receive(event)
        recorder.start()
        await recorder.close()
        assert recorder.stored == len(events)
        end = events[-1].model_dump(mode="json")
        reply = {"session_id": end["session_id"], "content_type": "text/plain",
                 "error_code": None}
        status = None
        if end["type"] == "turn.finished":
            reply |= {key: end[key] for key in ("success", "completed", "message",
                                                "content_type")}
        elif end["type"] == "turn.failed":
            reply |= {"success": False, "completed": True,
                      "message": end["error"]["message"],
                      "error_code": end["error"]["code"]}
        else:
            assert end["type"] == "turn.cancelled"
            reply |= {"success": False, "completed": False,
                      "message": f"Stopped: {end['reason']}",
                      "error_code": services.TURN_CANCELLED}
            status = Run.Status.CANCELLED
        await services.run_finish(run_id, reply, status=status, worker=WORKER)


async def through_ingest(lines: list[str], auth: dict[str, str]) -> None:
    """As a remote process sends them: a few requests, each continuing the last."""
    client = AsyncClient()
    for start in range(0, len(lines), 9):
        body = "".join(line + "\n" for line in lines[start:start + 9])
        response = await client.post("/api/ingest", data=body.encode(), content_type=NDJSON,
                                     headers={**ORIGIN, **auth})
        assert response.status_code == 200, response.content


async def through_import(lines: list[str], auth: dict[str, str]) -> None:
    body = "".join(line + "\n" for line in lines).encode()
    response = await AsyncClient().post("/api/import", data=body, content_type=NDJSON,
                                        headers=auth)
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("name", GOLDEN_NAMES)
async def test_every_source_stores_the_same_rows_and_counters(name: str) -> None:
    lines = golden(name).jsonl_path.read_text(encoding="utf-8").splitlines()
    auth = bearer(await atoken(await amake_user(), scopes=("read", "run", "ingest")))

    await through_the_recorder(lines)
    recorded = await stored()
    await wipe()
    await through_ingest(lines, auth)
    ingested = await stored()
    await wipe()
    await through_import(lines, auth)
    imported = await stored()

    assert recorded == ingested == imported
    for run_id, run_lines in runs_of(lines).items():
        run = recorded[run_id]
        assert run["texts"] == run_lines  # as the runtime wrote them, byte for byte
        assert run["event_count"] == len(run_lines)
        assert run["last_seq"] == parse_event(run_lines[-1]).seq
        assert run["status"] in Run.ENDED


# -- the door's own rules -------------------------------------------------------------------


def incoming(seq: int, kind: str = "step.entered", **data: Any) -> Incoming:
    fields = {"seq": seq, "type": kind, "offset": float(seq), "session_id": "", **data}
    return seq, kind, "", "{}", fields


def test_a_gap_is_refused_unless_a_sink_reported_it() -> None:
    check_continuity("r", 3, [incoming(3), incoming(4)])
    with pytest.raises(SeqBroken) as refused:
        check_continuity("r", 3, [incoming(3), incoming(5)])
    assert (refused.value.expected, refused.value.seq) == (4, 5)
    with pytest.raises(SeqBroken):
        check_continuity("r", 3, [incoming(2)])  # a repeat
    check_continuity("r", 3, [incoming(3), incoming(6), incoming(
        7, "sink.overflowed", first_seq=4, last_seq=5)])


def test_the_counters_read_each_event_type_once() -> None:
    run = Run(id="r", last_seq=1, event_count=2, branch_count=1, duration=1.0)
    now = timezone.now()
    fields = counted(run, [
        incoming(2, "barrier.forked", requests=[{}, {}, {}]),
        incoming(3, "branch.rejected"),
        incoming(4, "join.invalidated"),
        incoming(5, "turn.cancelled", reason="stop", requested_by="ada", session_id="s"),
    ], now=now)
    assert fields == {
        "event_count": 6, "last_seq": 5, "has_conflicts": True, "branch_count": 4,
        "rejected_count": 1, "duration": 5.0, "session_id": "s", "last_seen_at": now,
        "status": Run.Status.CANCELLED, "finished_at": now,
        "cancel_requested": {"by": "ada", "at": None},
        "reply": {"success": False, "completed": False, "message": "Stopped: stop",
                  "session_id": "s", "content_type": "text/plain",
                  "error_code": "turn_cancelled"}}
    assert (run.event_count, run.status) == (2, Run.Status.RUNNING)  # not changed
    # A dashboard's own run: its worker records the turn's end, with the engine's reply.
    own = counted(run, [incoming(2, "turn.finished", success=True, completed=True,
                                 message="ok", content_type="text/plain")],
                  now=now, ends_turn=False, heard=False)
    assert "status" not in own and "last_seen_at" not in own


async def test_an_append_the_guard_refuses_stores_nothing() -> None:
    run = await Run.objects.acreate(id="guarded", flow="F", status=Run.Status.INTERRUPTED)

    def refused() -> None:
        with pytest.raises(NotAppended):
            append(run, [incoming(0)], now=timezone.now(),
                   guard={"status": Run.Status.RUNNING})

    await sync_to_async(refused)()
    assert not await EventRecord.objects.filter(run_id=run.id).aexists()
    assert (await Run.objects.aget(id=run.id)).event_count == 0
    assert run.event_count == 0


async def test_a_batch_the_store_lost_leaves_a_gap_and_what_follows_is_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = await Run.objects.acreate(id="lossy", flow="F", status=Run.Status.RUNNING)
    recorder = RunRecorder(run.id, batch_events=4, store_events=4)
    store = recorder._store_batch
    calls: list[list[int]] = []

    def failing_once(batch: list[Any], texts: list[str]) -> Any:
        calls.append([e.seq for e in batch])
        if len(calls) == 2:
            raise OperationalError("database is locked")
        return store(batch, texts)

    monkeypatch.setattr(recorder, "_store_batch", failing_once)
    bus = EventBus([recorder], run_id=run.id)
    for _ in range(12):
        bus.emit(StepEntered, step="S", level=1, how="child")
    recorder.start()
    await recorder.close()
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    seqs = [s async for s in EventRecord.objects.filter(run_id=run.id).order_by(
        "seq").values_list("seq", flat=True)]
    assert seqs == [0, 1, 2, 3, 8, 9, 10, 11]
    stored_run = await Run.objects.aget(id=run.id)
    assert (stored_run.event_count, stored_run.last_seq) == (8, 11)


def test_a_batch_of_large_events_is_told_to_browsers_in_messages_of_bounded_size() -> None:
    # A wide fork's request pages (tens of KB each) are stored in a row: one message of a
    # batch's 200 events would be megabytes, over a websocket server's default message cap
    # (Daphne's 1 MiB), and the page would parse it in one long task.
    from picoflow_web.live.groups import MESSAGE_BYTES, run_group
    from picoflow_web.record.append import Appended, messages

    page = '{"seq":%d,"pad":"' + "x" * 40_000 + '"}'
    small = '{"seq":%d}'
    texts = [(page if 10 <= seq < 150 else small) % seq for seq in range(200)]
    texts.append('{"seq":200,"pad":"' + "y" * (MESSAGE_BYTES + 10) + '"}')  # one too large
    events: list[Incoming] = [(seq, "barrier.requested", "", text, {})
                              for seq, text in enumerate(texts)]
    sent = messages([Appended("r1", events)], size=200)
    assert {group for group, _ in sent} == {run_group("r1")}
    bodies = [message for _, message in sent]
    assert len(bodies) > 10
    seqs = []
    for body in bodies:
        listed = [event["seq"] for event in json.loads(body["events"])]
        assert (body["first"], body["upto"]) == (listed[0], listed[-1])
        assert len(str(body["events"])) <= MESSAGE_BYTES or len(listed) == 1
        seqs.extend(listed)
    assert seqs == list(range(201))  # every event once, in order
