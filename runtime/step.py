"""Steps: the stages of a flow.

A :class:`Step` subclass owns a prompt, tools, state, a memory namespace and a model
selection. One instance per class lives in a flow instance (itself alive for one turn);
hooks are ``async`` so they may call models or child steps.

Only top-level code moves the cursor: a step run as a child (``run_step``) must return a
result to its owner instead of routing.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import BaseModel

from . import current
from .barrier import (
    CancelToken,
    Channel,
    Checkpoint,
    FailurePolicy,
    ParallelBatchResult,
    ParallelInvocation,
    RunStepRequest,
    barrier_options,
    current_view,
    run_barrier,
)
from .errors import ExecutionFrameError, FlowDefinitionError
from .jsonutil import deep_merge, get_path
from .llm import ModelResponse, ModelSelection
from .messages import Message, human_message, system_message
from .tools import ToolSpec, define_tool, tool
from .transitions import Transition, go

if TYPE_CHECKING:
    from .flow import Flow

_NAMESPACE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,127}$")
_RESERVED_NAMESPACES = frozenset({"__proto__", "constructor", "prototype"})

TERMINATE_SESSION_TOOL = define_tool(
    "terminate_session",
    "End the conversation when the user wants to stop. `prompt` tells the closing step "
    "what to say.",
    prompt=(str, ""),
)
"""Defined by every flow; a step offers it to its model by listing it in ``use_tools()``."""

#: What a hook may return to route: a transition, a step class (go there), or a reply.
Routable = Transition | type["Step"] | str | None


class Step:
    """Base class of every step.

    Subclasses override hooks; the class attribute ``id`` (default: the class name) is the
    step's registered name and is what the session document records.
    """

    id: ClassVar[str] = "Step"
    content_type: str = "text/plain"
    """Content type of replies produced while this step is current."""
    # What the constructor sets, as class defaults too: a fan-out makes its branches'
    # instances without calling Step's own constructor (one per branch).
    _namespace: str | None = None
    _model: ModelSelection | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" not in cls.__dict__:
            cls.id = cls.__name__

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self._namespace: str | None = None
        self._model: ModelSelection | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} step of {self.flow.id}>"

    @property
    def name(self) -> str:
        """The registered step name."""
        return type(self).id

    # -- configuration (chainable, used in Flow.define_steps) -------------------------------

    def use_memory(self, namespace: str) -> Self:
        """Select the memory namespace this step reads and writes (default: its name)."""
        if not _NAMESPACE.match(namespace) or namespace in _RESERVED_NAMESPACES:
            raise FlowDefinitionError(
                f"Invalid memory namespace {namespace!r}: use a letter followed by up to 127 "
                "letters, digits, '_' or '-'."
            )
        self._namespace = namespace
        return self

    def use_model(self, selection: ModelSelection | dict[str, Any]) -> Self:
        """Override the flow's model for this step."""
        self._model = ModelSelection.model_validate(selection)
        return self

    def get_memory_space(self) -> str:
        """The memory namespace in use."""
        return self._namespace or self.name

    def get_model_selection(self) -> ModelSelection:
        """The resolved selection: the flow's, merged with this step's override."""
        return self.flow.model_selection().merged_with(self._model)

    @property
    def model_override(self) -> ModelSelection | None:
        """This step's own selection, if it overrides the flow's."""
        return self._model

    # -- hooks ---------------------------------------------------------------------------

    def get_prompt(self) -> str | None:
        """System prompt, asked before every model call. Default: the ``_prompt`` state."""
        prompt = self.get_state("_prompt")
        return prompt if isinstance(prompt, str) else None

    def define_tools(self) -> list[ToolSpec]:
        """Schema-only tool definitions this step contributes to the flow's registry."""
        return []

    def use_tools(self) -> list[str]:
        """Names of registered tools to expose besides the decorated handlers."""
        return []

    def output_schema(self) -> type[BaseModel] | None:
        """A pydantic model for structured output; ``on_response`` then gets an instance."""
        return None

    def is_logic(self) -> bool:
        """True for steps that run code instead of calling a model."""
        return False

    def is_end(self) -> bool:
        """Whether the session is finished while this step is current."""
        return self.flow.run_status == "completed"

    def check_response(self, response: ModelResponse) -> bool:
        """Gate on a raw model response: return True to reject it and retry."""
        return False

    def call_timeout(self) -> float | None:
        """Per-attempt model-call timeout in seconds (default: the flow's)."""
        return self.flow.call_timeout()

    async def on_start(self) -> Message | None:
        """New session, initial step only: enter, then cross with no message."""
        await self.on_enter()
        return await self.on_crossing(None, None)

    async def on_restore(self) -> None:
        """Restored session, current step only."""

    async def on_enter(self) -> None:
        """The step became current (goto) or was entered as a child."""

    async def on_exit(self) -> None:
        """The step stopped being current."""

    async def on_crossing(self, message: Message | None, prior_step: str | None) -> Message | None:
        """Transform the message carried across a step boundary.

        Default: with no message, and when the last message in this namespace was not this
        step's, synthesise a human "Start" so the model has something to answer.
        """
        if message is None:
            last = self.get_last_message()
            if last is None or last.step_name != self.name:
                return human_message(self.name, "Start")
        return message

    async def on_response(self, result: Any) -> Routable:
        """A model answer without tool calls. Return the reply text, or route."""
        if isinstance(result, BaseModel):
            return result.model_dump_json()
        return result if isinstance(result, str) else str(result)

    async def should_retry_model_error(self, error: Exception, attempt: int) -> bool | None:
        """Whether to retry a failed attempt; None defers to the flow."""
        return None

    async def on_model_error(self, error: Exception) -> str | None:
        """Every attempt failed: return reply text to recover, or None to defer to the flow."""
        return None

    async def on_model_blocked(self, error: Exception) -> str | None:
        """The provider refused: return reply text to recover, or None to defer to the flow."""
        return None

    @tool(TERMINATE_SESSION_TOOL, expose=False)
    async def terminate_session(self, prompt: str = "") -> Transition:
        """Go to the closing step; ``prompt`` tells it what to say."""
        transition = go(TerminateSessionStep)
        return transition.with_prompt(prompt) if prompt else transition

    # -- state ---------------------------------------------------------------------------

    def get_state(self, key: str | None = None) -> Any:
        """A copy of this step's state, or of the value at a dotted ``key`` path.

        In a parallel branch: its own drafts over the fork-time view.
        """
        return copy.deepcopy(get_path(current.turn_of(self.flow).peek_step_state(self.name), key))

    def save_state(self, data: dict[str, Any] | None) -> None:
        """Save state: the first key is replaced, the other keys deep-merged.

        An empty ``data`` is a no-op. Values must be plain JSON. In a parallel branch each
        top-level field written is a *proposed replacement*, published at the join; two
        branches replacing one field conflict.
        """
        if not data:
            return
        stored = current.turn_of(self.flow).peek_step_state(self.name)
        first = next(iter(data))
        updates = {
            name: deep_merge(stored[name], value)
            if name != first and isinstance(value, dict) and isinstance(stored.get(name), dict)
            else value
            for name, value in data.items()
        }
        current.turn_of(self.flow).write_step_fields(self.name, updates)

    def remove_state(self, key: str) -> None:
        """Delete one top-level field of this step's state (in a branch: a proposal)."""
        if key in current.turn_of(self.flow).peek_step_state(self.name):
            current.turn_of(self.flow).write_step_fields(self.name, {}, (key,))

    def save_transient_state(self, data: dict[str, Any]) -> None:
        """Merge values that live for this turn only (never persisted, never published)."""
        turn = current.turn_of(self.flow)
        transient = deep_merge(turn.peek_step_state(self.name).get("_transient", {}), data)
        turn.write_step_fields(self.name, {"_transient": transient})

    def get_transient_state(self, key: str | None = None) -> Any:
        """This turn's transient state, or the value at ``key``."""
        return get_path(self.get_state("_transient") or {}, key)

    def contribute_state(self, field: str, value: Any) -> None:
        """Contribute ``value`` to a reduced channel declared in
        :meth:`parallel_state_channels`; contributions reduce at the join in request-path
        order. Outside a branch the reducer applies at once."""
        current.turn_of(self.flow).contribute_step_state(self.name, field, value)

    # -- parallel ------------------------------------------------------------------------

    def parallel_state_channels(self) -> dict[str, Channel]:
        """Reduced channels of this step's state: ``{field: StepChannels.sum(), ...}``."""
        return {}

    def parallel_params_schema(self) -> type[BaseModel] | None:
        """A pydantic model validating the ``params`` of requests for this step."""
        return None

    def parallel_invocation(self) -> ParallelInvocation:
        """This branch's params, key, index, path, cancel token and idempotency key.

        Raises:
            ExecutionFrameError: outside a parallel branch.
        """
        view = current_view.get()
        if view is None or view.step != self.name:
            raise ExecutionFrameError(
                f"parallel_invocation() is only available inside a run_steps() branch "
                f"(step '{self.name}')."
            )
        return view.invocation(self.flow.session_id)

    async def run_steps(
        self,
        requests: Sequence[RunStepRequest | Mapping[str, Any]],
        *,
        failure_policy: FailurePolicy = "retain-successes",
        checkpoint: Checkpoint = "none",
        max_concurrency: int | None = None,
        cancel: CancelToken | None = None,
        branch_timeout: float | None = None,
        token_budget: int | None = None,
        ledger: bool | None = None,
    ) -> ParallelBatchResult:
        """Fork child steps into private views and join them at one barrier.

        Each request (a :class:`RunStepRequest` or a dict with ``step``, ``key``,
        ``params``, ``user_message``) gets a fresh step instance, a private copy of its
        own state, read-only snapshots of everything else and a private memory clone.
        Results come back in request order. ``retain-successes`` publishes the fulfilled
        branches' state, ``atomic`` nothing if any branch was rejected; conflicts, invalid
        shared mutations and reducer failures raise a ``BarrierInvalidError`` and publish
        nothing. A nested barrier publishes into its caller's private scope.

        Args:
            requests: the branches, in request order.
            failure_policy: ``retain-successes`` (default) or ``atomic``.
            checkpoint: ``root-join`` saves the session right after a root join publishes.
            max_concurrency: branches running at once; queued ones start in request order.
            cancel: a token to cancel the barrier cooperatively.
            branch_timeout: seconds per branch; a late branch is rejected with a timeout.
            token_budget: tokens the whole barrier may spend; past it branches are cancelled.
            ledger: write fulfilled branches to the branch ledger, so that
                ``FlowEngine.resume`` of this turn, interrupted or failed, reuses them
                instead of running them again (None: the flow's ``ParallelConfig.ledger``).
                Needs a store that keeps ledgers (the built-in ones do).
        """
        options = barrier_options(policy=failure_policy, checkpoint=checkpoint,
                                  max_concurrency=max_concurrency,
                                  branch_timeout=branch_timeout, token_budget=token_budget,
                                  ledger=ledger)
        return await run_barrier(current.turn_of(self.flow), self.name, requests, options, cancel)

    def get_context(self, path: str | None = None) -> Any:
        """Read the flow context (``config.x``)."""
        return self.flow.get_context(path)

    # -- memory --------------------------------------------------------------------------

    def get_memory(self) -> list[Message]:
        """The live history of this step's namespace; slot 0 is the system message."""
        history = self.flow.get_memory(self.get_memory_space())
        if not history:
            history.append(system_message(""))
        return history

    def get_last_message(self) -> Message | None:
        """The newest message of the namespace, ignoring the system slot."""
        history = self.get_memory()
        return history[-1] if len(history) > 1 else None

    def erase_memory(self) -> None:
        """Empty the namespace (the system slot is re-seeded on the next call)."""
        del self.get_memory()[:]

    # -- running -------------------------------------------------------------------------

    async def run(self, user_message: str | None = None) -> str:
        """Run the model/tool loop for this step; returns the reply text."""
        message = human_message(self.name, user_message) if user_message else None
        return await current.run_loop(self.flow, message)

    async def run_step(self, step: type[Step] | str, user_message: str | None = None) -> str:
        """Run a registered step as a sequential child and return its final answer.

        The child runs in a child execution frame: it must not route (``go`` raises), and
        its state writes go straight to the canonical state of this turn.
        """
        return await current.turn_of(self.flow).run_child(self, step, user_message)

    def session_completed(self) -> None:
        """Mark the session completed."""
        self.flow.mark_completed()


class LogicStep(Step):
    """A step that runs code instead of calling a model."""

    def is_logic(self) -> bool:
        return True

    async def run_logic(self) -> Routable:
        """Do the work; return a transition to continue elsewhere, or the reply text."""
        raise FlowDefinitionError(f"LogicStep '{self.name}' must implement run_logic().")


DEFAULT_CLOSING_PROMPT = (
    "The conversation is over. Thank the user briefly and say goodbye. Do not ask questions."
)


class TerminateSessionStep(Step):
    """Marks the session completed on entry; its model call writes the closing reply.

    Its prompt is the ``_prompt`` a transition left (``go(TerminateSessionStep)
    .with_prompt(...)``), else a built-in closing line.
    """

    async def on_enter(self) -> None:
        self.flow.mark_completed()

    def is_end(self) -> bool:
        return True

    def get_prompt(self) -> str | None:
        return super().get_prompt() or DEFAULT_CLOSING_PROMPT
