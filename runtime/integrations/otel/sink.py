"""OtelSink: a run's events as OpenTelemetry spans while it runs, on the official SDK.

The sink owns a :class:`~opentelemetry.sdk.trace.TracerProvider` (resource
``service.name``: ``OTEL_SERVICE_NAME``, default ``picoflow``) with the span processors it
is given, by default one :class:`BatchSpanProcessor` around the SDK's own
:class:`OTLPSpanExporter`, which reads the standard ``OTEL_EXPORTER_OTLP_*`` variables.
:func:`sink_from_env` is what :class:`~runtime.engine.FlowEngine` attaches when
``PICOFLOW_OTEL=1``.

:meth:`OtelSink.receive` only queues the event (a span processor may export in the
caller's thread, as ``SimpleSpanProcessor`` does); one thread of the sink maps the events
(:mod:`runtime.integrations.otel.spans`) and starts and ends the SDK spans, with the
events' own times. A full queue drops events and reports them, as every runtime sink
does (the bus then emits ``sink.overflowed``), but for the event that ends a turn: it
gets in, ends the run's open spans and carries the report. The trace id is the run id,
so a run and its trace are found by one id; span ids derive from it as in the dashboard's
export.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import threading
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

from runtime.events import Event

from .spans import KIND_CLIENT, TURN_ENDS, RunSpans, SpanRecord, maps, span_id, trace_id

SCOPE = "runtime.integrations.otel"
DEFAULT_SERVICE = "picoflow"
_STOP = object()


class _RunIds(IdGenerator):
    """The ids the sink's thread sets right before it starts each span."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


def _nanos(at: float | None) -> int:
    return int((at or 0.0) * 1e9)


def _attribute(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return json.dumps(value, default=str)


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _attribute(value) for name, value in values.items()}


class OtelSink:
    """Turns every run's events into spans as they happen (see the module docstring).

    Args:
        processors: span processors of the sink's provider (default: a
            ``BatchSpanProcessor(OTLPSpanExporter())``).
        service_name: the resource's ``service.name`` (default: ``OTEL_SERVICE_NAME``,
            else ``picoflow``).
        capacity: events queued before the sink drops (and reports) what comes.
    """

    name = "otel"

    def __init__(self, *processors: SpanProcessor, service_name: str | None = None,
                 capacity: int = 65536) -> None:
        service = service_name or os.environ.get("OTEL_SERVICE_NAME", "").strip() \
            or DEFAULT_SERVICE
        self._ids = _RunIds()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}),
                                       id_generator=self._ids)
        if not processors:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processors = (BatchSpanProcessor(OTLPSpanExporter()),)
        for processor in processors:
            self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer(SCOPE)
        self.capacity = capacity
        self._queue: queue.Queue[Any] = queue.Queue()
        self._dropped: tuple[int, int] | None = None
        self._runs: dict[str, tuple[RunSpans, dict[str, trace_api.Span]]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="picoflow-otel", daemon=True)
        self._thread.start()
        atexit.register(self.flush)

    # -- the bus's side: never waits -----------------------------------------------------

    def receive(self, event: Event) -> tuple[int, int] | None:
        if not maps(event.type) or self._closed:
            return None
        # The event that ends a turn always gets in: it ends the run's spans still open
        # and reports what was dropped while the run can still carry the report.
        if self._queue.qsize() >= self.capacity and event.type not in TURN_ENDS:
            first = self._dropped[0] if self._dropped else event.seq
            self._dropped = (first, event.seq)
            return None
        self._queue.put_nowait(event)
        dropped, self._dropped = self._dropped, None
        return dropped

    # -- the sink's thread ---------------------------------------------------------------

    def _work(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is _STOP:
                    return
                self._apply(event)
            except Exception:  # one bad event must not stop the spans of every run
                pass
            finally:
                self._queue.task_done()

    def _apply(self, event: Event) -> None:
        entry = self._runs.get(event.run_id)
        if entry is None:
            entry = self._runs[event.run_id] = (RunSpans(event.run_id), {})
        run, live = entry
        changes = run.add(event.model_dump(mode="json"))
        for record in changes.opened:
            live[record.key] = self._start(run, record, live)
        for record in changes.ended:
            span = live.pop(record.key, None)
            if span is not None:
                self._end(record, span)
        if run.ended:
            del self._runs[event.run_id]

    def _start(self, run: RunSpans, record: SpanRecord,
               live: dict[str, trace_api.Span]) -> trace_api.Span:
        parent = live.get(record.parent) if record.parent else None
        context = trace_api.set_span_in_context(parent) if parent is not None else Context()
        self._ids.trace_id = int.from_bytes(trace_id(run.run_id), "big")
        self._ids.span_id = int.from_bytes(span_id(run.run_id, record.key), "big")
        return self._tracer.start_span(
            record.name, context=context,
            kind=SpanKind.CLIENT if record.kind == KIND_CLIENT else SpanKind.INTERNAL,
            attributes=_attributes(record.attributes), start_time=_nanos(record.start))

    def _end(self, record: SpanRecord, span: trace_api.Span) -> None:
        span.set_attributes(_attributes(record.attributes))
        for at, name, details in record.events:
            span.add_event(name, _attributes(details), timestamp=_nanos(at))
        if record.error:
            span.set_status(Status(StatusCode.ERROR, record.error))
        else:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=_nanos(record.end if record.end is not None else record.start))

    # -- flushing ------------------------------------------------------------------------

    def flush(self, timeout_millis: int = 30000) -> bool:
        """Map everything queued, then push the spans out (the processors' force_flush)."""
        if self._thread.is_alive():
            self._queue.join()
        return self.provider.force_flush(timeout_millis)

    def close(self) -> None:
        """Flush, stop the sink's thread and shut the provider down (idempotent)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.flush)
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()
        self.provider.shutdown()


def sink_from_env(environ: Mapping[str, str] = os.environ) -> OtelSink | None:
    """An :class:`OtelSink` exporting over OTLP/HTTP when ``PICOFLOW_OTEL`` is on
    (``1``, ``true``, ``yes``, ``on``), else None. The exporter and the service name come
    from the standard ``OTEL_*`` variables."""
    if environ.get("PICOFLOW_OTEL", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    return OtelSink(service_name=environ.get("OTEL_SERVICE_NAME", "").strip() or None)


__all__ = ["OtelSink", "sink_from_env"]
