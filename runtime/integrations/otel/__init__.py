"""PicoFlow runs as OpenTelemetry traces: live spans on the official SDK, and the mapping.

:class:`OtelSink` (the ``otel`` extra: ``pip install "picoflow-web[otel]"``) is an event
sink that turns every run's events into spans as they happen and exports them over
OTLP/HTTP, configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables;
:class:`~runtime.engine.FlowEngine` attaches one when ``PICOFLOW_OTEL=1``::

    from runtime.integrations.otel import OtelSink

    engine = FlowEngine(flows=[MyFlow], sinks=[OtelSink()])

:mod:`~runtime.integrations.otel.spans` is the event -> span mapping itself (the standard
library alone): the dashboard's OTLP export builds its traces with it, so a run exported
later carries the spans and attributes the live sink sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .spans import KIND_CLIENT, KIND_INTERNAL, RunSpans, SpanRecord, span_id, spans_of, trace_id

if TYPE_CHECKING:
    from .sink import OtelSink, sink_from_env


def __getattr__(name: str) -> Any:
    # The sink needs the SDK; the mapping alone does not (the dashboard's export).
    if name in ("OtelSink", "sink_from_env"):
        from . import sink

        return getattr(sink, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KIND_CLIENT", "KIND_INTERNAL", "OtelSink", "RunSpans", "SpanRecord",
           "sink_from_env", "span_id", "spans_of", "trace_id"]
