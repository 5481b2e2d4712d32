"""Publications: what became of each invocation's writes, and of each barrier's join.

Read from the joins' publication records (``join.published``: which fields it applied and
whom each came from; what it discarded and why) and those of the joins above them, and
from the run's end when a join never ran. Derived when asked, not by a handler: the
browser's fold derives the same (``publicationOf``) and the golden exports compare them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .model import Applied, Barrier, Invocation, RunModel, path_depth


def applied_index(barrier: Barrier) -> dict[str, list[Applied]]:
    """Who each applied field of a join's record came from, indexed under every path from
    the branch down to the writer, so "did anything of ``path`` publish" is one lookup for
    a branch and for any of its descendants. A contribution counts only when the record
    lists its field: a reduction alone publishes nothing."""
    index: dict[str, list[Applied]] = {}
    depth = path_depth(barrier.caller) + 1

    def add(item: Applied) -> None:
        parts = item.origin.split(".")
        for n in range(depth, len(parts) + 1):
            index.setdefault(".".join(parts[:n]), []).append(item)

    listed = set()
    for f in barrier.published:
        listed.add((f["step"], f["field"]))
        if f.get("writer"):
            add(Applied(f["step"], f["field"], "removal" if f.get("deleted") else "replacement",
                        str(f["writer"])))
    for r in barrier.reductions:
        if (r["step"], r["field"]) in listed:
            for item in r.get("inputs") or []:
                path = item.get("path") if isinstance(item, dict) else None
                if isinstance(path, str):  # a foreign record without one names nobody
                    add(Applied(r["step"], r["field"], "contribution", path))
    return index


@dataclass(frozen=True)
class Publication:
    """What became of an invocation's writes (or a barrier's join), from the join's
    publication record and those of the joins above it.

    ``state`` is ``pending`` (its join has not run), ``scoped`` (applied into the caller's
    private scope, whose own join has not decided yet), ``published`` (``fields`` reached
    the canonical state; in memory only when a stopped turn never saved them, as ``text``
    says), ``nothing`` (kept, but no field of the record came from it) or
    ``discarded``, with ``reason`` one of ``rejected``, ``cancelled``, ``late``, ``atomic``,
    ``invalidated``, ``rollback``, ``caller``, ``not-joined`` or ``discarded`` (a reason
    this fold does not know), and ``text`` the same in words. The browser's fold derives
    the same (``publicationOf`` in ``fold/publication.js``); the golden exports compare
    them."""

    state: str
    reason: str | None
    text: str
    fields: tuple[Applied, ...] = ()
    via: str | None = None
    """The caller whose fate decided it."""

    def as_dict(self) -> dict[str, Any]:
        """The shape of the browser's ``Publication``."""
        return {"state": self.state, "reason": self.reason, "text": self.text,
                "fields": [{"step": f.step, "field": f.field, "kind": f.kind,
                            "origin": f.origin} for f in self.fields],
                "via": self.via}


_KEPT_NOTHING = "Its join kept it, but it wrote nothing that was published."
_CANONICAL = "Published into the canonical session state."
_UNSAVED = "Published in memory, not saved: the turn was stopped."


def _canonical(run: RunModel, fields: tuple[Applied, ...]) -> str:
    """The words for a publication into the canonical state: a stopped turn never saved
    what it published after its last save (:attr:`~.model.RunModel.unsaved`)."""
    if run.unsaved:
        unsaved = {(u["step"], u["field"]) for u in run.unsaved}
        if any((f.step, f.field) in unsaved for f in fields):
            return _UNSAVED
    return _CANONICAL


def publication_of(run: RunModel, path: str) -> Publication | None:
    """The publication of invocation ``path`` (None for the turn, or a path no fork
    announced)."""
    inv = run.invocations.get(path)
    if path == "" or inv is None or inv.barrier is None:
        return None
    barrier = run.barriers.get(inv.barrier)
    if barrier is None:
        return None
    verdict = _join_verdict(run, barrier)
    if verdict is not None:
        return verdict
    entry = barrier.discarded_at.get(inv.index)
    if entry is not None:
        return _discarded_branch(inv, entry)
    if inv.status != "fulfilled":
        return Publication("discarded", "rejected", f"Discarded: it ended {inv.status} and its "
                           "join keeps only fulfilled branches.")
    applied = tuple(barrier.applied.get(path, ()))
    if barrier.target == "caller-scope":
        caller = publication_of(run, barrier.caller)
        caller_inv = run.invocations.get(barrier.caller)
        who = _caller_name(run, barrier.caller)
        if caller is not None and caller.state == "discarded":
            why = _unprefixed(caller.text)
            how = (f"failed after this join: {why}"
                   if caller_inv is not None and caller_inv.status == "rejected"
                   else f"was discarded{' ' if why.startswith('by ') else ': '}{why}")
            return Publication("discarded", "caller", f"Discarded with its caller: {who} {how}",
                               via=barrier.caller)
        if not applied:
            return Publication("nothing", None, _KEPT_NOTHING)
        if caller is None or caller.state in ("pending", "scoped"):
            return Publication("scoped", None, f"Published into the scope of its caller {who}; "
                               "its caller's join has not run yet.", applied, barrier.caller)
        root = _canonical_record(run, barrier)
        reached = tuple(root.applied.get(path, ())) if root is not None else ()
        if not reached:
            return Publication("discarded", "caller", "Discarded: its caller's join published "
                               "none of it.", via=barrier.caller)
        return Publication("published", None, _canonical(run, reached), reached,
                           barrier.caller)
    if not applied:
        return Publication("nothing", None, _KEPT_NOTHING)
    return Publication("published", None, _canonical(run, applied), applied)


def _unprefixed(text: str) -> str:
    """A caller's reason, to quote inside its descendants' own sentence."""
    return re.sub(r"^Discarded:? ", "", text)


def _canonical_record(run: RunModel, barrier: Barrier) -> Barrier | None:
    """The join above ``barrier`` (or itself) that published into the canonical state."""
    current: Barrier | None = barrier
    while current is not None and current.outcome == "published":
        if current.target == "canonical":
            return current
        caller = run.invocations.get(current.caller)
        if caller is None or caller.barrier is None:
            return None
        current = run.barriers.get(caller.barrier)
    return None


def _join_verdict(run: RunModel, barrier: Barrier) -> Publication | None:
    """What a join that did not publish means for every branch of it."""
    if barrier.outcome == "open":
        if run.status == "running":
            return Publication("pending", None, "Its join has not run yet.")
        why = {"interrupted": "the run was interrupted",
               "cancelled": "the turn was stopped"}.get(run.status, f"the turn {run.status}")
        return Publication("discarded", "not-joined", f"Discarded: {why} before its join ran.")
    if barrier.outcome == "invalidated":
        if barrier.checkpoint_failed:
            return Publication("discarded", "rollback", "Discarded: the root-join checkpoint "
                               "failed and the join's publication was rolled back.")
        code = (barrier.error or {}).get("code") or "conflict"
        return Publication("discarded", "invalidated", f"Discarded: the join was invalidated "
                           f"({code}), so no branch published.")
    return None


def _discarded_branch(inv: Invocation, entry: dict[str, Any]) -> Publication:
    """Why the record discarded a branch: in its words where it has them (``atomic: ...``),
    from the branch's own events where it says only ``rejected``."""
    reason = str(entry.get("reason") or "")
    if reason.startswith("atomic"):
        detail = re.sub(r"^atomic:?\s*", "", reason)
        return Publication("discarded", "atomic", "Discarded by the atomic policy"
                           + (f": {detail}" if detail else "")
                           + "; an atomic batch publishes nothing when any branch is rejected.")
    if reason == "rejected":
        if inv.lost_rights:
            return Publication("discarded", "late", "Discarded: still running when the "
                               "cancellation grace period ended, it lost its publication rights.")
        if inv.cancelled and (inv.error or {}).get("type") == "BranchBudgetError":
            return Publication("discarded", "cancelled", "Discarded: the barrier's token budget "
                               "ran out, so it lost its publication rights.")
        if inv.cancelled:
            return Publication("discarded", "cancelled", "Discarded: cancelled before it started."
                               if inv.started is None else "Discarded: cancelled while it ran.")
        error = ""
        if inv.error:
            error = f"{inv.error.get('type') or 'Error'}: {inv.error.get('message') or ''}".strip()
        return Publication("discarded", "rejected", "Discarded: it was rejected"
                           + (f" ({error})" if error else "") + ".")
    return Publication("discarded", "discarded",
                       f"Discarded: {reason or 'the join did not say why'}.")


def barrier_publication_of(run: RunModel, barrier_id: str) -> dict[str, Any] | None:
    """A barrier's publication (:meth:`Publication.as_dict`) with ``counts``: how many of its
    branches ended in each publication state. None for an unknown barrier."""
    barrier = run.barriers.get(barrier_id)
    if barrier is None:
        return None
    counts = dict.fromkeys(("pending", "scoped", "published", "nothing", "discarded"), 0)
    if barrier.outcome == "open" and run.status == "running":
        counts["pending"] = len(barrier.branches)
    else:
        for path in barrier.branches:
            if (found := publication_of(run, path)) is not None:
                counts[found.state] += 1
    return {**_barrier_publication(run, barrier).as_dict(), "counts": counts}


def _barrier_publication(run: RunModel, barrier: Barrier) -> Publication:
    verdict = _join_verdict(run, barrier)
    if verdict is not None:
        return Publication(verdict.state, verdict.reason,
                           re.sub(r"^Discarded: ", "Nothing published: ", verdict.text))
    fields = tuple(Applied(f["step"], f["field"], "removal" if f.get("deleted") else
                           "replacement", f.get("writer") or "") for f in barrier.published)
    if not fields:
        if barrier.policy == "atomic" and any(str(d.get("reason")).startswith("atomic")
                                              for d in barrier.discarded):
            text = ("Nothing published: the atomic policy discarded every branch because one "
                    "was rejected.")
        elif len(barrier.discarded) >= len(barrier.branches):
            text = "Nothing published: every branch was discarded."
        else:
            text = "Nothing published: no branch wrote anything."
        return Publication("nothing", "discarded" if barrier.discarded else None, text)
    if barrier.target == "caller-scope":
        caller = publication_of(run, barrier.caller)
        where = f"Published into the scope of {_caller_name(run, barrier.caller)}"
        if caller is not None and caller.state == "discarded":
            return Publication("discarded", "caller",
                               f"{where}, then discarded with it: {_unprefixed(caller.text)}",
                               via=barrier.caller)
        if caller is None or caller.state in ("pending", "scoped"):
            return Publication("scoped", None, f"{where}; its join has not run yet.", fields,
                               barrier.caller)
        if caller.state == "nothing":
            return Publication("discarded", "caller", f"{where}, whose join published none of "
                               "it.", via=barrier.caller)
        return Publication("published", None, f"{where}, and from there into the canonical "
                           "state.", fields, barrier.caller)
    return Publication("published", None, _canonical(run, fields), fields)


def _caller_name(run: RunModel, path: str) -> str:
    """A caller as sentences name it: its branch key (or step) and its path, "news (0.1)"."""
    inv = run.invocations.get(path)
    return f"{inv.key or inv.step} ({path})" if inv is not None else path
