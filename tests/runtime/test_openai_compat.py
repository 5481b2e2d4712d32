"""The OpenAI-compatible adapter against a real local HTTP server speaking the protocol."""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from runtime import (
    Flow,
    FlowEngine,
    Message,
    ModelBlockedError,
    ModelError,
    ModelRequest,
    ModelSelection,
    ModelTransportError,
    Step,
    ToolCall,
    ToolSchema,
    stay,
    tool,
)
from runtime.openai_compat import OpenAICompatibleModel

pytestmark = pytest.mark.anyio


# -- the fake endpoint ---------------------------------------------------------------------


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Canned:
    status: int
    body: bytes
    delay: float = 0.0


@dataclass
class FakeEndpoint:
    """What the server thread shares with the test: canned replies in, requests out."""

    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    replies: deque[Canned] = field(default_factory=deque)
    release: threading.Event = field(default_factory=threading.Event)
    """Set at teardown, so a handler told to stall stops waiting."""
    answered: threading.Event = field(default_factory=threading.Event)
    """Set when a handler has stopped waiting and sends its reply: a client that gave up
    before this never had an answer to wait for."""

    def reply(self, body: Any, status: int = 200, *, delay: float = 0.0) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.replies.append(Canned(status, raw, delay))

    def answer(
        self,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        *,
        usage: tuple[int, int, int] | None = (3, 2, 5),
        finish_reason: str | None = "stop",
    ) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        body: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if usage is not None:
            body["usage"] = dict(
                zip(("prompt_tokens", "completion_tokens", "total_tokens"), usage, strict=True)
            )
        self.reply(body)


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    endpoint: FakeEndpoint

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (the timeout tests) is expected, not noise


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        fake = self.server.endpoint
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        fake.requests.append(
            Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw))
        )
        canned = fake.replies.popleft() if fake.replies else Canned(
            500, b'{"error": {"message": "no canned reply left"}}'
        )
        if canned.delay:
            fake.release.wait(canned.delay)
        fake.answered.set()
        try:
            self.send_response(canned.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(canned.body)))
            self.end_headers()
            self.wfile.write(canned.body)
        except OSError:
            pass  # the client timed out and hung up

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[FakeEndpoint]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    fake = FakeEndpoint(url=f"http://127.0.0.1:{httpd.server_address[1]}/v1")
    httpd.endpoint = fake
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def make_request(
    *, params: dict[str, Any] | None = None, messages: list[Message] | None = None,
    tools: list[ToolSchema] | None = None, output_schema: dict[str, Any] | None = None,
) -> ModelRequest:
    return ModelRequest(
        selection=ModelSelection(provider="openai", name="gpt-test", params=params or {}),
        messages=messages or [
            Message(type="system", content="Be brief."), Message(type="human", content="Hi"),
        ],
        tools=tools or [],
        output_schema=output_schema,
    )


# -- request ------------------------------------------------------------------------------


async def test_request_body_headers_and_conversion(server: FakeEndpoint) -> None:
    server.answer("ok")
    model = OpenAICompatibleModel(server.url + "/", "sk-test", extra_headers={"X-Org": "acme"})
    history = [
        Message(type="system", content="You book rooms."),
        Message(type="human", content="Book Ritz"),
        Message(type="ai", content="", tool_calls=[
            ToolCall(id="call_1", name="book", args={"hotel": "Ritz", "nights": 2}),
        ]),
        Message(type="tool", content="booked", tool_call_id="call_1", name="book",
                status="success"),
        Message(type="ai", content="Booked."),
        Message(type="human", content="Thanks"),
    ]
    schema = ToolSchema(
        name="book", description="Book a hotel.",
        parameters={"type": "object", "properties": {"hotel": {"type": "string"}}},
    )
    request = make_request(
        messages=history, tools=[schema],
        params={"temperature": 0.2, "max_tokens": 50, "password": "hunter2",
                "extra_body": {"token": "t0k", "top_k": 5}},
    )
    await model.invoke(request)

    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["x-org"] == "acme"
    assert sent.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You book rooms."},
            {"role": "user", "content": "Book Ritz"},
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "book", "arguments": '{"hotel": "Ritz", "nights": 2}'},
            }]},
            {"role": "tool", "tool_call_id": "call_1", "content": "booked"},
            {"role": "assistant", "content": "Booked."},
            {"role": "user", "content": "Thanks"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "book", "description": "Book a hotel.", "parameters": schema.parameters,
        }}],
        "temperature": 0.2,
        "max_tokens": 50,
        "extra_body": {"top_k": 5},
    }


async def test_per_selection_api_key_overrides_and_never_reaches_the_body(
    server: FakeEndpoint,
) -> None:
    server.answer("ok")
    model = OpenAICompatibleModel(server.url, "sk-default")
    await model.invoke(make_request(params={"api_key": "sk-tenant", "seed": 7}))
    [sent] = server.requests
    assert sent.headers["authorization"] == "Bearer sk-tenant"
    assert "sk-tenant" not in json.dumps(sent.body)
    assert sent.body["seed"] == 7
    assert "api_key" not in sent.body


async def test_headers_follow_the_key_of_each_call_and_later_extra_headers(
    server: FakeEndpoint,
) -> None:
    # The adapter builds each header set once; a per-selection key, a change of
    # extra_headers after a call, and the default key again must each still be sent.
    for _ in range(4):
        server.answer("ok")
    model = OpenAICompatibleModel(server.url, "sk-default", extra_headers={"X-Org": "acme"})
    await model.invoke(make_request())
    await model.invoke(make_request(params={"api_key": "sk-tenant"}))
    model.extra_headers["X-Org"] = "globex"
    await model.invoke(make_request())
    del model.extra_headers["X-Org"]
    await model.invoke(make_request(params={"api_key": "sk-tenant"}))
    assert [(r.headers["authorization"], r.headers.get("x-org")) for r in server.requests] == [
        ("Bearer sk-default", "acme"), ("Bearer sk-tenant", "acme"),
        ("Bearer sk-default", "globex"), ("Bearer sk-tenant", None),
    ]


async def test_no_key_no_authorization_header_and_reserved_params(server: FakeEndpoint) -> None:
    server.answer("ok")
    model = OpenAICompatibleModel(server.url)
    await model.invoke(make_request(params={"stream": True, "model": "other", "n": 1}))
    [sent] = server.requests
    assert "authorization" not in sent.headers
    assert sent.body["model"] == "gpt-test"
    assert "stream" not in sent.body
    assert sent.body["n"] == 1


async def test_output_schema_becomes_response_format(server: FakeEndpoint) -> None:
    class Answer(BaseModel):
        city: str

    server.answer('{"city": "Oslo"}')
    model = OpenAICompatibleModel(server.url, "sk-test")
    response = await model.invoke(make_request(output_schema=Answer.model_json_schema()))
    assert server.requests[0].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": Answer.model_json_schema()},
    }
    assert Answer.model_validate_json(response.content).city == "Oslo"


def test_from_env_and_repr_hide_the_key() -> None:
    model = OpenAICompatibleModel.from_env(
        {"OPENAI_BASE_URL": "http://llm.local:8080/v1/", "OPENAI_API_KEY": "sk-secret"}
    )
    assert model.endpoint == "http://llm.local:8080/v1/chat/completions"
    assert "sk-secret" not in repr(model)
    default = OpenAICompatibleModel.from_env({})
    assert default.endpoint == "https://api.openai.com/v1/chat/completions"
    with pytest.raises(ModelError):
        OpenAICompatibleModel("llm.local:8080/v1")


# -- responses ----------------------------------------------------------------------------


async def test_text_answer_and_usage(server: FakeEndpoint) -> None:
    server.answer("Hello there", usage=(11, 4, 15))
    response = await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert response.content == "Hello there"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (11, 4, 15)


async def test_missing_usage_and_total_are_tolerated(server: FakeEndpoint) -> None:
    model = OpenAICompatibleModel(server.url, "sk-test")
    server.answer("a", usage=None)
    assert (await model.invoke(make_request())).usage.total_tokens == 0
    server.reply({"choices": [{"message": {"content": "b"}, "finish_reason": "length"}],
                  "usage": {"prompt_tokens": 2, "completion_tokens": 3}})
    response = await model.invoke(make_request())
    assert response.usage.total_tokens == 5
    assert response.finish_reason == "length"


async def test_tool_call_answer_parses_arguments(server: FakeEndpoint) -> None:
    server.answer(None, [call("call_9", "book", '{"hotel": "Ritz", "nights": 2}')],
                  finish_reason="tool_calls")
    response = await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert response.content == ""
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="call_9", name="book", args={"hotel": "Ritz", "nights": 2})
    ]


async def test_malformed_arguments_are_kept_raw(server: FakeEndpoint) -> None:
    server.answer(None, [
        call("c1", "book", '{"hotel": "Ritz"'),
        call("c2", "book", "[1, 2]"),
        call("c3", "noop", ""),
    ], finish_reason="tool_calls")
    response = await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert [c.args for c in response.tool_calls] == [
        {"_raw": '{"hotel": "Ritz"'}, {"_raw": "[1, 2]"}, {},
    ]


@pytest.mark.parametrize("reason", ["function_call", "weird"])
async def test_unknown_finish_reason_is_other(server: FakeEndpoint, reason: str) -> None:
    server.answer("x", finish_reason=reason)
    response = await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert response.finish_reason == "other"


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
async def test_retryable_statuses_are_transport_errors(
    server: FakeEndpoint, status: int,
) -> None:
    server.reply({"error": {"message": "slow down please", "type": "rate_limit"}}, status)
    with pytest.raises(ModelTransportError) as info:
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert str(status) in str(info.value)
    assert "slow down please" in str(info.value)
    assert info.value.extra["status"] == status


async def test_html_gateway_error_is_transport(server: FakeEndpoint) -> None:
    server.reply(b"<html><body>502 Bad Gateway</body></html>", 502)
    with pytest.raises(ModelTransportError, match="502 Bad Gateway"):
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())


async def test_exhausted_quota_is_not_retried(server: FakeEndpoint) -> None:
    server.reply({"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}},
                 429)
    with pytest.raises(ModelError) as info:
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert not isinstance(info.value, ModelTransportError)


async def test_unauthorized_is_a_model_error_without_the_key(server: FakeEndpoint) -> None:
    server.reply({"error": {"message": "Incorrect API key provided: sk-wrong-key-123.",
                            "type": "invalid_request_error", "code": "invalid_api_key"}}, 401)
    with pytest.raises(ModelError) as info:
        await OpenAICompatibleModel(server.url, "sk-wrong-key-123").invoke(make_request())
    assert type(info.value) is ModelError
    assert "401" in str(info.value)
    assert "Incorrect API key provided" in str(info.value)
    assert "sk-wrong-key-123" not in str(info.value)


async def test_not_found_carries_the_provider_message(server: FakeEndpoint) -> None:
    server.reply({"error": {"message": "The model `gpt-test` does not exist"}}, 404)
    with pytest.raises(ModelError, match="does not exist") as info:
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert type(info.value) is ModelError


async def test_content_filter_finish_reason_is_blocked(server: FakeEndpoint) -> None:
    server.answer("", finish_reason="content_filter")
    with pytest.raises(ModelBlockedError):
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())


@pytest.mark.parametrize("code", ["content_filter", "content_policy_violation"])
async def test_content_policy_error_body_is_blocked(server: FakeEndpoint, code: str) -> None:
    server.reply({"error": {"message": "The prompt was filtered.", "code": code}}, 400)
    with pytest.raises(ModelBlockedError, match="filtered"):
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())


async def test_refusal_is_blocked(server: FakeEndpoint) -> None:
    server.reply({"choices": [{"message": {"content": None, "refusal": "I can't help."},
                               "finish_reason": "stop"}]})
    with pytest.raises(ModelBlockedError, match="I can't help"):
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())


async def test_non_json_body_is_a_model_error(server: FakeEndpoint) -> None:
    server.reply(b"<html>hello</html>")
    with pytest.raises(ModelError, match="non-JSON") as info:
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert type(info.value) is ModelError


@pytest.mark.parametrize("body", [
    {"object": "chat.completion"},
    {"choices": []},
    {"choices": [{"finish_reason": "stop"}]},
    {"choices": [{"message": {"content": "x", "tool_calls": [{"id": "c"}]}}]},
    [1, 2, 3],
])
async def test_malformed_completion_is_a_model_error(server: FakeEndpoint, body: Any) -> None:
    server.reply(body)
    with pytest.raises(ModelError, match="malformed") as info:
        await OpenAICompatibleModel(server.url, "sk-test").invoke(make_request())
    assert type(info.value) is ModelError


async def test_timeout_is_a_transport_error(server: FakeEndpoint) -> None:
    server.answer("late")
    server.replies[-1].delay = 10.0  # held until teardown
    model = OpenAICompatibleModel(server.url, "sk-test", timeout=0.2)
    with pytest.raises(ModelTransportError, match="timed out"):
        await model.invoke(make_request())
    # The socket timeout gave up while the server was still holding its reply.
    assert not server.answered.is_set()


async def test_connection_refused_is_a_transport_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAICompatibleModel(f"http://127.0.0.1:{port}/v1", "sk-test", timeout=2)
    with pytest.raises(ModelTransportError, match="connection failed"):
        await model.invoke(make_request())


async def test_cancellation_does_not_wait_for_the_socket(server: FakeEndpoint) -> None:
    server.answer("never seen")
    server.replies[-1].delay = 10.0  # held until teardown
    model = OpenAICompatibleModel(server.url, "sk-test", timeout=30)
    with pytest.raises(TimeoutError), anyio.fail_after(0.3):
        await model.invoke(make_request())
    # The cancelled call returned while the server was still holding its reply: it did
    # not wait for the worker thread's socket.
    assert not server.answered.is_set()


# -- end to end ---------------------------------------------------------------------------


class Ask(Step):
    def get_prompt(self) -> str:
        return "Ask for the user's name."

    @tool
    async def remember_name(self, name: str) -> object:
        """Remember the user's name."""
        self.save_state({"name": name})
        return stay("saved")


class NameFlow(Flow):
    retry_delay = 0

    def config_model(self) -> ModelSelection:
        return ModelSelection(provider="openai", name="gpt-test", params={"temperature": 0})

    def define_steps(self) -> list[Step]:
        return [Ask(self)]


def name_engine(server: FakeEndpoint) -> FlowEngine:
    return FlowEngine(
        flows=[NameFlow], providers={"openai": OpenAICompatibleModel(server.url, "sk-test")})


async def test_flow_turn_through_the_engine(server: FakeEndpoint) -> None:
    server.answer(None, [call("call_1", "remember_name", '{"name": "Ada"}')],
                  usage=(40, 10, 50), finish_reason="tool_calls")
    server.answer("Nice to meet you, Ada!", usage=(60, 8, 68))
    engine = name_engine(server)

    reply = await engine.run("NameFlow", "I am Ada")

    assert reply.success, reply.message
    assert reply.message == "Nice to meet you, Ada!"
    first, second = server.requests
    assert first.body["tools"][0]["function"]["name"] == "remember_name"
    assert first.body["messages"][0] == {"role": "system", "content": "Ask for the user's name."}
    assert first.body["messages"][-1] == {"role": "user", "content": "I am Ada"}
    assert second.headers["authorization"] == "Bearer sk-test"
    assert second.body["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    assert second.body["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_1", "content": "saved",
    }
    doc = await engine.store.load(reply.session_id)
    assert doc is not None
    assert (doc.tokens.input_tokens, doc.tokens.output_tokens, doc.tokens.total_tokens) == (
        100, 18, 118,
    )


async def test_a_lone_surrogate_escape_in_a_reply_becomes_a_replacement_character(
        server: FakeEndpoint) -> None:
    # json.loads makes "\\ud800" a code point no UTF-8 can hold: the session's save failed.
    server.answer(None, [call("call_1", "remember_name", '{"name": "Ad\\udc00a"}')],
                  finish_reason="tool_calls")
    server.answer("Nice to meet you, Ad\udc00a \U0001f600!")
    engine = name_engine(server)
    reply = await engine.run("NameFlow", "I am Ada")
    assert reply.success, reply.message
    assert reply.message == "Nice to meet you, Ad\ufffda \U0001f600!"  # the pair is kept
    assert server.requests[1].body["messages"][-2]["tool_calls"][0]["function"][
        "arguments"] == '{"name": "Ad\\ufffda"}'  # repaired in the tool's arguments too
    doc = await engine.store.load(reply.session_id)
    assert doc is not None


async def test_engine_retries_transport_errors(server: FakeEndpoint) -> None:
    server.reply({"error": {"message": "overloaded"}}, 503)
    server.answer("Hello!", usage=(5, 1, 6))
    engine = name_engine(server)
    reply = await engine.run("NameFlow", "hi")
    assert reply.success, reply.message
    assert reply.message == "Hello!"
    assert len(server.requests) == 2


async def test_engine_fails_the_turn_on_a_client_error(server: FakeEndpoint) -> None:
    server.reply({"error": {"message": "Invalid API key"}}, 401)
    engine = FlowEngine(
        flows=[NameFlow], providers={"openai": OpenAICompatibleModel(server.url, "sk-bad")}
    )
    reply = await engine.run("NameFlow", "hi")
    assert not reply.success
    assert reply.error_code == "model_error"
    assert "Invalid API key" in reply.message
    assert len(server.requests) == 1


async def test_malformed_arguments_reach_the_model_as_a_tool_error(server: FakeEndpoint) -> None:
    server.answer(None, [call("call_1", "remember_name", '{"name": "Ada"')],
                  finish_reason="tool_calls")
    server.answer(None, [call("call_2", "remember_name", '{"name": "Ada"}')],
                  finish_reason="tool_calls")
    server.answer("Hi Ada!")
    engine = name_engine(server)
    reply = await engine.run("NameFlow", "I am Ada")
    assert reply.success, reply.message
    assert reply.message == "Hi Ada!"
    feedback = server.requests[1].body["messages"][-1]
    assert feedback["role"] == "tool"
    assert feedback["tool_call_id"] == "call_1"
    assert "Invalid arguments for tool 'remember_name'" in feedback["content"]
    assert server.requests[2].body["messages"][-1]["content"] == "saved"
