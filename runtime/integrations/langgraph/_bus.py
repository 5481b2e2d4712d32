"""The event bus of a traced invocation: it stamps events with recorded times."""

from __future__ import annotations

from typing import Any

from runtime import events as ev


class ReplayBus(ev.EventBus):
    """An :class:`~runtime.events.EventBus` that can stamp an event with a recorded time:
    a superstep's events go out when it closes, stamped when their callbacks fired."""

    last_at: float = 0.0
    """The last offset :meth:`emit_at` stamped."""

    def emit_at(self, at: float, cls: type[Any], path: str, **fields: Any) -> None:
        """Emit like :meth:`emit`, its ``offset`` the monotonic time ``at`` less the run's
        start (never before the last one it stamped, so offsets follow seq)."""
        if not self.sinks:
            return
        offset = self.last_at = max(at - self._start, self.last_at)
        event: Any = ev.build(cls, {
            "v": ev.SCHEMA_VERSION, "run_id": self.run_id, "session_id": self.session_id,
            "seq": self.seq, "time": self._wall + offset, "offset": offset, "path": path,
            **fields, "type": cls.model_fields["type"].default})
        self.seq += 1
        self.deliver(event)
