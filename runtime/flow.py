"""Flows: a registry of steps, the durable cursor and the session of one turn.

A :class:`Flow` instance lives for exactly one turn: the engine constructs it, binds it to
a session document, runs the current step, and saves. Nothing survives the turn but the
document.

This class is what users subclass, so it holds only the documented hooks and helpers (a
test pins the list). The engine's side of a turn lives on its
:class:`~runtime.turn.Turn`, out of reach of accidental overrides.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel

from . import events as ev
from .barrier import ParallelConfig, current_view
from .concurrent import ChildReply, ConcurrentResult, run_concurrent
from .current import turn_of
from .errors import ExecutionFrameError, FlowDefinitionError
from .jsonutil import deep_merge, get_path, json_copy
from .llm import Model, ModelSelection, TokenUsage
from .messages import Message
from .session import SESSION_DOC_VERSION, LogEntry, RunStatus, SequenceEntry, SessionDocument
from .step import Step, TerminateSessionStep
from .tools import ToolSpec
from .turn import frames

if TYPE_CHECKING:
    from .engine import FlowEngine

T = TypeVar("T")


class Flow:
    """Base class of every flow. Subclass it, implement :meth:`config_model` and
    :meth:`define_steps`, and register the class with a :class:`~runtime.FlowEngine`.
    """

    id: ClassVar[str] = "Flow"
    max_model_calls_per_turn: ClassVar[int] = 50
    """Guard against routing loops: more model calls than this in one turn fail it."""
    retry_delay: ClassVar[float] = 0.5
    """Seconds between model-call attempts."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "id" not in cls.__dict__:
            cls.id = cls.__name__

    # -- hooks ---------------------------------------------------------------------------

    def config_model(self) -> ModelSelection:
        """The flow's default model selection. Every flow with model steps overrides it."""
        raise FlowDefinitionError(f"Flow '{self.id}' must implement config_model().")

    def define_steps(self) -> Sequence[Step | type[Step]]:
        """The step registry: instances (``XStep(self).use_memory(...)``) or classes."""
        return [TerminateSessionStep(self).use_memory("temp")]

    def initial_step(self) -> type[Step] | str | None:
        """Entry step of a new session; default: the first registered step."""
        return None

    def define_tools(self) -> list[ToolSpec]:
        """Flow-level tool definitions shared by the steps."""
        return []

    async def init(self) -> None:
        """Called after the context is added, before the steps are collected."""

    async def on_restore_session_doc(self, doc: SessionDocument) -> SessionDocument | None:
        """Migrate a stored document before it is restored; None starts a new session."""
        return doc if doc.version == SESSION_DOC_VERSION else None

    def call_timeout(self) -> float | None:
        """Per-attempt model-call timeout in seconds; None means no timeout."""
        return None

    def config_parallel_execution(self) -> ParallelConfig:
        """Limits for run_steps(): depth, invocations per turn, grace, model-call quota."""
        return ParallelConfig()

    async def should_retry_model_error(self, error: Exception, attempt: int) -> bool | None:
        """Flow-level retry decision after the step's; None means the default (retry)."""
        return None

    async def on_model_error(self, error: Exception) -> str | None:
        """Flow-level recovery after the step's; return reply text or None."""
        return None

    async def on_model_blocked(self, error: Exception) -> str | None:
        """Flow-level recovery for refusals after the step's; return reply text or None."""
        return None

    def config_schema(self) -> type[BaseModel] | None:
        """The pydantic model of the request's ``config`` (``FlowEngine.run(config=...)``,
        kept in the context as ``config``); None accepts any JSON object unchecked.

        A config that does not validate fails the request before it touches a session
        (:class:`~runtime.errors.ConfigValidationError`); one that does is kept as given
        (fields not sent stay unset; :meth:`get_config` fills in the defaults). Dashboards
        build their start forms from its JSON Schema. Called on an unbound instance: use no
        session or context here. (Not :meth:`config_model`, which selects the model.)
        """
        return None

    def example_messages(self) -> list[str]:
        """Messages worth sending to this flow, offered by start forms; default none."""
        return []

    def needs_message(self) -> bool:
        """Whether a turn needs a non-blank message; an empty one then fails the request
        (:class:`~runtime.errors.MessageRequiredError`). Default False."""
        return False

    def model_providers(self) -> Mapping[str, Model]:
        """Models this flow brings, by provider name: for this flow's calls they come
        before the engine's providers (an engine's model override still answers first).
        Asked once, when the flow is registered, on an unbound instance."""
        return {}

    # -- context -------------------------------------------------------------------------

    def get_config(self) -> Any:
        """The request config with :meth:`config_schema` applied (a model instance, defaults
        filled in), or a copy of the raw config dict (``{}`` when none) without a schema."""
        config = self.get_context("config") or {}
        schema = self.config_schema()
        return config if schema is None else schema.model_validate(config)

    def get_context(self, path: str | None = None) -> Any:
        """A copy of the flow context, or the value at a dotted path (``config.x``)."""
        return copy.deepcopy(get_path(turn_of(self).context, path))

    def add_context(self, data: dict[str, Any]) -> None:
        """Merge into the context. Only before the session is bound: it is frozen after."""
        view = current_view.get()
        if view is not None:
            raise view.violate("change the flow context")
        turn = turn_of(self)
        if turn.doc is not None:
            raise FlowDefinitionError(
                "The flow context is frozen once the session is bound; set it in init()."
            )
        turn.context = deep_merge(turn.context, json_copy(data, "Flow context"))

    # -- steps, tools and the cursor -----------------------------------------------------

    @property
    def steps(self) -> dict[str, Step]:
        """Registered steps by name."""
        return dict(turn_of(self).steps)

    def require_step(self, target: str | type[Step]) -> Step:
        """The registered step for a class or name."""
        return turn_of(self).require_step(target)

    def require_tool(self, name: str) -> ToolSpec:
        """The registered tool definition called ``name``."""
        return turn_of(self).tools.require(name)

    @property
    def current_step_name(self) -> str | None:
        """The durable cursor."""
        return turn_of(self).require_doc().flow.current_step

    def require_current_step(self) -> Step:
        """The step under the cursor."""
        name = self.current_step_name
        if name is None:
            raise FlowDefinitionError(f"Flow '{self.id}' has no current step.")
        return self.require_step(name)

    def get_executing_step(self) -> Step | None:
        """The innermost execution frame's step, else the cursor's."""
        stack = frames.get()
        if stack:
            return stack[-1]
        return self.require_current_step() if self.current_step_name else None

    def require_executing_step(self) -> Step:
        """Like :meth:`get_executing_step`, but never None."""
        step = self.get_executing_step()
        if step is None:
            raise FlowDefinitionError(f"Flow '{self.id}' has no executing step.")
        return step

    async def goto(self, target: str | type[Step]) -> None:
        """Move the cursor: ``on_exit`` of the old step, trail entry, ``on_enter`` of the new.

        Raises:
            ExecutionFrameError: from inside a child execution frame.
        """
        turn = turn_of(self)
        step = self.require_step(target)
        view = current_view.get()
        if view is not None:
            raise view.violate(f"move the cursor (to '{step.name}')")
        if frames.get():
            raise ExecutionFrameError(
                f"Cannot goto '{step.name}' from a child execution frame. "
                "Return a result to the owning step instead."
            )
        if step.name == self.current_step_name:
            return
        current = self.require_current_step() if self.current_step_name else None
        if current is not None:
            await current.on_exit()
            turn.emit(ev.StepExited, step=current.name)
        record = turn.require_doc().flow
        record.sequence.append(SequenceEntry(level=1, step_name=step.name))
        turn.emit(ev.CursorMoved, from_step=record.current_step, to_step=step.name)
        record.current_step = step.name
        turn.emit(ev.StepEntered, step=step.name, level=1, how="goto")
        await step.on_enter()

    # -- state and memory ----------------------------------------------------------------

    def read_step_state(self, name: str) -> dict[str, Any]:
        """A private copy of a step's state, as the executing code sees it."""
        return copy.deepcopy(dict(turn_of(self).peek_step_state(name)))

    def get_step_state(self, step: type[Step] | str, key: str | None = None) -> Any:
        """Another step's state (a copy), or the value at ``key``."""
        return self.require_step(step).get_state(key)

    def save_step_state(self, step: type[Step] | str, data: dict[str, Any]) -> None:
        """Save into another step's state with :meth:`Step.save_state` semantics."""
        self.require_step(step).save_state(data)

    def save_transient_step_state(self, step: type[Step] | str, data: dict[str, Any]) -> None:
        """Merge this-turn-only values into another step's transient state."""
        self.require_step(step).save_transient_state(data)

    def get_memory(self, namespace: str) -> list[Message]:
        """The live history of a namespace (created empty on first use).

        In a parallel branch: a private clone of the caller's, discarded at the end.
        """
        return turn_of(self).get_memory(namespace)

    def model_selection(self) -> ModelSelection:
        """The flow's resolved default selection."""
        return turn_of(self).model_selection()

    # -- session -------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """Id of the bound session."""
        return turn_of(self).require_doc().id

    @property
    def run_status(self) -> RunStatus:
        """``running``, ``completed`` or ``aborted``."""
        return turn_of(self).require_doc().run_status

    @property
    def sequence(self) -> list[SequenceEntry]:
        """The execution trail (a copy)."""
        return list(turn_of(self).require_doc().flow.sequence)

    @property
    def tokens(self) -> TokenUsage:
        """Token totals of the session, attempted work included."""
        return turn_of(self).require_doc().tokens

    def get_session_doc(self) -> SessionDocument:
        """The bound session document (live: the engine saves it)."""
        return turn_of(self).require_doc()

    def mark_completed(self) -> None:
        """Mark the session completed; the next message starts a new session."""
        view = current_view.get()
        if view is not None:
            raise view.violate("complete the session")
        turn_of(self).require_doc().run_status = "completed"

    def warn(self, message: str, **extra: Any) -> None:
        """Append a warning to the session log."""
        turn_of(self).require_doc().warn.append(
            LogEntry.model_validate({**extra, "level": "warn", "message": message})
        )

    def log(self, message: str, **extra: Any) -> None:
        """Append an informational line to the session log."""
        turn_of(self).require_doc().log.append(
            LogEntry.model_validate({**extra, "level": "log", "message": message})
        )

    def require_engine(self) -> FlowEngine:
        """The engine running this turn."""
        return turn_of(self).require_engine()

    async def save_session(self, reason: str = "crossing") -> None:
        """Compare-and-swap save of the session; branches and child frames never save."""
        view = current_view.get()
        if view is not None:
            raise view.violate("save the session")
        if frames.get():
            raise ExecutionFrameError("A child execution frame cannot save the session.")
        await turn_of(self).checkpoint(reason)

    # -- coordinator mode ------------------------------------------------------------------

    async def spawn_steps(self) -> str:
        """The coordinator's body: a turn whose request config has a truthy ``_concurrent``
        runs this instead of the current step, and its reply is what this returns.
        Override it to call :meth:`concurrent_steps`; the default refuses."""
        raise FlowDefinitionError(
            f"Flow '{self.id}' was asked to coordinate (config _concurrent) but defines no "
            "spawn_steps().")

    async def concurrent_steps(
        self, items: Sequence[T], *, batch_size: int,
        on_config: Callable[[T], Mapping[str, Any]],
        on_response: Callable[[T, ChildReply], Awaitable[None] | None] | None = None,
        timeout: float = 300.0, retries: int = 2, backoff: float = 0.5,
        flow_name: str | None = None, max_depth: int = 2,
        token: str | Callable[[T], str | None] | None = None,
    ) -> ConcurrentResult:
        """Send each item as an independent flow request to the app's own ``/ai/run``, in
        batches of ``batch_size`` (one batch after another, a batch's items at once).

        ``on_config(item)`` builds each child's config; ``on_response(item, reply)`` gets
        each child's :class:`~runtime.concurrent.ChildReply` as it ends, failures
        included (``reply.status`` says how it ended). ``timeout`` bounds one child's
        request (seconds); ``retries`` resends only what is safe to resend (no
        connection, 429, 503), after ``backoff`` seconds doubling; ``flow_name`` is the
        children's flow (default: this one). The app's URL and token come from
        ``PICOFLOW_SELF_URL`` and ``PICOFLOW_SELF_TOKEN`` (or the engine's ``self_url``
        and ``self_token``); ``token`` is another token, or a function of the item giving
        one (None: the default). ``max_depth`` bounds chains of coordinators. See
        :mod:`runtime.concurrent`.
        """
        return await run_concurrent(
            self, items, batch_size=batch_size, on_config=on_config, on_response=on_response,
            timeout=timeout, retries=retries, backoff=backoff, flow_name=flow_name,
            max_depth=max_depth, token=token)
