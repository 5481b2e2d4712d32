"""The one door events are stored by, whatever brought them.

A run's events come from the dashboard's own workers (:mod:`picoflow_web.record.recorder`),
from other processes (:mod:`picoflow_web.record.ingest`), from exported files
(:mod:`picoflow_web.record.importing`) and from the dashboard itself when it declares a run
interrupted (:mod:`picoflow_web.record.interruption`). Each source checks and shapes its
events its own way (a request is refused with line numbers, a batch of a live turn is
dropped when its run was lost), then hands them here as :data:`Incoming`: already
serialised, so nothing is parsed or encoded twice. :func:`append` keeps the run's sequence
gap-free, stores the rows and brings the run's row up to date (:func:`counted`, the one
place that says what each event type does to it) in one transaction; :func:`broadcast`
then tells browsers, only once the events are stored, so a reconnecting page reads back
everything it was told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from picoflow_web.data.eventlog import insert_rows
from picoflow_web.live import groups, relay
from picoflow_web.live.relay_sender import RawJSON
from picoflow_web.models import Run

BROADCAST_EVENTS = 200
"""Events per group message: a page applies a message at once, and one message per event
would cost an order of magnitude more in ``group_send``."""
MAX_PATH = 400
""":attr:`~picoflow_web.models.EventRecord.path`'s column width."""
ENDINGS = frozenset({"turn.finished", "turn.failed", "turn.cancelled", "run.interrupted"})
"""Events that end a run."""


Incoming = tuple[int, str, str, str, Mapping[str, Any]]
"""One event on its way into the store, as its source has it already: ``(seq, type, path,
text, data)``, a row of the event log as it is stored (:data:`picoflow_web.data.eventlog.Row`:
``path`` at most :data:`MAX_PATH` characters, ``text`` the event's JSON, stored and
broadcast as it is) and the event's fields. :func:`counted` reads the fields' top-level
values only (``type``, ``offset``, ``session_id``, the length of a fork's ``requests``),
and an ending's outcome (a failure's ``error``) as JSON, so a typed event's own attributes
(its ``__dict__``) serve as well, but for an event of :data:`ENDINGS`.

A plain tuple, not a class of its own: a worker's batch holds thousands, and a class's
instances would each count towards the interpreter's next garbage collection, where tuples
are reused from its free list."""


class SeqBroken(Exception):
    """The events do not continue their run's stored sequence."""

    def __init__(self, run_id: str, expected: int, seq: int) -> None:
        super().__init__(f"Run {run_id} continues at seq {expected}, not {seq}.")
        self.run_id, self.expected, self.seq = run_id, expected, seq


class NotAppended(Exception):
    """The run's row did not meet the append's ``guard``: nothing was stored."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What one append stored: the run's events, in order, and whether it ended."""

    run_id: str
    events: Sequence[Incoming]
    ended: bool = False
    summary: dict[str, object] | None = None
    """The run as the runs list shows it, when the list should hear of it (new or ended)."""


@dataclass
class Stored:
    """What a request, an import or an interruption round appended, run by run."""

    appended: list[Appended] = field(default_factory=list)
    reply: dict[str, dict[str, Any]] = field(default_factory=dict)
    """By run: its ``last_seq`` and ``status`` (ingest's reply)."""

    @property
    def events(self) -> dict[str, list[tuple[int, str]]]:
        """By run: the stored events' seq and JSON text, in order."""
        return {a.run_id: [(seq, text) for seq, _, _, text, _ in a.events]
                for a in self.appended}

    @property
    def summaries(self) -> list[dict[str, object]]:
        return [a.summary for a in self.appended if a.summary is not None]


# -- sequence continuity ---------------------------------------------------------------------


def reported_losses(events: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """The ``(first_seq, last_seq)`` ranges the ``sink.overflowed`` events among ``events``
    (their fields) say their sink dropped, sorted."""
    return sorted((int(e["first_seq"]), int(e["last_seq"]))
                  for e in events if e["type"] == "sink.overflowed")


def covered(start: int, stop: int, ranges: list[tuple[int, int]]) -> bool:
    """Whether every seq in ``start .. stop - 1`` lies in one of the sorted ``ranges``."""
    for first, last in ranges:
        if first <= start <= last:
            start = last + 1
        if start >= stop:
            return True
    return start >= stop


def check_continuity(run_id: str, expected: int, events: Sequence[Incoming]) -> None:
    """Raise :class:`SeqBroken` unless ``events`` continue at seq ``expected`` one by one,
    but for the gaps their own ``sink.overflowed`` reports account for."""
    lost: list[tuple[int, int]] | None = None
    for event in events:
        seq = event[0]
        if seq != expected:
            if lost is None:
                lost = reported_losses(event[4] for event in events)
            if seq < expected or not covered(expected, seq, lost):
                raise SeqBroken(run_id, expected, seq)
        expected = seq + 1


# -- what each event type does to its run's row ----------------------------------------------


@dataclass(slots=True)
class _Tally:
    """A run's counters while a batch of its events is counted."""

    has_conflicts: bool
    branch_count: int
    rejected_count: int
    ending: dict[str, Any] | None = None
    """The fields the batch's ending events set (its status, reply, ...), later ones
    over earlier ones."""

    def end(self, **fields: Any) -> None:
        self.ending = {**(self.ending or {}), **fields}


def _conflict(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    tally.has_conflicts = True


def _fork(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    # A wide fork's own event carries its first page; each barrier.requested the next.
    tally.branch_count += len(data["requests"])


def _rejected(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    tally.rejected_count += 1


def _finished(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    tally.end(status=Run.Status.FINISHED, reply={
        "success": data["success"], "completed": data["completed"],
        "message": data["message"], "session_id": session_id,
        "content_type": data["content_type"], "error_code": None})


def _cancelled(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    tally.end(status=Run.Status.CANCELLED, reply={
        "success": False, "completed": False, "message": f"Stopped: {data['reason']}",
        "session_id": session_id, "content_type": "text/plain",
        "error_code": "turn_cancelled"})
    who = data.get("requested_by")
    if who:
        tally.end(cancel_requested={"by": who, "at": None})


def _failed(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    error = data["error"]
    tally.end(status=Run.Status.FAILED, reply={
        "success": False, "completed": True, "message": error["message"],
        "session_id": session_id, "content_type": "text/plain", "error_code": error["code"]})


def _interrupted(tally: _Tally, data: Mapping[str, Any], session_id: str) -> None:
    tally.end(status=Run.Status.INTERRUPTED, interruption={
        "reason": data["reason"], "silent_for": data["silent_for"],
        **{key: data[key] for key in ("worker", "revision") if data.get(key) is not None}})


_Counter = Callable[[_Tally, Mapping[str, Any], str], None]
_OWN_RUN: dict[str, _Counter] = {
    "join.invalidated": _conflict,
    "barrier.forked": _fork,
    "barrier.requested": _fork,
    "branch.rejected": _rejected,
    "run.interrupted": _interrupted,
}
"""What changes a run's row beyond the counts every event changes, for a run whose turn's
end its executor records itself."""
_ANY_RUN: dict[str, _Counter] = {
    **_OWN_RUN,
    "turn.finished": _finished,
    "turn.cancelled": _cancelled,
    "turn.failed": _failed,
}


def counted(run: Run, events: Sequence[Incoming], *, now: datetime, ends_turn: bool = True,
            heard: bool = True) -> dict[str, Any]:
    """The fields of ``run``'s row once ``events`` (continuing it) are stored: its counters,
    and its end when one of them ends it (a turn's end only when ``ends_turn``; the
    dashboard's own runs record their turn's reply themselves). ``heard``: the events
    prove their executor alive (``last_seen_at``). ``run`` is not changed."""
    tally = _Tally(run.has_conflicts, run.branch_count, run.rejected_count)
    last_seq, last = events[-1][0], events[-1][4]
    session_id = last.get("session_id") or run.session_id
    duration = run.duration
    counters = _ANY_RUN if ends_turn else _OWN_RUN
    for _, kind, _, _, data in events:
        counter = counters.get(kind)
        if counter is not None:
            counter(tally, data, session_id)
        # As the run page's fold reads a turn's time: its greatest offset, which a
        # run.interrupted (declared after the silence) does not stretch.
        if kind != "run.interrupted":
            offset = data["offset"]
            if duration is None or offset > duration:
                duration = offset
    fields: dict[str, Any] = {
        "event_count": run.event_count + len(events), "last_seq": last_seq,
        "has_conflicts": tally.has_conflicts, "branch_count": tally.branch_count,
        "rejected_count": tally.rejected_count, "duration": duration}
    if session_id != run.session_id:
        fields["session_id"] = session_id
    if heard:
        fields["last_seen_at"] = now
    if tally.ending is not None:
        fields.update(tally.ending, finished_at=now)
    return fields


# -- the door --------------------------------------------------------------------------------


def append(run: Run, events: Sequence[Incoming], *, now: datetime, ends_turn: bool = True,
           heard: bool = True, new: bool = False, guard: Mapping[str, Any] | None = None,
           also: Mapping[str, Any] | None = None) -> Appended:
    """Store ``events`` of ``run`` (in order, continuing its ``last_seq``) and bring its row
    up to date, in one transaction (the caller's, when it holds one); ``run`` then holds
    the new values. What to broadcast.

    ``guard``: conditions the run's row must meet (the recorder's: still running, still its
    worker's), else :class:`NotAppended` and nothing is stored; a caller that locked the
    row needs none. ``also``: more fields to write in the same update. ``new``: the run was
    created for these events (the runs list hears of it). ``ends_turn``, ``heard``: see
    :func:`counted`. Raises :class:`SeqBroken` for events that do not continue the run,
    and :class:`django.db.IntegrityError` for a seq stored meanwhile.
    """
    if not events:
        return Appended(run.id, events)
    check_continuity(run.id, run.last_seq + 1, events)
    fields = counted(run, events, now=now, ends_turn=ends_turn, heard=heard)
    if also:
        fields.update(also)
    with transaction.atomic(savepoint=False):
        insert_rows(run.id, events)
        if not Run.objects.filter(id=run.id, **(guard or {})).update(**fields):
            raise NotAppended(run.id)
    for name, value in fields.items():
        setattr(run, name, value)
    ended = "finished_at" in fields
    return Appended(run.id, events, ended, run.summary() if new or ended else None)


# -- telling browsers ------------------------------------------------------------------------


def messages(appended: Iterable[Appended], size: int = BROADCAST_EVENTS
             ) -> list[relay.Message]:
    """What to tell browsers about what was appended: each run's events in messages of
    ``size`` events and about :data:`~picoflow_web.live.groups.MESSAGE_BYTES` at most (a
    larger event alone), as their stored text (the run socket puts it into its frame
    unparsed), then the runs list's summaries."""
    out: list[relay.Message] = []
    summaries: list[relay.Message] = []
    for done in appended:
        for chunk in _chunked(done.events, size):
            out.append(groups.events_message(
                done.run_id, RawJSON("[" + ",".join([text for _, _, _, text, _ in chunk]) + "]"),
                chunk[0][0], chunk[-1][0]))
        if done.summary is not None:
            summaries.append(groups.summary_message(done.summary))
    return out + summaries


def _chunked(events: Sequence[Incoming], size: int) -> Iterator[Sequence[Incoming]]:
    limit = groups.MESSAGE_BYTES
    for start in range(0, len(events), size):
        chunk = events[start:start + size]
        if sum(len(text) for _, _, _, text, _ in chunk) <= limit:
            yield chunk
            continue
        # A wide fork's pages (tens of KB each) come in a row: cut by size too.
        first, used = 0, 0
        for at, (_, _, _, text, _) in enumerate(chunk):
            if at > first and used + len(text) > limit:
                yield chunk[first:at]
                first, used = at, 0
            used += len(text)
        yield chunk[first:]


async def broadcast(appended: Iterable[Appended], size: int = BROADCAST_EVENTS) -> None:
    """Tell browsers (in any process: :mod:`picoflow_web.live.relay`) what was appended."""
    await relay.publish(messages(appended, size))


def broadcast_sync(appended: Iterable[Appended]) -> None:
    """:func:`broadcast` from a thread with no event loop (a worker's lease reaper)."""
    relay.publish_sync(messages(appended))


__all__ = ["BROADCAST_EVENTS", "ENDINGS", "Appended", "Incoming", "NotAppended", "SeqBroken",
           "Stored", "append", "broadcast", "broadcast_sync", "check_continuity", "counted",
           "covered", "messages", "reported_losses"]
