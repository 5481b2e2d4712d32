"""OpenAICompatibleModel against the in-repo server (tests/runtime/chat_server.py), for what
a third-party mock cannot show: the exact body and headers sent, canned malformed replies,
``Retry-After``, an error status on a streamed request, a connection dropped mid-answer,
timeouts and cancellation. The adapter against fakellm is tests/runtime/test_openai_compat.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

pytest.importorskip("openai")

import openai

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
from runtime import events as ev
from runtime.adapters.openai import OpenAICompatibleModel
from runtime.events import MemorySink
from runtime.provider_limits import ProviderLimiter
from runtime.streaming import DeltaCoalescer, listen
from tests.runtime.chat_server import (
    ChatServer,
    Reply,
    VirtualClock,
    chat_server,
    chunk,
    completion,
    streamed,
)

pytestmark = pytest.mark.anyio

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with chat_server() as chat:
        yield chat


@pytest.fixture
async def models() -> AsyncIterator[list[OpenAICompatibleModel]]:
    """Adapters a test makes, closed in its event loop when it ends."""
    made: list[OpenAICompatibleModel] = []
    yield made
    for model in made:
        await model.aclose()


@pytest.fixture
def make(models: list[OpenAICompatibleModel]) -> Any:
    def build(url: str, api_key: str | None = "sk-test", **kwargs: Any) -> OpenAICompatibleModel:
        kwargs.setdefault("limiter", ProviderLimiter())
        model = OpenAICompatibleModel(url, api_key, **kwargs)
        models.append(model)
        return model
    return build


def answer(server: ChatServer, content: str | None = None,
           tool_calls: list[dict[str, Any]] | None = None, *,
           usage: tuple[int, int, int] | None = (3, 2, 5), finish_reason: str | None = "stop",
           stream: bool = True) -> None:
    """Queue an answer: streamed (the adapter's default) or whole."""
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": content and content.replace(
            "|", "")}
        if tool_calls is not None:
            message["tool_calls"] = tool_calls
        body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason}]}
        if usage is not None:
            body["usage"] = dict(zip(("prompt_tokens", "completion_tokens", "total_tokens"),
                                     usage, strict=True))
        server.replies.append(Reply(body=body))
        return
    events: list[Any] = []
    if content:
        events.extend(chunk(word) for word in content.split("|"))
    for index, call in enumerate(tool_calls or []):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        events.append(chunk(tool_calls=[{"index": index, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"],
                                                      "arguments": arguments[:half]}}]))
        events.append(chunk(tool_calls=[{"index": index,
                                         "function": {"arguments": arguments[half:]}}]))
    events.append(chunk(finish_reason=finish_reason))
    if usage is not None:
        events.append(chunk(usage=usage))
    server.replies.append(Reply(events=events))


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


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


async def deltas_of(model: OpenAICompatibleModel, request: ModelRequest,
                    ) -> tuple[Any, list[tuple[str, list[dict[str, Any]]]]]:
    """The answer and every chunk reported, uncoalesced."""
    seen: list[tuple[str, list[dict[str, Any]]]] = []
    with listen(DeltaCoalescer(lambda text, calls, n: seen.append((text, calls)), interval=0)):
        response = await model.invoke(request)
    return response, seen


# -- request ------------------------------------------------------------------------------


async def test_request_body_headers_and_conversion(server: ChatServer, make: Any) -> None:
    answer(server, "ok")
    model = make(server.url + "/", extra_headers={"X-Org": "acme"}, organization="org-1")
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

    [sent] = server.recorded
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["x-org"] == "acme"
    assert sent.headers["openai-organization"] == "org-1"
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
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [{"type": "function", "function": {
            "name": "book", "description": "Book a hotel.", "parameters": schema.parameters,
        }}],
        "temperature": 0.2,
        "max_tokens": 50,
        "extra_body": {"top_k": 5},
    }


async def test_content_parts_pass_through(server: ChatServer, make: Any) -> None:
    answer(server, "a cat")
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
             {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}]
    request = make_request(messages=[Message(type="human", content="What is this?",
                                             additional_kwargs={"content_parts": parts})])
    assert (await make(server.url).invoke(request)).content == "a cat"
    assert server.bodies[0]["messages"] == [{"role": "user", "content": parts}]
    bad = make_request(messages=[Message(type="human", content="x",
                                         additional_kwargs={"content_parts": ["text"]})])
    with pytest.raises(ModelError, match="content_parts"):
        await make(server.url).invoke(bad)


async def test_per_selection_api_key_overrides_and_never_reaches_the_body(
    server: ChatServer, make: Any,
) -> None:
    answer(server, "ok")
    answer(server, "ok")
    model = make(server.url, "sk-default")
    await model.invoke(make_request(params={"api_key": "sk-tenant", "seed": 7}))
    await model.invoke(make_request())
    first, second = server.recorded
    assert first.headers["authorization"] == "Bearer sk-tenant"
    assert "sk-tenant" not in json.dumps(first.body)
    assert first.body["seed"] == 7
    assert "api_key" not in first.body
    assert second.headers["authorization"] == "Bearer sk-default"


async def test_no_key_no_authorization_header_and_reserved_params(
        server: ChatServer, make: Any) -> None:
    answer(server, "ok", stream=False)
    model = make(server.url, None, stream=False)
    await model.invoke(make_request(params={"stream": True, "model": "other", "n": 1}))
    [sent] = server.recorded
    assert "authorization" not in sent.headers
    assert sent.body["model"] == "gpt-test"
    assert "stream" not in sent.body
    assert sent.body["n"] == 1


async def test_output_schema_becomes_response_format(server: ChatServer, make: Any) -> None:
    class Answer(BaseModel):
        city: str

    answer(server, '{"city": |"Oslo"}')
    response = await make(server.url).invoke(make_request(
        output_schema=Answer.model_json_schema()))
    assert server.bodies[0]["response_format"] == {
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
    with pytest.raises(ModelError, match="base_url"):
        OpenAICompatibleModel()


async def test_azure_deployments_and_api_version(server: ChatServer, make: Any) -> None:
    answer(server, "from azure")
    model = make(None, "azure-key", azure_endpoint=server.url.removesuffix("/v1"),
                 api_version="2024-10-21")
    response = await model.invoke(make_request())
    assert response.content == "from azure"
    [sent] = server.recorded
    assert sent.path == "/openai/deployments/gpt-test/chat/completions?api-version=2024-10-21"
    assert sent.headers["api-key"] == "azure-key"


async def test_a_client_of_ones_own(server: ChatServer) -> None:
    answer(server, "mine")
    async with openai.AsyncOpenAI(base_url=server.url, api_key="sk-own", max_retries=0,
                                  default_headers={"X-Team": "a"}) as client:
        model = OpenAICompatibleModel(client=client, limiter=ProviderLimiter())
        assert model.base_url == server.url
        assert (await model.invoke(make_request())).content == "mine"
        await model.aclose()  # the caller's client stays open
        answer(server, "again")
        assert (await model.invoke(make_request())).content == "again"
    assert [r.headers["x-team"] for r in server.recorded] == ["a", "a"]
    assert server.recorded[0].headers["authorization"] == "Bearer sk-own"


async def test_an_http_client_of_ones_own(server: ChatServer) -> None:
    answer(server, "via mine")
    async with openai.DefaultAsyncHttpxClient(headers={"X-Proxy-Auth": "p"}) as http:
        model = OpenAICompatibleModel(server.url, "sk-test", http_client=http,
                                      limiter=ProviderLimiter())
        assert (await model.invoke(make_request())).content == "via mine"
    assert server.recorded[0].headers["x-proxy-auth"] == "p"


def test_the_runtime_imports_without_the_sdk_and_names_the_extra() -> None:
    probe = (
        "import sys; sys.modules['openai'] = None\n"
        "import runtime\n"
        "try:\n"
        "    runtime.OpenAICompatibleModel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "from runtime.cli import UsageError, providers_for\n"
        "try:\n"
        "    providers_for(sys, {'OPENAI_BASE_URL': 'http://llm.local/v1'})\n"
        "except UsageError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    first, second = result.stdout.splitlines()
    assert 'pip install "picoflow-web[openai]"' in first
    assert second.startswith("OPENAI_BASE_URL or OPENAI_API_KEY is set: ")
    assert 'pip install "picoflow-web[openai]"' in second


# -- responses ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
async def test_text_answer_and_usage(server: ChatServer, make: Any, stream: bool) -> None:
    answer(server, "Hello| there", usage=(11, 4, 15), stream=stream)
    model = make(server.url, stream=stream)
    response, seen = await deltas_of(model, make_request())
    assert response.content == "Hello there"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens,
            response.usage.total_tokens) == (11, 4, 15)
    assert seen == ([("Hello", []), (" there", [])] if stream else [])


async def test_missing_usage_and_total_are_tolerated(server: ChatServer, make: Any) -> None:
    model = make(server.url)
    answer(server, "a", usage=None)
    assert (await model.invoke(make_request())).usage.total_tokens == 0
    server.replies.append(Reply(events=[
        chunk("b"), chunk(finish_reason="length"),
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 3}}]))
    response = await model.invoke(make_request())
    assert response.usage.total_tokens == 5
    assert response.finish_reason == "length"


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_call_answer_parses_arguments(server: ChatServer, make: Any,
                                                 stream: bool) -> None:
    answer(server, None, [call("call_9", "book", '{"hotel": "Ritz", "nights": 2}')],
           finish_reason="tool_calls", stream=stream)
    response, seen = await deltas_of(make(server.url, stream=stream), make_request())
    assert response.content == ""
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="call_9", name="book", args={"hotel": "Ritz", "nights": 2})
    ]
    if stream:
        assert seen == [
            ("", [{"index": 0, "id": "call_9", "name": "book", "arguments": '{"hotel": "Ritz'}]),
            ("", [{"index": 0, "arguments": '", "nights": 2}'}]),
        ]


async def test_malformed_arguments_are_kept_raw(server: ChatServer, make: Any) -> None:
    answer(server, None, [
        call("c1", "book", '{"hotel": "Ritz"'),
        call("c2", "book", "[1, 2]"),
        call("c3", "noop", ""),
    ], finish_reason="tool_calls")
    response = await make(server.url).invoke(make_request())
    assert [c.args for c in response.tool_calls] == [
        {"_raw": '{"hotel": "Ritz"'}, {"_raw": "[1, 2]"}, {},
    ]


@pytest.mark.parametrize("reason", ["function_call", "weird"])
async def test_unknown_finish_reason_is_other(server: ChatServer, make: Any, reason: str) -> None:
    answer(server, "x", finish_reason=reason)
    response = await make(server.url).invoke(make_request())
    assert response.finish_reason == "other"


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
async def test_retryable_statuses_are_transport_errors(
    server: ChatServer, make: Any, status: int,
) -> None:
    server.replies.append(Reply(status, {"error": {"message": "slow down please",
                                                   "type": "rate_limit"}}))
    with pytest.raises(ModelTransportError) as info:
        await make(server.url).invoke(make_request())
    assert str(status) in str(info.value)
    assert "slow down please" in str(info.value)
    assert info.value.extra["status"] == status


async def test_html_gateway_error_is_transport(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(502, raw=b"<html><body>502 Bad Gateway</body></html>"))
    with pytest.raises(ModelTransportError, match="502 Bad Gateway"):
        await make(server.url).invoke(make_request())


async def test_exhausted_quota_is_not_retried(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(429, {"error": {"message": "You exceeded your quota",
                                                "code": "insufficient_quota"}}))
    with pytest.raises(ModelError) as info:
        await make(server.url).invoke(make_request())
    assert not isinstance(info.value, ModelTransportError)


async def test_unauthorized_is_a_model_error_without_the_key(server: ChatServer,
                                                             make: Any) -> None:
    server.replies.append(Reply(401, {"error": {
        "message": "Incorrect API key provided: sk-wrong-key-123.",
        "type": "invalid_request_error", "code": "invalid_api_key"}}))
    with pytest.raises(ModelError) as info:
        await make(server.url, "sk-wrong-key-123").invoke(make_request())
    assert type(info.value) is ModelError
    assert "401" in str(info.value)
    assert "Incorrect API key provided" in str(info.value)
    assert "sk-wrong-key-123" not in str(info.value)


async def test_not_found_carries_the_provider_message(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(404, {"error": {"message": "The model `gpt-test` does not exist"}}))
    with pytest.raises(ModelError, match="does not exist") as info:
        await make(server.url).invoke(make_request())
    assert type(info.value) is ModelError


async def test_a_redirect_is_not_followed(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(307, headers={"Location": "http://elsewhere.invalid/v1"}))
    with pytest.raises(ModelError, match="307") as info:
        await make(server.url).invoke(make_request())
    assert type(info.value) is ModelError
    assert server.requests == 1


@pytest.mark.parametrize("stream", [True, False])
async def test_content_filter_finish_reason_is_blocked(server: ChatServer, make: Any,
                                                       stream: bool) -> None:
    answer(server, "", finish_reason="content_filter", stream=stream)
    with pytest.raises(ModelBlockedError):
        await make(server.url, stream=stream).invoke(make_request())


@pytest.mark.parametrize("code", ["content_filter", "content_policy_violation"])
async def test_content_policy_error_body_is_blocked(server: ChatServer, make: Any,
                                                    code: str) -> None:
    server.replies.append(Reply(400, {"error": {"message": "The prompt was filtered.",
                                                "code": code}}))
    with pytest.raises(ModelBlockedError, match="filtered"):
        await make(server.url).invoke(make_request())


async def test_a_streamed_refusal_is_blocked(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(events=[chunk(refusal="I can't "), chunk(refusal="help."),
                                        chunk(finish_reason="stop")]))
    with pytest.raises(ModelBlockedError, match="I can't help"):
        await make(server.url).invoke(make_request())


async def test_a_whole_refusal_is_blocked(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(body={"choices": [{
        "message": {"content": None, "refusal": "I can't help."}, "finish_reason": "stop"}]}))
    with pytest.raises(ModelBlockedError, match="I can't help"):
        await make(server.url, stream=False).invoke(make_request())


async def test_an_error_event_mid_stream(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(events=[chunk("Hel"), {"error": {
        "message": "The server had an error", "type": "server_error"}}]))
    with pytest.raises(ModelTransportError, match="server had an error"):
        await make(server.url).invoke(make_request())


async def test_a_server_that_does_not_stream_answers_whole(server: ChatServer,
                                                            make: Any) -> None:
    server.replies.append(Reply(raw=json.dumps(completion("all at once")).encode()))
    response, seen = await deltas_of(make(server.url), make_request())
    assert response.content == "all at once"
    assert seen == []
    assert server.bodies[0]["stream"] is True


async def test_non_json_body_is_a_model_error(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(raw=b"<html>hello</html>"))
    with pytest.raises(ModelError, match="non-JSON") as info:
        await make(server.url, stream=False).invoke(make_request())
    assert type(info.value) is ModelError


async def test_a_chunk_that_is_not_json_is_a_model_error(server: ChatServer,
                                                         make: Any) -> None:
    server.replies.append(Reply(events=[chunk("a"), "{not json"]))
    with pytest.raises(ModelError, match="not JSON") as info:
        await make(server.url).invoke(make_request())
    assert type(info.value) is ModelError


@pytest.mark.parametrize("body", [
    {"object": "chat.completion"},
    {"choices": []},
    {"choices": [{"finish_reason": "stop"}]},
    {"choices": [{"message": {"content": "x", "tool_calls": [{"id": "c"}]}}]},
    [1, 2, 3],
])
async def test_malformed_completion_is_a_model_error(server: ChatServer, make: Any,
                                                     body: Any) -> None:
    server.replies.append(Reply(body=body))
    with pytest.raises(ModelError, match="malformed") as info:
        await make(server.url, stream=False).invoke(make_request())
    assert type(info.value) is ModelError


async def test_a_stream_of_malformed_calls_is_a_model_error(server: ChatServer,
                                                             make: Any) -> None:
    server.replies.append(Reply(events=[chunk(tool_calls=[{"index": 0, "id": "c"}]),
                                        chunk(finish_reason="tool_calls")]))
    with pytest.raises(ModelError, match="malformed") as info:
        await make(server.url).invoke(make_request())
    assert type(info.value) is ModelError


async def test_timeout_is_a_transport_error(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(body=completion("late"), hold=True))  # held until teardown
    with pytest.raises(ModelTransportError, match="timed out"):
        await make(server.url, timeout=0.2).invoke(make_request())
    # The read timeout gave up while the server was still holding its reply.
    assert not server.answered.is_set()


async def test_connection_refused_is_a_transport_error(make: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ModelTransportError, match="connection failed"):
        await make(f"http://127.0.0.1:{port}/v1", timeout=2).invoke(make_request())


async def test_cancellation_does_not_wait_for_the_socket(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(body=completion("never seen"), hold=True))
    model = make(server.url, timeout=30)
    with pytest.raises(TimeoutError), anyio.fail_after(0.3):
        await model.invoke(make_request())
    assert not server.answered.is_set()


async def test_a_connection_dropped_mid_answer_is_a_transport_error(
        server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(events=streamed("Hel", "lo, ", "wor"), drop_after=2))
    with pytest.raises(ModelTransportError, match="lost the connection mid-answer") as info:
        await deltas_of(make(server.url), make_request())
    assert info.value.extra["url"] == server.url + "/chat/completions"


async def test_429_with_retry_after_on_a_streamed_request_pauses_the_provider(
        server: ChatServer, make: Any) -> None:
    clock = VirtualClock()
    arrivals: list[float] = []
    server.on_request = lambda body: arrivals.append(clock.now)
    server.replies.append(Reply(429, {"error": {"message": "Rate limit reached"}},
                                headers={"Retry-After": "7"}))
    server.replies.append(Reply(events=streamed("after the pause")))
    model = make(server.url, limiter=ProviderLimiter(clock=clock))
    with pytest.raises(ModelTransportError) as info:
        await model.invoke(make_request())
    assert info.value.extra["retry_after"] == 7
    assert (await model.invoke(make_request())).content == "after the pause"
    assert arrivals == [0.0, 7.0]


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


async def test_flow_turn_through_the_engine(server: ChatServer, make: Any) -> None:
    answer(server, None, [call("call_1", "remember_name", '{"name": "Ada"}')],
           usage=(40, 10, 50), finish_reason="tool_calls")
    answer(server, "Nice to meet you, Ada!", usage=(60, 8, 68))
    engine = FlowEngine(flows=[NameFlow], providers={"openai": make(server.url)})

    reply = await engine.run("NameFlow", "I am Ada")

    assert reply.success, reply.message
    assert reply.message == "Nice to meet you, Ada!"
    first, second = server.recorded
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


@pytest.mark.parametrize("stream", [True, False])
async def test_a_lone_surrogate_escape_in_a_reply_becomes_a_replacement_character(
        server: ChatServer, make: Any, stream: bool) -> None:
    # json.loads makes "\\ud800" a code point no UTF-8 can hold: the session's save failed.
    answer(server, None, [call("call_1", "remember_name", '{"name": "Ad\\udc00a"}')],
           finish_reason="tool_calls", stream=stream)
    answer(server, "Nice to meet you, Ad\udc00a \U0001f600!", stream=stream)
    engine = FlowEngine(flows=[NameFlow], providers={"openai": make(server.url, stream=stream)})
    reply = await engine.run("NameFlow", "I am Ada")
    assert reply.success, reply.message
    assert reply.message == "Nice to meet you, Ad\ufffda \U0001f600!"  # the pair is kept
    assert server.bodies[1]["messages"][-2]["tool_calls"][0]["function"][
        "arguments"] == '{"name": "Ad\\ufffda"}'  # repaired in the tool's arguments too


async def test_engine_retries_a_dropped_connection_and_keeps_its_deltas(
        server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(events=streamed("Hel", "lo"), drop_after=1))
    answer(server, "Hel|lo!", usage=(5, 1, 6))
    sink = MemorySink()
    engine = FlowEngine(flows=[NameFlow], providers={"openai": make(server.url)}, sinks=[sink])
    reply = await engine.run("NameFlow", "hi")
    assert reply.success, reply.message
    assert reply.message == "Hello!"
    assert server.requests == 2
    failed = [e for e in sink.events if isinstance(e, ev.ModelFailed)]
    assert [(e.attempt, e.error.code, e.retrying) for e in failed] == [
        (1, "model_transport", True)]
    deltas = [e for e in sink.events if isinstance(e, ev.ModelDelta)]
    assert (deltas[0].attempt, deltas[0].text) == (1, "Hel")  # shown before the drop
    assert "".join(d.text for d in deltas if d.attempt == 2) == "Hello!"


async def test_engine_fails_the_turn_on_a_client_error(server: ChatServer, make: Any) -> None:
    server.replies.append(Reply(401, {"error": {"message": "Invalid API key"}}))
    engine = FlowEngine(flows=[NameFlow], providers={"openai": make(server.url, "sk-bad")})
    reply = await engine.run("NameFlow", "hi")
    assert not reply.success
    assert reply.error_code == "model_error"
    assert "Invalid API key" in reply.message
    assert server.requests == 1


async def test_malformed_arguments_reach_the_model_as_a_tool_error(
        server: ChatServer, make: Any) -> None:
    answer(server, None, [call("call_1", "remember_name", '{"name": "Ada"')],
           finish_reason="tool_calls")
    answer(server, None, [call("call_2", "remember_name", '{"name": "Ada"}')],
           finish_reason="tool_calls")
    answer(server, "Hi Ada!")
    engine = FlowEngine(flows=[NameFlow], providers={"openai": make(server.url)})
    reply = await engine.run("NameFlow", "I am Ada")
    assert reply.success, reply.message
    assert reply.message == "Hi Ada!"
    feedback = server.bodies[1]["messages"][-1]
    assert feedback["role"] == "tool"
    assert feedback["tool_call_id"] == "call_1"
    assert "Invalid arguments for tool 'remember_name'" in feedback["content"]
    assert server.bodies[2]["messages"][-1]["content"] == "saved"
