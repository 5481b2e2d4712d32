"""A small agent instrumented only with the OpenTelemetry SDK: no PicoFlow import.

It plans a trip as an agent would: six tool calls at once (threads, each its own span
under the agent's span, as the GenAI semantic conventions name them: ``execute_tool
<tool>``), then one chat model call (``chat <model>``) with its token usage and messages.
The spans leave its process through the SDK's OTLP/HTTP exporter, configured only by the
standard variables, so any OTLP endpoint takes them; the dashboard's is ``/v1/traces``::

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:8000 \\
    OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer <ingest token>" \\
    python -m picoflow_web.demos.otel_agent

It prints the trace id (the dashboard's run id) and the run's page. The model is simulated
(no API key, no network but the exporter's): the point is the shape of the trace.
Needs ``pip install "picoflow-web[otel]"`` (``opentelemetry-sdk`` and
``opentelemetry-exporter-otlp-proto-http``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode

SERVICE = "trip-planner"
MODEL = "gpt-4o-mini"

TOOLS: tuple[tuple[str, dict[str, str], str, float], ...] = (
    # (tool, its arguments, what it answers, how long it takes in units)
    ("search_flights", {"to": "LIS", "when": "Friday"}, "3 flights from 212 EUR", 3.0),
    ("search_hotels", {"city": "Lisbon", "nights": "2"}, "5 hotels under 150 EUR a night", 4.0),
    ("weather_forecast", {"city": "Lisbon"}, "sunny, 24 °C", 1.0),
    ("currency_rates", {"from": "EUR", "to": "USD"}, "1 EUR = 1.08 USD", 0.5),
    ("local_events", {"city": "Lisbon", "when": "weekend"}, "jazz festival on Saturday", 2.0),
    ("visa_rules", {"country": "PT"}, "no visa needed", 1.5),
)


class Shipped(SpanExporter):
    """The exporter it was given, remembering whether every export succeeded: the demo
    says so at the end (the SDK itself only logs a refused export)."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.failed += 1
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def run_tool(tracer: trace.Tracer, parent: context.Context, together: threading.Barrier,
             index: int, unit: float) -> str:
    """One tool call, in a thread of the pool: its span is a child of the agent's span
    (a pool thread does not inherit the caller's context: it is passed in). The tools
    start their work together, so the six spans overlap however the threads are run."""
    name, arguments, answer, units = TOOLS[index]
    with tracer.start_as_current_span(f"execute_tool {name}", context=parent,
                                      kind=SpanKind.INTERNAL) as span:
        together.wait()
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", name)
        span.set_attribute("gen_ai.tool.call.id", f"call_{index + 1}")
        span.set_attribute("gen_ai.tool.type", "function")
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
        time.sleep(units * unit)  # the tool's work
        span.set_attribute("gen_ai.tool.call.result", answer)
        return answer


def chat(tracer: trace.Tracer, question: str, facts: list[str], unit: float) -> str:
    """The model call that writes the plan (simulated), with its usage and messages."""
    prompt = [{"role": "system", "parts": [{"type": "text", "content": "Plan the trip."}]},
              {"role": "user", "parts": [{"type": "text", "content": question}]},
              {"role": "tool", "parts": [{"type": "text", "content": "; ".join(facts)}]}]
    reply = ("Fly out Friday (212 EUR), stay at the cheapest of the 5 hotels, "
             "and catch the jazz festival on Saturday.")
    with tracer.start_as_current_span(f"chat {MODEL}", kind=SpanKind.CLIENT) as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "openai")
        span.set_attribute("gen_ai.system", "openai")
        span.set_attribute("gen_ai.request.model", MODEL)
        span.set_attribute("gen_ai.input.messages", json.dumps(prompt))
        time.sleep(2 * unit)  # the model's latency
        span.set_attribute("gen_ai.response.model", MODEL)
        span.set_attribute("gen_ai.response.finish_reasons", ["stop"])
        span.set_attribute("gen_ai.usage.input_tokens", 412)
        span.set_attribute("gen_ai.usage.output_tokens", 38)
        span.set_attribute("gen_ai.output.messages", json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": reply}],
              "finish_reason": "stop"}]))
    return reply


def plan_trip(tracer: trace.Tracer, question: str, unit: float) -> tuple[str, str]:
    """The agent: its span, six concurrent tool spans, one chat span. (trace id, reply)."""
    with tracer.start_as_current_span(f"invoke_agent {SERVICE}") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", SERVICE)
        agent.set_attribute("input.value", question)  # OpenInference's: the turn's message
        parent = context.get_current()
        together = threading.Barrier(len(TOOLS))
        with ThreadPoolExecutor(max_workers=len(TOOLS)) as pool:
            facts = list(pool.map(lambda i: run_tool(tracer, parent, together, i, unit),
                                  range(len(TOOLS))))
        reply = chat(tracer, question, facts, unit)
        agent.set_attribute("output.value", reply)
        agent.set_status(Status(StatusCode.OK))
        return format(agent.get_span_context().trace_id, "032x"), reply


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--unit", type=float, default=0.1,
                        help="seconds of one unit of simulated work (default 0.1)")
    parser.add_argument("--question", default="Plan a weekend in Lisbon for two.")
    args = parser.parse_args(argv)
    service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE
    # The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT (adding /v1/traces) and _HEADERS.
    shipped = Shipped(OTLPSpanExporter())
    provider = TracerProvider(resource=Resource.create({
        "service.name": service, "host.name": socket.gethostname(), "process.pid": os.getpid()}))
    provider.add_span_processor(BatchSpanProcessor(shipped))
    tracer = provider.get_tracer("picoflow.demos.otel_agent")
    trace_id, reply = plan_trip(tracer, args.question, args.unit)
    provider.shutdown()  # flushes the batch
    print(reply)
    print(f"run: {trace_id}")
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/")
    if endpoint:
        print(f"page: {endpoint}/runs/{trace_id}/")
    if shipped.failed:
        print(f"{shipped.failed} export(s) of spans failed: is OTEL_EXPORTER_OTLP_ENDPOINT the "
              "dashboard, and OTEL_EXPORTER_OTLP_HEADERS an ingest token's "
              "'Authorization=Bearer <token>'?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
