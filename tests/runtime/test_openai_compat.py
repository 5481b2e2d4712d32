"""OpenAICompatibleModel against a third-party OpenAI-compatible server: fakellm (from PyPI,
in a process of its own), streamed through a real FlowEngine flow.

fakellm answers by rules (``when`` a request matches, ``respond`` with text, tool calls or
an error status); it streams text word by word and tool-call arguments in pieces. What it
cannot do is in tests/runtime/test_openai_adapter.py against the in-repo server
(tests/runtime/chat_server.py): it streams a 200 whatever status a rule names (so its
errors are seen without streaming), sends no ``Retry-After``, and never drops a connection
mid-answer.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("fakellm")

from runtime import (
    Flow,
    FlowEngine,
    ModelError,
    ModelRequest,
    ModelSelection,
    ModelTransportError,
    Step,
    stay,
    tool,
)
from runtime import events as ev
from runtime.adapters.openai import OpenAICompatibleModel
from runtime.events import MemorySink
from runtime.messages import Message
from runtime.provider_limits import ProviderLimiter
from tests.webhelpers import wait_for

pytestmark = pytest.mark.anyio

LEAKED_KEY = "sk-fake-secret-123"

RULES = f"""
rules:
  - name: unauthorized
    when: {{header.x-test-scenario: unauthorized}}
    respond: {{status: 401, error: "Incorrect API key provided: {LEAKED_KEY}."}}
  - name: rate_limited
    when: {{header.x-test-scenario: rate_limited}}
    respond: {{status: 429, error: "Rate limit reached for requests"}}
  - name: server_error
    when: {{header.x-test-scenario: server_error}}
    respond: {{status: 500, error: "The server had an error"}}
  - name: thanks
    when: {{messages_contain: "thanks", previous_message_role: assistant}}
    respond: {{content: "You are welcome, enjoy your stay!"}}
  - name: booked
    when: {{tool_result_contains: "booked"}}
    respond: {{content: "Booked the Ritz for 2 nights."}}
  - name: book
    when: {{messages_contain: "book", tools_include: "book"}}
    respond:
      tool_calls:
        - {{name: book, arguments: {{hotel: Ritz, nights: 2}}}}
"""

STARTUP_DEADLINE = 60.0
"""Seconds fakellm may take to listen; only ends a wait that would never end."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def fakellm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fakellm serving RULES on a free port; its base URL."""
    folder: Path = tmp_path_factory.mktemp("fakellm")
    config = folder / "fakellm.yaml"
    config.write_text(RULES, encoding="utf-8")
    port = free_port()
    log = (folder / "fakellm.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from fakellm.cli import main; main()", "serve",
         "--host", "127.0.0.1", "--port", str(port), "--config", str(config)],
        cwd=folder, stdout=log, stderr=subprocess.STDOUT)

    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError("fakellm exited: "
                                 + (folder / "fakellm.log").read_text(errors="replace"))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        wait_for(listening, "fakellm to listen", STARTUP_DEADLINE)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


@pytest.fixture
def fakellm(fakellm_server: str) -> str:
    """The server, its conversations forgotten: fakellm tells conversations apart by their
    first messages, and a rule on tool results reads the conversation's earlier turns."""
    reset = urllib.request.Request(fakellm_server.removesuffix("/v1") + "/_fakellm/reset",
                                   method="POST")
    with urllib.request.urlopen(reset, timeout=30) as answer:
        assert answer.status == 200
    return fakellm_server


# -- a flow that books a hotel ------------------------------------------------------------


class Concierge(Step):
    def get_prompt(self) -> str:
        return "You book hotels."

    @tool
    async def book(self, hotel: str, nights: int) -> object:
        """Book a hotel."""
        return stay(f"booked {hotel} for {nights} nights")


class HotelFlow(Flow):
    retry_delay = 0

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="openai", name="gpt-4o-mini")

    def define_steps(self) -> list[Step]:
        return [Concierge(self)]


def adapter(url: str, **kwargs: Any) -> OpenAICompatibleModel:
    kwargs.setdefault("limiter", ProviderLimiter())
    return OpenAICompatibleModel(url, "sk-test", **kwargs)


def attempts(events: list[ev.Event]) -> list[tuple[ev.ModelFinished, list[ev.ModelDelta]]]:
    """Each model.finished with the deltas of its attempt."""
    out = []
    for finished in (e for e in events if isinstance(e, ev.ModelFinished)):
        deltas = [e for e in events if isinstance(e, ev.ModelDelta)
                  and (e.step, e.call, e.attempt) == (finished.step, finished.call,
                                                      finished.attempt)]
        out.append((finished, deltas))
    return out


async def test_a_two_turn_conversation_with_a_tool_call_streams(fakellm: str) -> None:
    model = adapter(fakellm)
    sink = MemorySink()
    engine = FlowEngine(flows=[HotelFlow], providers={"openai": model}, sinks=[sink])

    first = await engine.run("HotelFlow", "Please book the Ritz")
    assert first.success, first.message
    assert first.message == "Booked the Ritz for 2 nights."
    second = await engine.run("HotelFlow", "thanks!", session_id=first.session_id)
    await model.aclose()
    assert second.success, second.message
    assert second.message == "You are welcome, enjoy your stay!"

    [started] = [e for e in sink.events if isinstance(e, ev.ToolStarted)]
    assert (started.name, started.args) == ("book", {"hotel": "Ritz", "nights": 2})
    [finished_tool] = [e for e in sink.events if isinstance(e, ev.ToolFinished)]
    assert finished_tool.status == "success"
    [(call, call_deltas), (booked, booked_deltas), (welcome, welcome_deltas)] = attempts(
        sink.events)
    # The tool call arrived in pieces: its id and name first, then its arguments.
    assert [t["name"] for t in call.tool_calls] == ["book"]
    pieces = [c for d in call_deltas for c in d.tool_calls]
    assert {c.get("name") for c in pieces} >= {"book"}
    assert json.loads("".join(c.get("arguments", "") for c in pieces)) == {
        "hotel": "Ritz", "nights": 2}
    # The text arrived word by word, coalesced; the deltas add up to the whole reply.
    for finished, deltas in ((booked, booked_deltas), (welcome, welcome_deltas)):
        assert deltas, "no model.delta before model.finished"
        assert "".join(d.text for d in deltas) == finished.content
        assert sum(d.chunks for d in deltas) >= len(finished.content.split())
    # Every delta comes before its attempt's model.finished.
    order = [e.type for e in sink.events if e.type.startswith("model.")]
    assert order.index("model.delta") < order.index("model.finished")


async def test_whole_answers_give_the_same_reply(fakellm: str) -> None:
    sink = MemorySink()
    model = adapter(fakellm, stream=False)
    engine = FlowEngine(flows=[HotelFlow], providers={"openai": model}, sinks=[sink])
    reply = await engine.run("HotelFlow", "Please book the Ritz")
    await model.aclose()
    assert reply.success, reply.message
    assert reply.message == "Booked the Ritz for 2 nights."
    assert not [e for e in sink.events if isinstance(e, ev.ModelDelta)]
    finished = [e for e in sink.events if isinstance(e, ev.ModelFinished)]
    assert finished[0].input_tokens > 0  # fakellm counts usage on whole answers


def request(message: str = "hello") -> ModelRequest:
    return ModelRequest(selection=ModelSelection(provider="openai", name="gpt-4o-mini"),
                        messages=[Message(type="human", content=message)])


@pytest.mark.parametrize(("scenario", "status", "error"), [
    ("unauthorized", 401, ModelError),
    ("rate_limited", 429, ModelTransportError),
    ("server_error", 500, ModelTransportError),
])
async def test_error_statuses_map_to_the_error_tree(
        fakellm: str, scenario: str, status: int, error: type[ModelError]) -> None:
    model = OpenAICompatibleModel(fakellm, LEAKED_KEY, stream=False, limiter=ProviderLimiter(),
                                  extra_headers={"x-test-scenario": scenario})
    with pytest.raises(ModelError) as info:
        await model.invoke(request())
    await model.aclose()
    assert type(info.value) is error
    assert info.value.extra["status"] == status
    assert f"HTTP {status}" in str(info.value)
    assert LEAKED_KEY not in str(info.value)


async def test_a_retried_server_error_fails_the_turn_after_the_attempts(fakellm: str) -> None:
    model = OpenAICompatibleModel(fakellm, "sk-test", stream=False, limiter=ProviderLimiter(),
                                  extra_headers={"x-test-scenario": "server_error"})
    sink = MemorySink()
    engine = FlowEngine(flows=[HotelFlow], providers={"openai": model}, sinks=[sink])
    reply = await engine.run("HotelFlow", "hello")
    await model.aclose()
    assert not reply.success
    failed = [e for e in sink.events if isinstance(e, ev.ModelFailed)]
    assert len(failed) > 1  # a transport error is retried
    assert all("HTTP 500" in e.error.message for e in failed)
