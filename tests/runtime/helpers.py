"""Helpers of the runtime tests: a scripted test flow base, engine builder, probe models."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import anyio

from runtime import (
    Flow,
    FlowEngine,
    MemorySessionStore,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSelection,
    ModelTransportError,
    Rule,
    ScriptedModel,
    SessionDocument,
    SessionStore,
    TokenUsage,
)

PROVIDER = "scripted"
MODEL_NAME = "test-model"
MODEL = ModelSelection(provider=PROVIDER, name=MODEL_NAME)


class ScriptedFlow(Flow):
    """Base of the test flows: the scripted provider, no delay between attempts."""

    retry_delay = 0

    def config_model(self) -> ModelSelection:
        return MODEL


def make_engine(
    *flows: type[Flow],
    rules: Iterable[Rule] = (),
    store: SessionStore | None = None,
    model: Model | None = None,
) -> tuple[FlowEngine, ScriptedModel]:
    """An engine running ``flows`` with a scripted model registered for provider "scripted".

    ``model`` replaces the scripted model as the provider's model (the scripted one is still
    returned, unused), for tests that need a hand-written model.
    """
    scripted = ScriptedModel(list(rules))
    engine = FlowEngine(
        flows=flows, providers={PROVIDER: model or scripted}, store=store or MemorySessionStore()
    )
    return engine, scripted


def usage(total: int) -> TokenUsage:
    """A token record of ``total`` tokens (one input token, the rest output)."""
    return TokenUsage(input_tokens=1, output_tokens=total - 1, total_tokens=total)


async def load(engine: FlowEngine, session_id: str) -> SessionDocument:
    """The stored document of ``session_id``; fails the test when there is none."""
    doc = await engine.store.load(session_id)
    assert doc is not None, f"session {session_id!r} is not stored"
    return doc


def memory(doc: SessionDocument, namespace: str) -> list[Message]:
    """The stored messages of one namespace (system slot included)."""
    return doc.flow.memory[namespace].messages


def contents(messages: Sequence[Message], *types: str) -> list[str]:
    """Texts of ``messages``, optionally only of the given message types."""
    return [m.content for m in messages if not types or m.type in types]


def warnings_of(doc: SessionDocument) -> list[str]:
    """The session's warning lines."""
    return [entry.message for entry in doc.warn]


class RecordingStore(MemorySessionStore):
    """A memory store that keeps a copy of every document it saves, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[SessionDocument] = []

    async def save(self, doc: SessionDocument, expected_revision: int) -> int:
        revision = await super().save(doc, expected_revision)
        self.saved.append(doc.model_copy(deep=True, update={"revision": revision}))
        return revision


class FailingModel:
    """Raises ``error`` for the first ``failures`` calls, then answers ``text``."""

    def __init__(
        self, failures: int, text: str = "recovered", error: Exception | None = None
    ) -> None:
        self.failures = failures
        self.text = text
        self.error = error or ModelTransportError("transport broke")
        self.calls = 0

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return ModelResponse(content=self.text, usage=usage(10))


class SlowModel:
    """Sleeps ``delay`` seconds on each of its first ``slow_calls`` calls, then answers.

    ``outcomes`` has one entry per call, in call order: ``"answered"``, or ``"cancelled"``
    when the call was cancelled in its sleep. A test tells a timeout that stops the call
    from one that waits it out by these, not by a clock.
    """

    def __init__(self, delay: float, slow_calls: int = 1_000, text: str = "slow answer") -> None:
        self.delay = delay
        self.slow_calls = slow_calls
        self.text = text
        self.calls = 0
        self.outcomes: list[str] = []

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.slow_calls:
            try:
                await anyio.sleep(self.delay)
            except anyio.get_cancelled_exc_class():
                self.outcomes.append("cancelled")
                raise
        self.outcomes.append("answered")
        return ModelResponse(content=self.text, usage=usage(3))


class GateModel:
    """Answers ``text`` for each request, but only once ``release`` is set.

    ``entered`` is set when the first request arrives, so a test knows the turn is paused
    inside its model call. Every request is kept in ``requests``.
    """

    def __init__(self, text: str = "gated answer") -> None:
        self.text = text
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.requests: list[ModelRequest] = []

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        self.entered.set()
        await self.release.wait()
        last = request.last_message
        return ModelResponse(content=f"{self.text}: {last.content if last else ''}")


def last_texts(requests: Sequence[ModelRequest]) -> list[str]:
    """The last message text of each request."""
    return [r.last_message.content if r.last_message else "" for r in requests]


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``condition()`` until it holds, on either backend. ``timeout`` only ends a wait
    that would never end (the failure names ``what``); it bounds no behaviour."""
    try:
        with anyio.fail_after(timeout):
            while not condition():
                await anyio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None
