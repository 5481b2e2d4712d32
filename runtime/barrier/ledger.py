"""The branch ledger: fulfilled branches of ledgered barriers, kept durably for a resume.

A barrier forked with ``run_steps(..., ledger=True)`` (or under a flow whose
``ParallelConfig.ledger`` is on) writes one :class:`LedgerEntry` per fulfilled branch: its
output, its drafts — replacements, contributions (the ones a later replacement hid too),
with their provenance, including what nested joins absorbed into it — and the tokens it
and its descendants spent, with a digest of its request. A resumed turn
(``FlowEngine.resume``) reaching the same barrier restores every branch whose key, request
index and digest match an entry into a fresh view, so the join sees exactly what it saw
the first time: same conflicts, same request-path order, same policy.

What the ledger does not hold, on purpose:

- a branch with an invalid shared mutation (or another recorded violation): it would
  invalidate the barrier again anyway, so it runs again and fails the same way;
- rejected branches: an ordinary error may not repeat, so they run again;
- anything of a branch's memory clone or private fields: neither ever publishes.

Entries are written by :class:`TurnLedger` in batches, by a pump task of each running
ledgered barrier: a branch only appends to a list, so it never waits on the store. A batch
goes once :data:`BATCH` entries wait, none came for :data:`IDLE` seconds, or its first
waited :data:`MAX_DELAY`. What is still pending when a barrier ends is not waited for
before its join: the turn writes it before its next top-level model call or save, or as
it fails or is stopped; a turn whose final save commits drops its ledger, pending entries
and all, as nothing is left to resume. So a process that dies loses the entries of at most
the last :data:`MAX_DELAY` seconds of a running barrier, or those of a barrier that ended
when the turn's code died before its next model call or save. A failed write is logged and
ends the ledger for the rest of the turn, never the turn. The store side is
:class:`LedgerWriter`, which the core's stores implement (``runtime.stores.BranchLedgerStore``).

Honest limits: a resume runs the turn's code again from where the turn began, so the code
before (and around) its barriers runs again, and so do the branches not reused: their
external effects must be idempotent (``ParallelInvocation.idempotency_key`` is stable
across a resume). The ledger never reverses an external effect. A reused branch runs no
code: nested barriers inside it are not re-entered (what they absorbed into it comes from
its entry), and it adds nothing to the session's step trail.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from .reducers import ContributionMeta
from .types import BranchResult, InvocationPath, build_frozen, format_path
from .views import BranchView, Contribution, Draft

logger = logging.getLogger("picoflow")


@dataclass(frozen=True)
class LedgerEntry:
    """One fulfilled branch of a ledgered barrier, as stored."""

    barrier: str
    """The barrier's id in its turn (``b0``, ``0/b1``)."""
    key: str
    index: int
    step: str
    digest: str
    """:func:`request_digest` of the request that ran."""
    output: Any
    writes: list[dict[str, Any]]
    """The branch's replacements and removals (own and absorbed), in view order."""
    contributions: list[dict[str, Any]]
    """Its contributions (own and absorbed), in view order."""
    overridden: list[dict[str, Any]]
    """Own contributions a later replacement of their field hid from its view."""
    tokens: dict[str, int]
    """Tokens the branch and its descendants spent (``input_tokens``, ``output_tokens``,
    ``total_tokens``)."""
    run_id: str
    """The run whose branch this was."""
    seq: int | None = None
    """The ``seq`` of its ``branch.fulfilled`` in that run (None: nothing listened)."""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> LedgerEntry:
        return cls(**json.loads(text))


class LedgerWriter(Protocol):
    """Where a turn's ledger entries go (the session store, for one turn)."""

    async def put(self, entries: Sequence[LedgerEntry]) -> None:
        """Store ``entries`` durably (an entry with the same barrier and key replaces)."""
        ...


def request_digest(step: str, params: Mapping[str, Any], message: str | None) -> str:
    """The digest of one request: its step, params and user message."""
    raw = json.dumps([step, _plain(params), message], sort_keys=True, separators=(",", ":"),
                     allow_nan=False, default=_plain)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _path(path: InvocationPath) -> list[list[int]]:
    return [[b, i] for b, i in path]


def _unpath(raw: list[list[int]]) -> InvocationPath:
    return tuple((int(b), int(i)) for b, i in raw)


def _write_record(draft: Draft) -> dict[str, Any]:
    return {"step": draft.step, "field": draft.field, "value": draft.value,
            "deleted": draft.deleted, "path": _path(draft.path), "key": draft.key,
            "base": draft.base}


def _contribution_record(item: Contribution) -> dict[str, Any]:
    return {"step": item.step, "field": item.field, "value": item.value,
            "path": _path(item.meta.path), "key": item.meta.key, "seq": item.meta.seq,
            "base": item.base}


def _contribution(raw: dict[str, Any]) -> Contribution:
    path = _unpath(raw["path"])
    meta = build_frozen(ContributionMeta, path=path, key=raw["key"], seq=raw["seq"])
    return Contribution(raw["step"], raw["field"], raw["value"], meta, raw["base"],
                        format_path(path))


def entry_of(barrier: str, view: BranchView, outcome: BranchResult, digest: str,
             run_id: str, seq: int | None) -> LedgerEntry:
    """The ledger entry of a fulfilled branch, from its view as the join will read it."""
    return LedgerEntry(
        barrier=barrier, key=view.key, index=view.index, step=outcome.step, digest=digest,
        output=outcome.output,
        writes=[_write_record(w) for w in view.all_writes()],
        contributions=[_contribution_record(c) for fields in view.contributions.values()
                       for items in fields.values() for c in items],
        overridden=[_contribution_record(c) for c in view.overridden],
        tokens=dict(view.tokens or _NO_TOKENS), run_id=run_id, seq=seq)


def restore(view: BranchView, entry: LedgerEntry) -> None:
    """Put a ledgered branch's drafts into its fresh view, as its run had left them."""
    view.own()
    for raw in entry.writes:
        draft = Draft(raw["step"], raw["field"], raw["value"], raw["deleted"],
                      _unpath(raw["path"]), raw["key"], raw["base"])
        view.writes.setdefault(draft.step, {})[draft.field] = draft
    for raw in entry.contributions:
        item = _contribution(raw)
        view.contributions.setdefault(item.step, {}).setdefault(item.field, []).append(item)
    view.overridden.extend(_contribution(raw) for raw in entry.overridden)


@dataclass(eq=False)
class TurnLedger:
    """The ledger of one turn: the entries a resume may reuse, and the writes pending.

    ``known`` holds the entries the turn was resumed with, by barrier then key. New
    entries are appended to ``pending`` (never awaited by the branch) and written by
    :meth:`pump` / :meth:`flush`, one batch per store write.
    """

    writer: LedgerWriter
    run_id: str
    """The run writing entries now."""
    resumes: str | None = None
    """The run this turn resumes, when it is a resume."""
    known: dict[str, dict[str, LedgerEntry]] = field(default_factory=dict)
    pending: list[LedgerEntry] = field(default_factory=list)
    written: int = 0
    failed: BaseException | None = None
    """The first store error; the turn goes on without a ledger from then on."""
    opened: bool = False
    """Whether the turn's record is stored (a turn opens it at its first ledgered fork)."""
    _wake: anyio.Event | None = None
    _lock: anyio.Lock | None = None

    @classmethod
    def resuming(cls, writer: LedgerWriter, run_id: str, resumes: str,
                 entries: Sequence[LedgerEntry]) -> TurnLedger:
        ledger = cls(writer, run_id, resumes, opened=True)
        for entry in entries:
            ledger.known.setdefault(entry.barrier, {})[entry.key] = entry
        return ledger

    def reusable(self, barrier: str) -> Mapping[str, LedgerEntry]:
        """The entries of one barrier (by branch key) a resumed turn may reuse."""
        return self.known.get(barrier, _NONE)

    def add(self, entry: LedgerEntry) -> None:
        """Queue one entry for the next batch (synchronous: a branch never waits here)."""
        if self.failed is not None:
            return
        self.pending.append(entry)
        if self._wake is not None:
            self._wake.set()

    async def pump(self) -> None:
        """Write batches as entries arrive, until cancelled: a batch goes once
        :data:`BATCH` entries wait, or none came for :data:`IDLE` seconds, or its first
        has waited :data:`MAX_DELAY` (each write is shielded, so cancelling the pump never
        loses a batch half-way). A burst of branches ending together is one batch, and
        one that ends with its barrier is left to the turn (see the module docstring)."""
        while True:
            if not self.pending:
                # Pumps of concurrent ledgered barriers share one event: every one wakes.
                if self._wake is None or self._wake.is_set():
                    self._wake = anyio.Event()
                await self._wake.wait()
            first, seen = anyio.current_time(), len(self.pending)
            while len(self.pending) < BATCH:
                await anyio.sleep(IDLE)
                if len(self.pending) == seen or anyio.current_time() - first >= MAX_DELAY:
                    break
                seen = len(self.pending)
            await self.flush()

    async def flush(self) -> None:
        """Write every pending entry now."""
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            while self.pending and self.failed is None:
                batch, self.pending = self.pending, []
                with anyio.CancelScope(shield=True):
                    try:
                        await self.writer.put(batch)
                    except Exception as exc:
                        self.failed = exc
                        logger.warning("The branch ledger of run %s stopped: %s; the turn "
                                       "goes on, but a resume will run its branches again.",
                                       self.run_id, exc)
                        return
                self.written += len(batch)


_NONE: Mapping[str, LedgerEntry] = {}
_NO_TOKENS: Mapping[str, int] = {}

BATCH = 2048
"""Entries that make a batch go at once (a wide fan-out's burst of branches ending
together is written in a few batches, not in one per handful)."""
IDLE = 0.02
"""Seconds without a new entry after which the pending ones are written."""
MAX_DELAY = 0.25
"""The longest an entry waits for its batch while branches keep ending."""
