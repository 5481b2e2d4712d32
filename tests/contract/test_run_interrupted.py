"""``run.interrupted``: the event the dashboard records when a run's executor goes silent.

The runtime never emits it; :func:`runtime.events.interruption` builds it from the run's
last stored event (as JSON, what a server has). Here: what the builder makes and refuses.
How both folds read it is checked on the ``interrupted`` golden
(``tests/contract/test_goldens.py``) and on the bad traces.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime import events as ev

LAST: dict[str, Any] = {
    "v": 1, "run_id": "run-7", "session_id": "sess-7", "seq": 41, "time": 1798761600.25,
    "offset": 12.5, "path": "0.1", "type": "model.started", "step": "Finder", "call": 5,
    "attempt": 1, "model": {}, "messages": [], "tools": [],
}
REASON = "no events or heartbeats for 30 s"


def test_the_event_follows_the_last_one_of_its_run() -> None:
    event = ev.interruption(LAST, now=LAST["time"] + 30.0, silent_for=30.0, reason=REASON)
    assert isinstance(event, ev.RunInterrupted)
    assert event.model_dump(mode="json") == {
        "v": ev.SCHEMA_VERSION, "run_id": "run-7", "session_id": "sess-7", "seq": 42,
        "time": LAST["time"] + 30.0, "offset": 42.5, "path": "", "type": "run.interrupted",
        "reason": REASON, "silent_for": 30.0, "worker": None, "revision": None,
    }


def test_a_worker_run_names_its_worker_and_the_revision_its_session_stays_at() -> None:
    event = ev.interruption(LAST, now=LAST["time"] + 30.0, silent_for=30.0, reason=REASON,
                            worker="worker-3 (pid 4242)", revision=7)
    assert (event.worker, event.revision) == ("worker-3 (pid 4242)", 7)
    line = ev.dump_event(event)
    assert line.endswith('"worker":"worker-3 (pid 4242)","revision":7}')
    assert ev.parse_event(line) == event
    # Stored before these fields existed: still valid, both read as unknown.
    old = {k: v for k, v in event.model_dump(mode="json").items()
           if k not in ("worker", "revision")}
    assert ev.parse_event(old).model_dump(mode="json") == {**old, "worker": None,
                                                           "revision": None}


def test_it_parses_back_strictly_and_round_trips() -> None:
    event = ev.interruption(LAST, now=LAST["time"] + 45.5, silent_for=45.5, reason=REASON)
    line = ev.dump_event(event)
    assert ev.parse_event(line) == event
    assert ev.dump_event(ev.parse_event(line)) == line
    assert ev.EVENT_TYPES["run.interrupted"] is ev.RunInterrupted


def test_the_offset_never_goes_back_when_the_clock_does() -> None:
    event = ev.interruption(LAST, now=LAST["time"] - 5.0, silent_for=0.0, reason=REASON)
    assert (event.time, event.offset) == (LAST["time"] - 5.0, LAST["offset"])


def test_it_does_not_need_more_than_the_envelope_of_the_last_event() -> None:
    envelope = {k: LAST[k] for k in ("run_id", "session_id", "seq", "time", "offset")}
    event = ev.interruption(envelope, now=LAST["time"] + 1.0, silent_for=1.0, reason="lost")
    assert (event.seq, event.offset, event.reason) == (42, 13.5, "lost")


@pytest.mark.parametrize("missing", ["run_id", "session_id", "seq", "time", "offset"])
def test_a_last_event_without_its_envelope_is_refused(missing: str) -> None:
    last = {k: v for k, v in LAST.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        ev.interruption(last, now=LAST["time"] + 30.0, silent_for=30.0, reason=REASON)


@pytest.mark.parametrize("ending", ["turn.finished", "turn.failed", "turn.cancelled",
                                    "run.interrupted"])
def test_a_run_that_already_ended_cannot_be_interrupted(ending: str) -> None:
    with pytest.raises(ValueError, match=f"already ended with {ending}"):
        ev.interruption({**LAST, "type": ending}, now=LAST["time"] + 30.0, silent_for=30.0,
                        reason=REASON)


@pytest.mark.parametrize(("last", "args"), [
    (LAST, {"silent_for": -1.0}),
    (LAST, {"reason": None}),
    (LAST, {"revision": -1}),
    ({**LAST, "run_id": 7}, {}),
    ({**LAST, "seq": -2}, {}),
], ids=["negative-silence", "no-reason", "negative-revision", "run-id-not-text",
        "seq-below-zero"])
def test_the_values_are_validated(last: dict[str, Any], args: dict[str, Any]) -> None:
    given: dict[str, Any] = {"now": LAST["time"] + 30.0, "silent_for": 30.0, "reason": REASON,
                             **args}
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        ev.interruption(last, **given)
