"""The engine: flow registry, model registry, session store and per-session lock.

:meth:`FlowEngine.run` is the one entry point of a turn. It never raises for flow or
session problems: it returns a failure :class:`RunReply` (``success=False``), and for
errors inside the flow it first marks the session aborted and saves it.

A turn run with a cancel token ends *cancelled* once the token fires (:mod:`runtime.stop`
says how its step is stopped): ``turn.cancelled`` is its last event and the reply has
``error_code="turn_cancelled"``. It is no failure: the session is neither marked aborted
nor saved again, so it stays at its last saved revision and takes the next turn as if this
one had not been sent (root-join checkpoints its barriers saved stay saved).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
from pydantic import BaseModel, ValidationError

from . import events as ev
from .barrier import CancelToken
from .barrier.ledger import LedgerEntry, TurnLedger
from .concurrent import COORDINATOR_KEY, RESERVED_KEYS
from .current import turn_of
from .errors import (
    BadRunIdError,
    BadSessionIdError,
    ConfigValidationError,
    FlowDefinitionError,
    FlowInputError,
    FlowNotRegisteredError,
    MessageRequiredError,
    NothingToResumeError,
    ParallelConfigurationError,
    PicoFlowError,
    SessionConflictError,
    SessionFlowInvariantError,
    SessionFlowMismatchError,
    TurnCancelledError,
)
from .events import DashboardSink, EventBus, EventSink, error_info
from .events.dashboard import close_timeout_from_env
from .flow import Flow
from .jsonutil import lone_surrogate_in
from .llm import Model, ModelSelection
from .session import LogEntry, SessionDocument
from .stop import run_step
from .stores import BranchLedgerStore, LedgerTurn, MemorySessionStore, SessionStore
from .turn import StoreLedgerWriter, Turn

logger = logging.getLogger("picoflow")

ModelOverride = Model | Callable[[str], Model | None]


class RunReply(BaseModel):
    """The reply envelope of one turn."""

    success: bool
    completed: bool
    message: str
    session_id: str
    content_type: str = "text/plain"
    error_code: str | None = None
    """On failure: the :class:`~runtime.errors.PicoFlowError` code (or ``internal``)."""


class Resumable(BaseModel):
    """A session's interrupted (or failed, or stopped) ledgered turn
    (:meth:`FlowEngine.resumable`)."""

    session_id: str
    turn_id: str
    """The turn's first run (its ledger entries are kept under it across resumes)."""
    run_id: str
    """The turn's latest run: the one :meth:`FlowEngine.resume` resumes."""
    flow: str
    message: str | None
    revision: int
    """The session revision the turn began from (where a resume starts)."""
    entries: int
    """Fulfilled branches the ledger holds."""
    tokens: int
    """Tokens those branches spent: what a resume saves."""


class FlowInfo(BaseModel):
    """What a client needs to start a flow: its id, what it is, its config and messages."""

    id: str
    description: str = ""
    """The first paragraph of the flow class's docstring."""
    config_schema: dict[str, Any] | None = None
    """JSON Schema of the config (:meth:`Flow.config_schema`); None: any JSON object."""
    example_messages: list[str] = []
    needs_message: bool = False


class FlowEngine:
    """Runs turns of registered flows against a session store.

    Args:
        flows: flow classes to register.
        providers: models by provider name; a request's ``selection.provider`` picks one.
        store: the session store (default: in-memory).
        model_override: a model (or ``flow_name -> model`` function) that answers every
            call regardless of selection — how the embedded default plays scripted
            conversations against flows written for real providers.
        sinks: event sinks receiving every turn's events (see :mod:`runtime.events`).
        ship_to_dashboard: whether to attach the dashboard sink the environment names
            (below); the dashboard's own engine says False, not to send to itself.
        max_invocations: a cap on the branches one turn may fork, over every flow: a turn's
            limit is the lower of this and its flow's ``ParallelConfig.max_invocations``
            (None: the flow's alone). Past it a fork raises ``ParallelLimitError``.

    When ``PICOFLOW_DASHBOARD_URL`` and ``PICOFLOW_DASHBOARD_TOKEN`` are both set, the
    engine also ships every turn's events to that dashboard through one
    :class:`~runtime.events.DashboardSink` of its own (:attr:`dashboard`), which
    :meth:`close` flushes and closes. With ``PICOFLOW_OTEL=1`` it sends them as
    OpenTelemetry spans too (:attr:`otel`: ``runtime.integrations.otel``, the ``otel``
    extra, configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables).
    """

    def __init__(
        self,
        *,
        flows: Iterable[type[Flow]] = (),
        providers: Mapping[str, Model] | None = None,
        store: SessionStore | None = None,
        model_override: ModelOverride | None = None,
        sinks: Iterable[EventSink] = (),
        ship_to_dashboard: bool = True,
        max_invocations: int | None = None,
        self_url: str | None = None,
        self_token: str | None = None,
    ) -> None:
        if max_invocations is not None and (
                isinstance(max_invocations, bool) or not isinstance(max_invocations, int)
                or max_invocations < 1):
            raise ParallelConfigurationError(
                f"FlowEngine(max_invocations=...) must be a positive integer or None, not "
                f"{max_invocations!r}.")
        self.max_invocations = max_invocations
        self.self_url, self.self_token = self_url, self_token
        """Where ``concurrent_steps()`` sends children (default: ``PICOFLOW_SELF_URL`` and
        ``PICOFLOW_SELF_TOKEN``)."""
        """The engine-wide cap on branches per turn (None: each flow's own limit)."""
        self.store: SessionStore = store or MemorySessionStore()
        self._flows: dict[str, type[Flow]] = {}
        self._providers: dict[str, Model] = dict(providers or {})
        self._flow_providers: dict[str, dict[str, Model]] = {}
        self._override = model_override
        self.sinks: list[EventSink] = list(sinks)
        """Event sinks that receive every turn's events."""
        self.dashboard: DashboardSink | None = dashboard_from_env() if ship_to_dashboard \
            else None
        """The sink to the dashboard named by the environment, if any."""
        if self.dashboard is not None:
            self.sinks.append(self.dashboard)
        self.otel: EventSink | None = otel_from_env()
        """The OpenTelemetry sink ``PICOFLOW_OTEL=1`` switches on, if any."""
        if self.otel is not None:
            self.sinks.append(self.otel)
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}
        for flow in flows:
            self.register_flow(flow)

    # -- registries ----------------------------------------------------------------------

    def register_flow(self, flow: type[Flow], *, replace: bool = False) -> None:
        """Register a flow class under its ``id``, with the models it brings."""
        if not (isinstance(flow, type) and issubclass(flow, Flow)):
            raise FlowDefinitionError(f"{flow!r} is not a Flow subclass.")
        if flow.id in self._flows and not replace:
            raise FlowDefinitionError(f"Flow '{flow.id}' is already registered.")
        providers: dict[str, Model] = {}
        if flow.model_providers is not Flow.model_providers:
            providers = dict(flow().model_providers())
            for name, model in providers.items():
                if not isinstance(name, str) or not name or not isinstance(model, Model):
                    raise FlowDefinitionError(
                        f"model_providers() of flow '{flow.id}' must map provider names to "
                        f"models; {name!r} maps to {model!r}.")
        self._flows[flow.id] = flow
        self._flow_providers[flow.id] = providers

    def get_flow_names(self) -> list[str]:
        """Registered flow names, in registration order."""
        return list(self._flows)

    def get_flow(self, name: str) -> type[Flow]:
        """The flow class registered as ``name``."""
        try:
            return self._flows[name]
        except KeyError:
            raise FlowNotRegisteredError(f"Flow '{name}' is not registered.") from None

    def register_provider(self, name: str, model: Model) -> None:
        """Register (or replace) the model serving provider ``name``."""
        self._providers[name] = model

    def resolve_model(self, flow_name: str, selection: ModelSelection) -> Model:
        """The model that answers ``selection`` for ``flow_name``."""
        if self._override is not None:
            model = self._override if isinstance(self._override, Model) else self._override(
                flow_name
            )
            if model is not None:
                return model
        own = self._flow_providers.get(flow_name) or {}
        model = own.get(selection.provider) or self._providers.get(selection.provider)
        if model is None:
            known = sorted({*own, *self._providers})
            raise FlowDefinitionError(
                f"Model provider '{selection.provider}' is not registered "
                f"(known: {', '.join(known) or 'none'})."
            )
        return model

    def flow_info(self, name: str) -> FlowInfo:
        """What a start form needs to know about flow ``name``."""
        flow = self.get_flow(name)()
        schema = flow.config_schema()
        doc = (type(flow).__doc__ or "").strip().split("\n\n", 1)[0]
        return FlowInfo(
            id=name, description=" ".join(doc.split()),
            config_schema=schema.model_json_schema() if schema is not None else None,
            example_messages=[str(m) for m in flow.example_messages()],
            needs_message=bool(flow.needs_message()),
        )

    def check_input(
        self, flow_name: str, message: str | None, config: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Check a request against the flow before running it; returns the config to run.

        Raises:
            FlowNotRegisteredError: no such flow.
            MessageRequiredError: the flow needs a message and ``message`` is blank.
            ConfigValidationError: ``config`` does not match the flow's config schema.
        """
        return _checked_input(self.get_flow(flow_name)(), message, config)

    # -- turns ---------------------------------------------------------------------------

    async def run(
        self,
        flow_name: str,
        user_message: str | None,
        session_id: str | None = None,
        config: dict[str, Any] | None = None,
        *,
        run_id: str | None = None,
        sinks: Iterable[EventSink] = (),
        cancel: CancelToken | None = None,
    ) -> RunReply:
        """Run one turn and return its reply; see the module docstring for failures.

        ``run_id`` names the turn's events (default: a fresh id); ``sinks`` receive this
        turn's events besides the engine's. An empty ``session_id`` is the same as None: a
        new session with a generated id. Ids given must be valid
        (:data:`runtime.events.ID_PATTERN`: 1 to 64 ASCII letters, digits, ``.``, ``_``,
        ``-``); another is refused before any event (``error_code`` ``bad_run_id`` or
        ``bad_session_id``).

        ``cancel`` stops the turn when it fires (``cancel.cancel(reason, by)``, from another
        thread through the loop: ``loop.call_soon_threadsafe(cancel.cancel, reason, by)``):
        its barriers are cancelled, the step gets the flow's ``cancellation_grace`` to
        return, then is cancelled hard; the reply is ``Stopped: <reason>`` with
        ``error_code="turn_cancelled"``. A token that already fired stops the turn before
        it touches the session. A dashboard the turn's events are shipped to
        (:class:`~runtime.events.DashboardSink`) may stop it the same way: its Stop
        cancels the turn with the name of who pressed it.
        """
        session_id = session_id or None
        for refusal, value in ((BadSessionIdError, session_id), (BadRunIdError, run_id)):
            problem = None if value is None or value == "" else ev.id_problem(
                value, "session id" if refusal is BadSessionIdError else "run id")
            if problem is not None:
                # Refused before any event: every event would carry it, and no dashboard
                # (its store, URLs, headers and channel groups) takes it.
                return _failure(refusal(problem), "" if refusal is BadSessionIdError
                                else session_id or "")
        # A new session's id is chosen now, so every event of the turn carries it.
        turn_sinks = [*self.sinks, *sinks]
        bus = EventBus(turn_sinks, run_id=run_id, session_id=session_id or str(uuid.uuid4()))
        cancel, unhook = _stoppable_from_dashboards(turn_sinks, bus.run_id, cancel)
        try:
            if session_id is None:
                return await self._run_unlocked(flow_name, user_message, None, config, bus,
                                                cancel)
            async with self._session_lock(session_id):
                return await self._run_unlocked(flow_name, user_message, session_id, config,
                                                bus, cancel)
        finally:
            unhook()

    async def resumable(self, session_id: str) -> Resumable | None:
        """What :meth:`resume` of the session would resume, or None when nothing: the
        ledgered turn's latest run, its flow and message, and what its ledger holds (for a
        page's Resume button: offer it only when the run shown is ``run_id``)."""
        store = self.store
        if not isinstance(store, BranchLedgerStore):
            return None
        found = await store.ledger_load(session_id)
        if found is None:
            return None
        record, entries = found
        return Resumable(session_id=session_id, turn_id=record.turn_id, run_id=record.run_id,
                         flow=record.flow, message=record.message, revision=record.revision,
                         entries=len(entries),
                         tokens=sum(e.tokens.get("total_tokens", 0) for e in entries))

    async def resume(
        self,
        session_id: str,
        *,
        run_id: str | None = None,
        sinks: Iterable[EventSink] = (),
        cancel: CancelToken | None = None,
    ) -> RunReply:
        """Run the session's interrupted (or failed, or stopped) turn again, reusing the
        branches its ledgered barriers fulfilled.

        The turn runs from the session document as it began (kept in the ledger's turn
        record, with its flow, user message and config), saving over whatever revision the
        session is stored at now. When its code reaches a ledgered barrier again, each
        request whose key, index and digest (step, params, user message) match a ledger
        entry is not run: its branch is restored (``branch.reused``) and joins as if it had
        run. Changed requests and rejected branches run again. The turn's code before its
        barriers runs again too: its external effects must be idempotent.

        ``turn.started`` names the resumed run (``resumes``). The reply is a failure with
        ``error_code="nothing_to_resume"`` when the session holds no ledgered turn (the
        store keeps no ledgers, no barrier of the turn was ledgered, or it is over: a turn
        of the session that ends well drops the session's ledger, and so does one that
        fails without a ledger of its own), without any event. A turn that is stopped
        keeps it: the session stays as it was, and the turn can still be resumed.
        """
        for refusal, value in ((BadSessionIdError, session_id), (BadRunIdError, run_id)):
            problem = None if value is None else ev.id_problem(
                value, "session id" if refusal is BadSessionIdError else "run id")
            if problem is not None:
                return _failure(refusal(problem), "" if refusal is BadSessionIdError
                                else session_id)
        store = self.store
        if not isinstance(store, BranchLedgerStore):
            return _failure(NothingToResumeError(
                f"The session store ({type(store).__name__}) keeps no branch ledgers."),
                session_id)
        turn_sinks = [*self.sinks, *sinks]
        bus = EventBus(turn_sinks, run_id=run_id, session_id=session_id)
        cancel, unhook = _stoppable_from_dashboards(turn_sinks, bus.run_id, cancel)
        try:
            async with self._session_lock(session_id):
                try:
                    found = await store.ledger_load(session_id)
                except PicoFlowError as exc:
                    return _failure(exc, session_id)
                if found is None:
                    return _failure(NothingToResumeError(
                        f"Session '{session_id}' has no interrupted turn with a branch "
                        "ledger to resume."), session_id)
                record, entries = found
                return await self._run_unlocked(record.flow, record.message, session_id,
                                                record.config, bus, cancel,
                                                resume=(record, entries))
        finally:
            unhook()

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session document (deletion is not completion)."""
        async with self._session_lock(session_id):
            return await self.store.delete(session_id)

    async def close(self) -> None:
        """Send what the dashboard and OpenTelemetry sinks hold (if any), then close the
        store."""
        if self.dashboard is not None:
            await anyio.to_thread.run_sync(self.dashboard.close)
        close = getattr(self.otel, "close", None)
        if close is not None:
            await anyio.to_thread.run_sync(close)
        await self.store.close()

    async def _run_unlocked(
        self, flow_name: str, message: str | None, session_id: str | None,
        config: dict[str, Any] | None, bus: EventBus, cancel: CancelToken | None,
        resume: tuple[LedgerTurn, list[LedgerEntry]] | None = None,
    ) -> RunReply:
        resumes = resume[0].run_id if resume is not None else None
        try:
            flow = self.get_flow(flow_name)()
        except PicoFlowError as exc:
            bus.emit(ev.TurnStarted, flow=flow_name, message=_event_text(message),
                     resumes=resumes)
            return self._failed(bus, _failure(exc, session_id or ""), exc)
        turn = turn_of(flow)
        turn.attach(self, bus)
        turn.turn_cancel = cancel
        turn.request = (message, config)
        turn.emit(ev.TurnStarted, flow=flow_name, message=_event_text(message),
                  resumes=resumes)
        if cancel is not None and cancel.cancelled:
            # Stopped before it began (while queued, or waiting for the session's lock):
            # nothing is created, restored or saved.
            stored = await self._stored_revision(session_id)
            return self._stopped(turn, cancel, session_id or "", stored)
        try:
            await self._bootstrap(flow, message, session_id, config, resume)
        except PicoFlowError as exc:
            if turn.doc is None or isinstance(exc, _UNTOUCHED):
                return self._failed(bus, _failure(exc, turn.doc.id if turn.doc else
                                                  session_id or ""), exc)
            return await self._abort(flow, exc)
        except Exception as exc:
            if turn.doc is None:
                logger.exception("Turn of flow '%s' failed before its session", flow.id)
                return self._failed(bus, _failure(exc, session_id or ""), exc)
            return await self._abort(flow, exc)
        if cancel is not None and cancel.cancelled:
            return await self._stopped_flushed(turn, cancel, flow.session_id)
        try:
            text: str | None
            if _coordinating(config):
                text = await flow.spawn_steps()
                if not isinstance(text, str):
                    raise FlowDefinitionError(
                        f"Flow '{flow.id}'.spawn_steps() must return the reply text, not "
                        f"{type(text).__name__}.")
            else:
                text = await run_step(turn, message)
            if cancel is not None and cancel.cancelled:
                return await self._stopped_flushed(turn, cancel, flow.session_id)
            assert text is not None  # only a stopped turn's step has no reply
            current = flow.require_current_step()
            reply = RunReply(
                success=True, completed=current.is_end(), message=text,
                session_id=flow.session_id, content_type=current.content_type,
            )
            await flow.save_session("final")
            # Whatever ledgered turn the session had is over: this one, or an interrupted
            # one this turn went past instead of resuming it.
            await self._drop_ledger(turn)
        except Exception as exc:
            if cancel is not None and cancel.cancelled:
                # Whatever the step raised once it was told to stop (TurnCancelledError, or
                # an error of code that found its barrier's branches cancelled) is the stop.
                if not isinstance(exc, TurnCancelledError):
                    logger.info("Turn of flow '%s' was stopped; its step ended with %r",
                                flow.id, exc)
                return await self._stopped_flushed(turn, cancel, flow.session_id)
            if isinstance(exc, _UNTOUCHED):
                return self._failed(bus, _failure(exc, flow.session_id), exc)
            return await self._abort(flow, exc)
        turn.emit(ev.TurnFinished, path="", success=True, completed=reply.completed,
                  message=ev.safe_text(reply.message), content_type=reply.content_type)
        return reply

    @staticmethod
    def _failed(bus: EventBus, reply: RunReply, exc: BaseException) -> RunReply:
        bus.emit(ev.TurnFailed, error=error_info(exc))
        return reply

    async def _stopped_flushed(self, turn: Turn, cancel: CancelToken,
                               session_id: str) -> RunReply:
        """:meth:`_stopped`, once the ledger entries still pending are written (what the
        stopped turn's branches finished is what a resume reuses)."""
        await turn.flush_ledger()
        return self._stopped(turn, cancel, session_id, turn.require_doc().revision)

    @staticmethod
    def _stopped(turn: Turn, cancel: CancelToken, session_id: str, revision: int) -> RunReply:
        """End a turn whose token fired: ``turn.cancelled`` last, nothing saved."""
        reason = cancel.reason or "cancelled"
        turn.emit(ev.TurnCancelled, path="", reason=reason, requested_by=cancel.requested_by,
                  revision=revision)
        return RunReply(success=False, completed=False, message=f"Stopped: {reason}",
                        session_id=session_id, content_type="text/plain",
                        error_code=TurnCancelledError.code)

    async def _stored_revision(self, session_id: str | None) -> int:
        """The revision a session is stored at (0 for none), read for a turn stopped
        before it began; a store that cannot say leaves the stop the headline."""
        if not session_id:
            return 0
        try:
            stored = await self.store.load(session_id)
        except Exception:
            logger.exception("Could not read session '%s' for a stopped turn", session_id)
            return 0
        return stored.revision if stored is not None else 0

    async def _bootstrap(
        self, flow: Flow, message: str | None, session_id: str | None,
        config: dict[str, Any] | None,
        resume: tuple[LedgerTurn, list[LedgerEntry]] | None = None,
    ) -> None:
        turn = turn_of(flow)
        config = _checked_input(flow, message, config)
        if config is not None:
            flow.add_context({"config": config})
        await flow.init()
        turn.collect_steps()
        for step in flow.steps.values():
            if not step.is_logic():
                self.resolve_model(flow.id, step.get_model_selection())
        if resume is not None:
            await self._bootstrap_resume(flow, resume)
            return
        stored = await self.store.load(session_id) if session_id else None
        if stored is not None and stored.run_status == "running":
            if stored.flow.name != flow.id:
                raise SessionFlowMismatchError(
                    f"Session '{stored.id}' belongs to flow '{stored.flow.name}', "
                    f"not '{flow.id}'.",
                    extra={"session_id": stored.id, "flow": stored.flow.name},
                )
            if stored.flow.current_step is None:
                raise SessionFlowInvariantError(f"Session '{stored.id}' has no current step.")
            restored = await flow.on_restore_session_doc(stored)
            if restored is not None:
                # Not saved here: the turn's first save (a crossing, a checkpoint, the
                # final one) writes it, so a turn that loses the race for the session
                # (another saved it after this turn loaded it) has saved nothing.
                turn.restore_document(restored)
                await flow.require_current_step().on_restore()
                self._mark_start(turn)
                turn.emit_loaded(new_session=False)
                return
        # New session: keep the chosen id unless a finished session already holds it.
        fresh = turn.bus.session_id if turn.bus is not None and session_id is None else None
        doc = turn.new_document((session_id or fresh) if stored is None else None)
        created = await self.store.create(doc)
        doc.revision = created.revision
        turn.emit(ev.SessionSaved, path="", revision=created.revision, reason="created")
        initial = flow.require_current_step()
        turn.emit(ev.StepEntered, path="", step=initial.name, level=1, how="start")
        start = await initial.on_start()
        if start is not None:
            initial.get_memory().append(start)
        await flow.save_session("started")
        self._mark_start(turn)
        turn.emit_loaded(new_session=True)

    @staticmethod
    def _mark_start(turn: Turn) -> None:
        """Note the revision the turn begins from, and under a flow that ledgers its
        barriers by default the document too (what a resume starts from)."""
        doc = turn.require_doc()
        try:
            ledgered = turn.parallel_config().ledger
        except Exception:  # an invalid config is reported by the first fork, as ever
            ledgered = False
        turn.start = (doc.revision, doc.model_dump_json() if ledgered else None)

    async def _bootstrap_resume(
        self, flow: Flow, resume: tuple[LedgerTurn, list[LedgerEntry]]
    ) -> None:
        """Bind the session as the resumed turn began, to be saved over its stored
        revision, with the turn's ledger (its record now naming this run)."""
        turn = turn_of(flow)
        record, entries = resume
        store = self.store
        assert isinstance(store, BranchLedgerStore)
        if record.flow != flow.id:
            raise SessionFlowMismatchError(
                f"The ledgered turn of session '{record.session_id}' belongs to flow "
                f"'{record.flow}', not '{flow.id}'.",
                extra={"session_id": record.session_id, "flow": record.flow})
        stored = await store.load(record.session_id)
        if stored is None:
            raise NothingToResumeError(
                f"Session '{record.session_id}' is gone; its ledger cannot be resumed.")
        doc = SessionDocument.model_validate_json(record.document)
        doc.revision = stored.revision
        restored = await flow.on_restore_session_doc(doc)
        if restored is None:
            raise NothingToResumeError(
                f"Flow '{flow.id}' refused to restore session '{record.session_id}'.")
        turn.restore_document(restored)
        await flow.require_current_step().on_restore()
        turn.start = (record.revision, record.document)
        run_id = turn.bus.run_id if turn.bus is not None else record.run_id
        await store.ledger_begin(record.model_copy(update={"run_id": run_id}))
        turn.ledger = TurnLedger.resuming(
            StoreLedgerWriter(store, record.session_id, record.turn_id), run_id, record.run_id,
            entries)
        turn.emit_loaded(new_session=False)

    async def _drop_ledger(self, turn: Turn) -> None:
        """The turn's final save committed: its ledger has nothing left to resume."""
        store, doc = self.store, turn.require_doc()
        if not isinstance(store, BranchLedgerStore):
            return
        try:
            await store.ledger_drop(doc.id)
        except Exception:  # the turn succeeded; a stale ledger only offers a resume
            logger.exception("Could not drop the branch ledger of session '%s'", doc.id)

    async def _abort(self, flow: Flow, exc: Exception) -> RunReply:
        if not isinstance(exc, PicoFlowError):
            logger.exception("Turn of flow '%s' failed", flow.id)
        turn = turn_of(flow)
        doc = turn.doc
        if doc is None:
            return _failure(exc, "")
        message = str(exc)
        doc.run_status = "aborted"
        doc.error.append(LogEntry.model_validate(
            {"level": "error", "message": message, "error_type": type(exc).__name__}
        ))
        try:
            await turn.checkpoint("aborted")
            if turn.ledger is None:  # an interrupted turn this one went past is over too
                await self._drop_ledger(turn)
        except Exception as save_exc:  # the original failure stays the headline
            message = f"{message}; failed to persist aborted session: {save_exc}"
        turn.emit(ev.TurnFailed, path="", error=error_info(exc))  # always the last event
        return _failure(exc, doc.id, message)

    def _session_lock(self, session_id: str) -> _SessionLock:
        return _SessionLock(self._locks, session_id)


def dashboard_from_env(environ: Mapping[str, str] = os.environ, *,
                       source: str | None = None) -> DashboardSink | None:
    """A :class:`DashboardSink` for ``PICOFLOW_DASHBOARD_URL`` and
    ``PICOFLOW_DASHBOARD_TOKEN`` (closing within ``PICOFLOW_DASHBOARD_CLOSE_TIMEOUT``
    seconds), or None unless both are set (empty counts as unset); a URL without a token
    is warned about, once per URL, and so is a sink without httpx2 (the ``http`` extra).
    ``source`` names what records the runs in the dashboard's origin label."""
    url = environ.get("PICOFLOW_DASHBOARD_URL", "").strip()
    token = environ.get("PICOFLOW_DASHBOARD_TOKEN", "").strip()
    if url and not token and url not in _TOKENLESS_URLS:
        _TOKENLESS_URLS.add(url)
        logger.warning(
            "PICOFLOW_DASHBOARD_URL is set (%s) but PICOFLOW_DASHBOARD_TOKEN is not: no "
            "events are shipped to the dashboard. Create a token with the ingest scope "
            "(the dashboard's Tokens page, or picoflow-web manage create_api_token <user> "
            "<name> --scope ingest) and set it as PICOFLOW_DASHBOARD_TOKEN.", url)
    if not (url and token):
        return None
    try:
        return DashboardSink(url, token, source=source,
                             close_timeout=close_timeout_from_env(environ))
    except ImportError as exc:
        if exc.name != "httpx2":
            raise
        if url not in _TOKENLESS_URLS:
            _TOKENLESS_URLS.add(url)
            logger.warning("PICOFLOW_DASHBOARD_URL is set (%s) but no events are shipped: "
                           "%s", url, exc)
        return None


_TOKENLESS_URLS: set[str] = set()
"""Dashboard URLs already warned about for want of a token or of httpx2 (engines are made
often)."""


def otel_from_env(environ: Mapping[str, str] = os.environ) -> EventSink | None:
    """The OpenTelemetry sink (``runtime.integrations.otel``) when ``PICOFLOW_OTEL`` is on,
    else None. The core never imports the integration: it is loaded by name only when the
    variable asks for it (``runtime/LAYERS.toml``, ``[runtime.plugins]``)."""
    if environ.get("PICOFLOW_OTEL", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    try:
        module = importlib.import_module("runtime.integrations.otel.sink")
    except ImportError as exc:
        raise ImportError(
            "PICOFLOW_OTEL=1 needs the otel extra: pip install 'picoflow-web[otel]' "
            f"({exc})") from exc
    sink: EventSink | None = module.sink_from_env(environ)
    return sink


class _SessionLock:
    """A per-session FIFO lock that forgets sessions nobody waits for."""

    def __init__(self, locks: dict[str, tuple[anyio.Lock, int]], key: str) -> None:
        self._locks, self._key = locks, key

    async def __aenter__(self) -> None:
        lock, users = self._locks.get(self._key) or (anyio.Lock(), 0)
        self._locks[self._key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: give the slot back
            self._forget()
            raise

    def _forget(self) -> None:
        lock, users = self._locks[self._key]
        if users == 1:
            del self._locks[self._key]
        else:
            self._locks[self._key] = (lock, users - 1)

    async def __aexit__(self, *exc: object) -> None:
        self._locks[self._key][0].release()
        self._forget()


def _checked_input(
    flow: Flow, message: str | None, config: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The request's config as the flow will see it, after its message and config checks."""
    if flow.needs_message() and not (message or "").strip():
        raise MessageRequiredError(f"Flow '{flow.id}' needs a message.")
    problem = lone_surrogate_in(message) if message else None
    if problem:  # a command line's undecodable bytes, say: no session could store it
        raise FlowInputError(f"The message to flow '{flow.id}' has {problem}.")
    schema = flow.config_schema()
    if schema is None or config is None:
        return config
    # The framework's own keys (coordinator mode, its depth guard) are no flow's schema's.
    reserved = {k: config[k] for k in RESERVED_KEYS if k in config}
    config = {k: v for k, v in config.items() if k not in reserved}
    try:
        parsed = schema.model_validate(config)
    except ValidationError as exc:
        errors = [{"field": ".".join(str(part) for part in e["loc"]), "message": e["msg"]}
                  for e in exc.errors()]
        listed = "; ".join(f"{e['field'] or 'config'}: {e['message']}" for e in errors)
        raise ConfigValidationError(f"Config of flow '{flow.id}' is not valid: {listed}.",
                                    extra={"errors": errors}) from None
    return {**parsed.model_dump(mode="json", exclude_unset=True), **reserved}


def _event_text(message: str | None) -> str | None:
    return None if message is None else ev.safe_text(message)


def _stoppable_from_dashboards(
    sinks: list[EventSink], run_id: str, cancel: CancelToken | None,
) -> tuple[CancelToken | None, Callable[[], None]]:
    """The token a turn runs with, and what unhooks it: when the turn's events go to a
    dashboard, one linked to ``cancel`` that the dashboard's Stop fires through the turn's
    event loop (the sink hears the request in a thread of its own)."""
    dashboards = [sink for sink in sinks if isinstance(sink, DashboardSink)]
    if not dashboards:
        return cancel, lambda: None
    token = CancelToken(cancel)
    loop = anyio.lowlevel.current_token().native_token
    # asyncio loops and trio tokens both take a thread-safe callback, under two names.
    schedule: Callable[..., object] = (getattr(loop, "call_soon_threadsafe", None)
                                       or loop.run_sync_soon)  # type: ignore[attr-defined]

    def stop(reason: str, by: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the turn is over
            schedule(token.cancel, reason, by)

    removers = [sink.on_stop(run_id, stop) for sink in dashboards]

    def unhook() -> None:
        for remove in removers:
            remove()

    return token, unhook


def _coordinating(config: dict[str, Any] | None) -> bool:
    """Whether the request asks for coordinator mode (``config._concurrent`` truthy)."""
    return isinstance(config, dict) and bool(config.get(COORDINATOR_KEY))


_UNTOUCHED = (SessionConflictError, SessionFlowMismatchError, SessionFlowInvariantError)
"""Failures that leave the stored document exactly as it was."""


def _failure(exc: Exception, session_id: str, message: str | None = None) -> RunReply:
    if isinstance(exc, PicoFlowError):
        code, text = exc.code, message or str(exc)
    else:
        code, text = "internal", message or f"{type(exc).__name__}: {exc}"
    return RunReply(
        success=False, completed=True, message=text, session_id=session_id,
        content_type="text/plain", error_code=code,
    )
