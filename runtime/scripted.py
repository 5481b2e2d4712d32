"""The scripted model: the embedded default model, deterministic and offline.

A :class:`ScriptedModel` answers each request with the first :class:`Rule` that matches
it — on flow, step, model name, system prompt, and the last message's type and text — and
raises :class:`~runtime.errors.ScriptedModelError` describing the request when none does,
so a script never answers something it was not written for. Rules return text, tool calls
or a function of the request; latency and token counts are configurable, so demos animate
and token accounting has real numbers to add up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .errors import FlowDefinitionError, ScriptedModelError
from .llm import ModelRequest, ModelResponse, ModelSelection, TokenUsage
from .messages import MessageType, ToolCall
from .streaming import stream_delta

Responder = Callable[[ModelRequest], "ModelResponse | str"]


@dataclass
class Rule:
    """One scripted answer and the requests it matches.

    Match fields are all optional and must all hold: ``flow``, ``step`` and ``model`` by
    equality; ``prompt`` and ``last`` as regular expressions searched in the system prompt
    and the last message's text; ``last_type`` on the last message's type.
    Exactly one of ``text``, ``tools`` or ``respond`` gives the answer. ``times`` limits how
    often the rule may answer (None: unlimited), which scripts sequences.
    """

    text: str | None = None
    tools: Sequence[tuple[str, dict[str, Any]] | ToolCall] = ()
    respond: Responder | None = None
    flow: str | None = None
    step: str | None = None
    model: str | None = None
    prompt: str | None = None
    last: str | None = None
    last_type: MessageType | None = None
    times: int | None = None
    latency: float | None = None
    usage: TokenUsage | None = None
    used: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        answers = sum(x is not None and x != () for x in (self.text, self.tools or None,
                                                          self.respond))
        if answers != 1:
            raise FlowDefinitionError("A scripted Rule needs exactly one of text, tools, respond.")
        for pattern in (self.prompt, self.last):
            if pattern is not None:
                re.compile(pattern)

    def matches(self, request: ModelRequest) -> bool:
        """Whether this rule answers ``request``."""
        if self.times is not None and self.used >= self.times:
            return False
        last = request.last_message
        return (
            (self.flow is None or self.flow == request.flow)
            and (self.step is None or self.step == request.step)
            and (self.model is None or self.model == request.selection.name)
            and (self.prompt is None or re.search(self.prompt, request.system_prompt) is not None)
            and (self.last_type is None or (last is not None and last.type == self.last_type))
            and (self.last is None or (last is not None and re.search(self.last, last.content)
                                       is not None))
        )


class ScriptedModel:
    """A deterministic model that plays :class:`Rule` s.

    Args:
        rules: tried in order; the first match answers.
        latency: default seconds each answer takes (a rule may override).
        chars_per_token: used to derive token counts when a rule gives none.
        keep_requests: record every request in :attr:`requests`.
        name: when set, events of the calls it answers name it (provider ``scripted``,
            this name, and the selection it was ``requested`` for) instead of the
            selection, which a scripted model only plays.
        stream: stream each answer in this many chunks spread over its latency, as a
            streaming provider writes (``model.delta`` events); 0, or no latency, answers
            in one piece.
    """

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        *,
        latency: float = 0.0,
        chars_per_token: int = 4,
        keep_requests: bool = True,
        name: str | None = None,
        stream: int = 0,
    ) -> None:
        if stream < 0:
            raise FlowDefinitionError(f"stream must be 0 or more chunks, got {stream!r}.")
        self.rules = list(rules)
        self.stream = stream
        self.name = name
        """How events name this model; None: they name the selection it answers."""
        self.latency = latency
        self.chars_per_token = chars_per_token
        self.keep_requests = keep_requests
        """False in long-running servers: the request log would grow without bound."""
        self.requests: list[ModelRequest] = []
        """Every request answered, in order (what a test or a debugger reads back)."""
        self._call_ids = 0

    def describe(self, selection: ModelSelection) -> dict[str, Any] | None:
        """How events name this model when it answers ``selection`` (None: the selection)."""
        if self.name is None:
            return None
        return {"provider": "scripted", "name": self.name, "params": {},
                "requested": selection.public()}

    def add(self, *rules: Rule) -> ScriptedModel:
        """Append rules; returns self for chaining."""
        self.rules.extend(rules)
        return self

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        """Answer with the first matching rule, after its latency."""
        rule = next((r for r in self.rules if r.matches(request)), None)
        if rule is None:
            raise ScriptedModelError(describe_unmatched(request))
        rule.used += 1
        latency = self.latency if rule.latency is None else rule.latency
        if self.stream and latency > 0:
            response = self._answer(rule, request)
            await _write(response, self.stream, latency)
        else:
            if latency > 0:
                await anyio.sleep(latency)
            response = self._answer(rule, request)
        if self.keep_requests:
            self.requests.append(request)
        return response

    def _answer(self, rule: Rule, request: ModelRequest) -> ModelResponse:
        if rule.respond is not None:
            produced = rule.respond(request)
            response = ModelResponse(content=produced) if isinstance(produced, str) else produced
        elif rule.text is not None:
            response = ModelResponse(content=rule.text)
        else:
            response = ModelResponse(
                tool_calls=[self._call(t) for t in rule.tools], finish_reason="tool_calls"
            )
        if rule.usage is not None:
            response.usage = rule.usage.model_copy()
        elif response.usage.total_tokens == 0:
            response.usage = self._estimate(request, response)
        return response

    def _call(self, spec: tuple[str, dict[str, Any]] | ToolCall) -> ToolCall:
        if isinstance(spec, ToolCall):
            return spec
        self._call_ids += 1
        name, args = spec
        return ToolCall(id=f"call_{self._call_ids}", name=name, args=dict(args))

    def _estimate(self, request: ModelRequest, response: ModelResponse) -> TokenUsage:
        size_in = sum(len(m.content) for m in request.messages)
        size_out = len(response.content) + sum(len(str(c.args)) + len(c.name)
                                               for c in response.tool_calls)
        tokens_in = max(1, size_in // self.chars_per_token)
        tokens_out = max(1, size_out // self.chars_per_token)
        return TokenUsage(input_tokens=tokens_in, output_tokens=tokens_out,
                          total_tokens=tokens_in + tokens_out)


async def _write(response: ModelResponse, chunks: int, latency: float) -> None:
    """Report ``response`` in ``chunks`` pieces, one every ``latency / chunks`` seconds."""
    text = response.content
    calls = [(i, c.id, c.name, json.dumps(c.args, ensure_ascii=False))
             for i, c in enumerate(response.tool_calls)]
    for piece in range(chunks):
        await anyio.sleep(latency / chunks)
        cut = slice(len(text) * piece // chunks, len(text) * (piece + 1) // chunks)
        parts = [{"index": i, "arguments": args[len(args) * piece // chunks:
                                                len(args) * (piece + 1) // chunks],
                  **({"id": call_id, "name": name} if piece == 0 else {})}
                 for i, call_id, name, args in calls]
        stream_delta(text[cut], parts)


def describe_unmatched(request: ModelRequest) -> str:
    """A one-paragraph description of a request no rule matched."""
    last = request.last_message
    last_text = "none" if last is None else f"{last.type}: {last.content[:200]!r}"
    return (
        f"No scripted rule matches the request of flow '{request.flow}', step "
        f"'{request.step}', model '{request.selection.name}'. Last message: {last_text}. "
        f"System prompt starts: {request.system_prompt[:120]!r}."
    )
