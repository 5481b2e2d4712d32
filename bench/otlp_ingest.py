"""OTLP receiver benchmark: spans per second accepted by ``POST /v1/traces``, against our own
ingest (``POST /api/ingest``) of the same run as events.

Measured in the same run, against the same Daphne process:

* **otlp**: one trace of ``--spans`` spans (an agent span whose children are tool spans in
  overlapping groups of ``--fanout``, each with a chat span inside it, as
  ``picoflow_web/demos/otel_agent.py`` shapes them), made with the OpenTelemetry SDK
  beforehand and encoded as its OTLP/HTTP exporter encodes them; sent as protobuf in
  requests of ``--batch`` spans (the ``BatchSpanProcessor``'s default, 512), children
  first and the root last as a batch processor sends them, one request after another. The
  clock runs from the first request to the last answer (every span stored and its run's
  events derived); a fresh trace id per round.
* **ingest**: the events the receiver derived for that trace (read back once from the
  API), under a fresh run id per round, sent to ``/api/ingest`` as NDJSON in requests of
  ``--events-batch`` events (``DashboardSink``'s 500), one after another.

Both count the trace's spans per second; the ratio is the median of per-round ratios
(otlp / ingest) with their quartiles, rounds interleaved, a collection before each variant
(``bench/ratios.py``). Daphne runs with ``PICOFLOW_DEBUG=0`` on SQLite.

    .venv/bin/python bench/otlp_ingest.py [--spans 2000] [--reps 5] [--batch 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.ratios import interleaved, ratio, spread  # noqa: E402
from bench.stream import Server, served  # noqa: E402

CREDENTIALS = """
import json
from django.contrib.auth import get_user_model
from picoflow_web.models import ApiToken
user, _ = get_user_model().objects.get_or_create(  # may use every project
    username="bench", defaults={"is_superuser": True, "is_staff": True})
print(json.dumps({"ingest": ApiToken.issue(user, "bench-ingest", ("ingest",))[1],
                  "read": ApiToken.issue(user, "bench-read", ("read",))[1]}))
"""

PROTOBUF = "application/x-protobuf"


def make_trace(spans: int, fanout: int) -> list[Any]:
    """One finished trace of ``spans`` spans (the SDK's ``ReadableSpan``), children first."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import set_span_in_context

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({
        "service.name": "bench-agent", "host.name": "bench", "process.pid": os.getpid()}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench.otlp_ingest")
    ms = 1_000_000
    t = time.time_ns()
    root = tracer.start_span("invoke_agent bench-agent", start_time=t,
                             attributes={"gen_ai.operation.name": "invoke_agent"})
    under_root = set_span_in_context(root)
    pairs = max(1, (spans - 1) // 2)  # a tool span and its chat span
    for first in range(0, pairs, fanout):
        group = range(first, min(pairs, first + fanout))
        begin = t + 1 + first // fanout * 20 * ms  # each group after the one before
        for i in group:
            start = begin + (i - first) * 1000
            tool = tracer.start_span(f"execute_tool tool_{i}", context=under_root,
                                     start_time=start, attributes={
                                         "gen_ai.operation.name": "execute_tool",
                                         "gen_ai.tool.name": f"tool_{i}",
                                         "gen_ai.tool.call.id": f"call_{i}",
                                         "gen_ai.tool.call.result": f"result {i}"})
            chat = tracer.start_span("chat bench-model", context=set_span_in_context(tool),
                                     start_time=start + ms, attributes={
                                         "gen_ai.operation.name": "chat",
                                         "gen_ai.request.model": "bench-model",
                                         "gen_ai.usage.input_tokens": 100,
                                         "gen_ai.usage.output_tokens": 20})
            chat.end(end_time=start + 5 * ms)
            tool.end(end_time=start + 10 * ms + (i % 7) * ms)
    root.end(end_time=t + (pairs // fanout + 2) * 20 * ms)
    provider.shutdown()
    return list(memory.get_finished_spans())


def encoded_batches(spans: list[Any], batch: int) -> list[Any]:
    """The ``ExportTraceServiceRequest`` of each request, as the SDK's exporter makes it."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return [encode_spans(spans[i:i + batch]) for i in range(0, len(spans), batch)]


def with_trace_id(requests: list[Any], trace_id: bytes) -> list[bytes]:
    """The requests' bodies with every span moved into trace ``trace_id`` (a new run)."""
    bodies = []
    for request in requests:
        copy = type(request)()
        copy.CopyFrom(request)
        for resource in copy.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    span.trace_id = trace_id
        bodies.append(copy.SerializeToString())
    return bodies


def post(base: str, path: str, token: str, body: bytes, content_type: str,
         headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(base + path, data=body, method="POST", headers={
        "Content-Type": content_type, "Authorization": f"Bearer {token}", **(headers or {})})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return bytes(answer.read())


def send_otlp(server: Server, token: str, bodies: list[bytes]) -> float:
    """Send the requests one after another; the seconds they took. A span refused fails
    the benchmark."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    start = time.perf_counter()
    for body in bodies:
        reply = ExportTraceServiceResponse.FromString(
            post(server.base, "/v1/traces", token, body, PROTOBUF))
        if reply.partial_success.rejected_spans:
            raise SystemExit(f"spans refused: {reply.partial_success}")
    return time.perf_counter() - start


def send_events(server: Server, token: str, lines: list[bytes], batch: int) -> float:
    headers = {"PicoFlow-Origin-Source": "OpenTelemetry", "PicoFlow-Origin-Host": "bench",
               "PicoFlow-Origin-Pid": "0"}
    start = time.perf_counter()
    for first in range(0, len(lines), batch):
        post(server.base, "/api/ingest", token, b"\n".join(lines[first:first + batch]) + b"\n",
             "application/x-ndjson", headers)
    return time.perf_counter() - start


def stored_events(server: Server, token: str, run_id: str) -> list[dict[str, Any]]:
    """Every stored event of ``run_id``, page by page."""
    events: list[dict[str, Any]] = []
    while True:
        request = urllib.request.Request(
            f"{server.base}/api/runs/{run_id}/events?after={events[-1]['seq'] if events else -1}"
            "&limit=5000", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=600) as answer:
            page = json.loads(answer.read())["events"]
        if not page:
            return events
        events.extend(page)


def bench(args: argparse.Namespace, server: Server, credentials: dict[str, str]) -> None:
    spans = make_trace(args.spans, args.fanout)
    requests = encoded_batches(spans, args.batch)
    # The same run as events: what the receiver derives for this trace, read back.
    probe = uuid.uuid4().bytes
    send_otlp(server, credentials["ingest"], with_trace_id(requests, probe))
    events = stored_events(server, credentials["read"], probe.hex())
    if not events or events[-1]["type"] not in ("turn.finished", "turn.failed"):
        raise SystemExit(f"the trace's run did not end: {events[-1:] or 'no events'}")

    async def otlp() -> float:
        bodies = with_trace_id(requests, uuid.uuid4().bytes)
        return await asyncio.to_thread(send_otlp, server, credentials["ingest"], bodies)

    async def ingest() -> float:
        run_id = uuid.uuid4().hex
        lines = [json.dumps({**event, "run_id": run_id, "session_id": run_id}).encode()
                 for event in events]
        return await asyncio.to_thread(send_events, server, credentials["ingest"], lines,
                                       args.events_batch)

    samples = interleaved(args.reps, {"otlp": otlp, "ingest": ingest})
    n = len(spans)
    rates = {name: [n / seconds for seconds in values] for name, values in samples.items()}
    print(f"OTLP receiver benchmark: one trace of {n} spans ({args.fanout} overlapping tool "
          f"spans a group, a chat span in each) = {len(events)} events; {args.reps} "
          "interleaved rounds (median [min-max]); SQLite, InMemoryChannelLayer")
    print(f"  otlp   POST /v1/traces, protobuf, {len(requests)} requests of <= {args.batch} "
          f"spans   {statistics.median(rates['otlp']):>9,.0f} spans/s  "
          f"[{min(rates['otlp']):,.0f}-{max(rates['otlp']):,.0f}]")
    print(f"  ingest POST /api/ingest, NDJSON, requests of {args.events_batch} events "
          f"        {statistics.median(rates['ingest']):>9,.0f} spans/s  "
          f"[{min(rates['ingest']):,.0f}-{max(rates['ingest']):,.0f}]"
          f"  ({statistics.median(len(events) / s for s in samples['ingest']):,.0f} events/s)")
    # Rates are spans over seconds: otlp's rate over ingest's is ingest's time over otlp's.
    print(f"ratio otlp / ingest (spans per second): {ratio(samples, 'ingest', 'otlp'):.3f} "
          f"{spread(samples, 'ingest', 'otlp', 3)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--spans", type=int, default=2000, help="spans in the trace")
    parser.add_argument("--fanout", type=int, default=50,
                        help="tool spans in each overlapping group")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=512, help="spans per OTLP request")
    parser.add_argument("--events-batch", type=int, default=500,
                        help="events per ingest request")
    args = parser.parse_args()
    args.database_url = args.redis_url = ""
    overrides = {"PICOFLOW_DEBUG": "0", "PICOFLOW_ALLOWED_HOSTS": "127.0.0.1,localhost",
                 "PICOFLOW_SECURE_SSL_REDIRECT": "0"}
    with served(args, CREDENTIALS, "pf-bench-otlp-", overrides) as (server, credentials):
        bench(args, server, credentials)


if __name__ == "__main__":
    main()
