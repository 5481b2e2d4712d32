"""Model and tool calls: what the run model keeps of them is the tokens they used.

The browser's fold keeps every call for the page to draw; this one needs only the
totals, per run and per invocation.
"""

from __future__ import annotations

from .. import schema as ev
from .model import Handlers, Invocation, RunModel


def _model_finished(run: RunModel, event: ev.ModelFinished, inv: Invocation | None) -> None:
    run.tokens = {k: run.tokens.get(k, 0) + n for k, n in (
        ("input_tokens", event.input_tokens), ("output_tokens", event.output_tokens),
        ("total_tokens", event.total_tokens))}
    if inv is not None:
        inv.tokens += event.total_tokens


HANDLERS: Handlers = {
    "model.finished": _model_finished,
}
