"""State changes: ``state.replaced``, ``state.removed`` and ``state.contributed``.

Canonical state starts from ``session.loaded`` and changes by the non-draft ones. A draft
(written inside a branch) goes to its invocation's changes instead, where its view and its
siblings' lists of what they could not see read it; a draft on an invocation no fork
announced is an anomaly. A contribution's event carries the field's resulting value, or
names its built-in channel and the fold reduces it onto the view's value before
(:mod:`.reduce`). A fold without drafts skips drafts before reducing them.
"""

from __future__ import annotations

from typing import Any

from .. import schema as ev
from .model import Handlers, Invocation, RunModel, anomaly, set_field
from .reduce import reduced


def _change(run: RunModel, event: ev.StateReplaced | ev.StateRemoved | ev.StateContributed,
            inv: Invocation | None, value: Any, deleted: bool) -> None:
    if not event.draft:
        set_field(run.state, event.step, event.field, value, deleted)
    elif inv is not None:
        change = (event.seq, event.step, event.field, value, deleted)
        inv.changes.append(change)
        inv.drafts.append(change)
    else:
        anomaly(run, event, f"draft on unknown invocation {event.path}")


def _replaced(run: RunModel, event: ev.StateReplaced, inv: Invocation | None) -> None:
    if event.draft and not run.drafts:
        return
    _change(run, event, inv, event.value, False)


def _removed(run: RunModel, event: ev.StateRemoved, inv: Invocation | None) -> None:
    if event.draft and not run.drafts:
        return
    _change(run, event, inv, None, True)


def _contributed(run: RunModel, event: ev.StateContributed, inv: Invocation | None) -> None:
    if event.draft and not run.drafts:
        return
    value = event.result if event.channel is None or inv is None or not event.draft \
        else reduced(run, inv, event)
    _change(run, event, inv, value, False)


HANDLERS: Handlers = {
    "state.replaced": _replaced,
    "state.removed": _removed,
    "state.contributed": _contributed,
}
