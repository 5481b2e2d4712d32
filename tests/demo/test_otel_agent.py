"""The OpenTelemetry demo agent (picoflow_web/demos/otel_agent.py): its trace has the shape
the tutorial promises (six overlapping tool spans under the agent's span, then one chat span
with token usage), it imports nothing of PicoFlow, and run as the tutorial says against a
live dashboard its trace becomes a run whose id is the trace id, with one barrier of six
branches and a model call with its tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason='pip install "picoflow-web[otel]"')

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from picoflow_web.demos import otel_agent
from tests.livedaphne import SharedServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_trace_is_six_overlapping_tool_spans_then_one_chat_span() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace_id, reply = otel_agent.plan_trip(provider.get_tracer("test"), "Lisbon?", 0.0)
    spans = {span.name: span for span in memory.get_finished_spans()}
    agent = spans.pop("invoke_agent trip-planner")
    chat = spans.pop("chat gpt-4o-mini")
    assert format(agent.context.trace_id, "032x") == trace_id and "jazz" in reply
    assert agent.parent is None
    assert sorted(spans) == sorted(f"execute_tool {name}" for name, *_ in otel_agent.TOOLS)
    for span in [*spans.values(), chat]:
        assert span.parent is not None and span.parent.span_id == agent.context.span_id
        assert span.context.trace_id == agent.context.trace_id
    tools = list(spans.values())
    # Every tool's span is open while every other one is: they start their work together.
    assert max(s.start_time or 0 for s in tools) < min(s.end_time or 0 for s in tools)
    assert all(s.attributes and s.attributes["gen_ai.operation.name"] == "execute_tool"
               for s in tools)
    assert (chat.start_time or 0) >= max(s.end_time or 0 for s in tools)
    usage = dict(chat.attributes or {})
    assert usage["gen_ai.operation.name"] == "chat"
    assert (usage["gen_ai.usage.input_tokens"], usage["gen_ai.usage.output_tokens"]) == (412, 38)
    assert json.loads(str(usage["gen_ai.output.messages"]))[0]["parts"][0]["content"] == reply


def test_the_agent_imports_nothing_of_picoflow() -> None:
    found = subprocess.run(
        [sys.executable, "-c", "import sys, picoflow_web.demos.otel_agent; print(' '.join("
         "m for m in sys.modules if m.split('.')[0] in ('runtime', 'picoflow_web')))"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert sorted(found) == ["picoflow_web", "picoflow_web.demos",
                             "picoflow_web.demos.otel_agent"]


def agent_env(base_url: str, token: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "PYTEST_", "OTEL_", "PICOFLOW_"))}
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": base_url,
                "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer {token}",
                "PYTHONPATH": str(ROOT)})
    return env


def api(base_url: str, token: str, path: str) -> Any:
    request = urllib.request.Request(base_url + path,
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def test_the_readme_command_ships_the_trace_to_a_live_dashboard(
        shared_daphne: SharedServer) -> None:
    live, token = shared_daphne.server, shared_daphne.token
    done = subprocess.run([sys.executable, "-m", "picoflow_web.demos.otel_agent", "--unit", "0"],
                          env=agent_env(live.base_url, token), cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (run_id,) = [line.removeprefix("run: ") for line in done.stdout.splitlines()
                 if line.startswith("run: ")]
    assert f"page: {live.base_url}/runs/{run_id}/" in done.stdout
    run = api(live.base_url, token, f"/api/runs/{run_id}")["run"]
    assert run["flow"] == "OpenTelemetry:trip-planner"
    assert run["origin"]["source"] == "OpenTelemetry"
    events = api(live.base_url, token, f"/api/runs/{run_id}/events?after=-1&limit=5000")["events"]
    (forked,) = [e for e in events if e["type"] == "barrier.forked"]
    assert sorted(r["key"] for r in forked["requests"]) == sorted(
        f"execute_tool {name}" for name, *_ in otel_agent.TOOLS)
    (model,) = [e for e in events if e["type"] == "model.finished"]
    assert (model["input_tokens"], model["output_tokens"]) == (412, 38)


def test_a_refused_export_is_said_and_fails_the_command() -> None:
    # Nothing listens on the discard port: the exporter gives up, the demo says why.
    done = subprocess.run([sys.executable, "-m", "picoflow_web.demos.otel_agent", "--unit", "0"],
                          env={**agent_env("http://127.0.0.1:9", "nope"),
                               "OTEL_EXPORTER_OTLP_TIMEOUT": "1"},
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "export(s) of spans failed" in done.stderr
