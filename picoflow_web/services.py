"""Writes of the web app (``<entity>_<action>``): runs and sessions.

A run's row is created, finished and announced to the runs list here; its events are
stored by the bridge's sink while the turn runs (:mod:`picoflow_web.bridge`). Reads are in
:mod:`picoflow_web.selectors`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from typing import Any

from django.utils import timezone

from picoflow_web import groups
from picoflow_web.bridge import RunRecorder
from picoflow_web.engine import get_engine
from picoflow_web.models import Run
from runtime import ConfigValidationError, FlowInputError, RunReply

logger = logging.getLogger("picoflow.web")

_BACKGROUND: set[asyncio.Task[Any]] = set()
"""Turns running in the server; kept referenced so they are not garbage-collected."""

MAX_MESSAGE_CHARS = 20_000


class InputError(ValueError):
    """Bad input from a client: the API answers 400 with this message and ``code``;
    ``fields`` maps config fields to what is wrong with them (a config that does not fit
    the flow's schema)."""

    def __init__(self, message: str, code: str = "bad_request",
                 fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.fields = fields


def _check(flow: str, message: str | None, session_id: str | None,
           config: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Refuse bad input before anything starts; returns the config the turn runs with."""
    engine = get_engine()
    known = engine.get_flow_names()
    if not isinstance(flow, str) or flow not in known:
        raise InputError(f"Unknown flow {flow!r}; known: {', '.join(known)}.")
    if message is not None and not isinstance(message, str):
        raise InputError("message must be a string.")
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        raise InputError(f"message is longer than {MAX_MESSAGE_CHARS} characters.")
    if session_id is not None and (not isinstance(session_id, str) or len(session_id) > 64):
        raise InputError("session id must be a string of at most 64 characters.")
    try:
        return engine.check_input(flow, message, config)
    except ConfigValidationError as exc:
        fields = {e["field"]: e["message"] for e in exc.extra.get("errors", [])}
        raise InputError(str(exc), exc.code, fields) from None
    except FlowInputError as exc:
        raise InputError(str(exc), exc.code) from None


async def run_execute(
    *, flow: str, message: str | None, session_id: str | None = None,
    config: dict[str, Any] | None = None, user: Any = None, run_id: str | None = None,
) -> tuple[Run, RunReply]:
    """Run one turn to its end, recording its events; returns the run and the reply."""
    config = _check(flow, message, session_id, config)
    run_id = run_id or uuid.uuid4().hex
    run = await Run.objects.filter(id=run_id).afirst()
    if run is None:
        run = await _run_create(run_id, flow, message, session_id, user)
    recorder = RunRecorder(run_id)
    recorder.start()
    try:
        reply = await get_engine().run(flow, message, session_id=session_id, config=config,
                                       run_id=run_id, sinks=[recorder])
    finally:
        await recorder.close()
    run = await run_finish(run_id, reply.model_dump())
    return run, reply


async def _run_create(
    run_id: str, flow: str, message: str | None, session_id: str | None, user: Any
) -> Run:
    """A new running run, announced to the runs list."""
    authenticated = user is not None and getattr(user, "is_authenticated", False)
    run = await Run.objects.acreate(id=run_id, flow=flow, message=message or "",
                                    session_id=session_id or "",
                                    started_by=user if authenticated else None)
    await run_broadcast(run)
    return run


async def run_finish(run_id: str, reply: dict[str, Any]) -> Run:
    """Record a turn's reply on its run, and announce the finished run."""
    status = Run.Status.FINISHED if reply["success"] else Run.Status.FAILED
    # The reply's session id, not the request's: a turn without one started a session.
    await Run.objects.filter(id=run_id).aupdate(
        status=status, reply=reply, session_id=reply["session_id"], finished_at=timezone.now())
    run = await Run.objects.aget(id=run_id)
    await run_broadcast(run)
    return run


async def run_broadcast(run: Run) -> None:
    """Tell the runs list about a new or changed run."""
    await groups.runs_send(run.summary())


async def run_start(
    *, flow: str, message: str | None, session_id: str | None = None,
    config: dict[str, Any] | None = None, user: Any = None,
) -> Run:
    """Start a turn in the server and return at once; the run page follows it live."""
    config = _check(flow, message, session_id, config)
    run = await _run_create(uuid.uuid4().hex, flow, message, session_id, user)

    async def execute() -> None:
        try:
            await run_execute(flow=flow, message=message, session_id=session_id,
                              config=config, user=user, run_id=run.id)
        except Exception:
            logger.exception("Run %s failed outside the flow", run.id)

    # A fresh context: the request's context points sync_to_async at the request's own
    # thread executor, which is gone once the response is sent.
    task = asyncio.get_running_loop().create_task(execute(), context=contextvars.Context())
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
    return run


async def session_end(session_id: str) -> bool:
    """Delete a session document (``POST /ai/end``)."""
    return await get_engine().delete_session(session_id)


__all__ = ["InputError", "run_broadcast", "run_execute", "run_finish", "run_start",
           "session_end"]
