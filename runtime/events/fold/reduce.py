"""A contribution whose event names its channel, reduced onto the contributor's view.

Such an event carries the contribution, not the field (carrying the field would make each
contribution cost the field's size): the fold reads the field as the contributor saw it
just before (:func:`.views.field_at`) and applies the channel's rule from
:mod:`runtime.events.channels`, the same rules a join applies. A value the rule refuses
(a corrupt or foreign trace) is an anomaly, and the draft's value is null.
"""

from __future__ import annotations

from typing import Any

from .. import schema as ev
from ..channels import ChannelError, reduce_one
from .model import Invocation, RunModel, anomaly
from .views import field_at


def reduced(run: RunModel, inv: Invocation, event: ev.StateContributed) -> Any:
    """The field's value in ``inv``'s view after contribution ``event``."""
    present, before = field_at(run, inv.path, event.step, event.field, event.seq)
    try:
        return reduce_one(str(event.channel), present, before, event.value, inv.key)
    except ChannelError as exc:
        anomaly(run, event, f"contribution to {event.step}.{event.field}: {exc.rule}")
        return None
