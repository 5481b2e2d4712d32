"""Push operations of the web app (``<entity>_<action>``): starting turns, tokens, users."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from typing import Any

from picoflow_web.bridge import RunRecorder, broadcast_run, finish_run
from picoflow_web.engine import get_engine
from picoflow_web.models import Run
from runtime import FlowNotRegisteredError, RunReply

logger = logging.getLogger("picoflow.web")

_BACKGROUND: set[asyncio.Task[Any]] = set()
"""Turns running in the server; kept referenced so they are not garbage-collected."""

MAX_MESSAGE_CHARS = 20_000


class InputError(ValueError):
    """Bad input from a client: the API answers 400 with this message."""


def _check(flow: str, message: str | None, session_id: str | None) -> None:
    known = get_engine().get_flow_names()
    if not isinstance(flow, str) or flow not in known:
        raise InputError(f"Unknown flow {flow!r}; known: {', '.join(known)}.")
    if message is not None and not isinstance(message, str):
        raise InputError("message must be a string.")
    if message is not None and len(message) > MAX_MESSAGE_CHARS:
        raise InputError(f"message is longer than {MAX_MESSAGE_CHARS} characters.")
    if session_id is not None and (not isinstance(session_id, str) or len(session_id) > 64):
        raise InputError("session id must be a string of at most 64 characters.")


async def run_execute(
    *, flow: str, message: str | None, session_id: str | None = None,
    config: dict[str, Any] | None = None, user: Any = None, run_id: str | None = None,
) -> tuple[Run, RunReply]:
    """Run one turn to its end, recording its events; returns the run and the reply."""
    _check(flow, message, session_id)
    run_id = run_id or uuid.uuid4().hex
    run = await Run.objects.filter(id=run_id).afirst()
    if run is None:
        run = await _create_run(run_id, flow, message, session_id, user)
    recorder = RunRecorder(run_id)
    recorder.start()
    try:
        reply = await get_engine().run(flow, message, session_id=session_id, config=config,
                                       run_id=run_id, sinks=[recorder])
    finally:
        await recorder.close()
    run = await finish_run(run_id, reply.model_dump())
    return run, reply


async def _create_run(
    run_id: str, flow: str, message: str | None, session_id: str | None, user: Any
) -> Run:
    authenticated = user is not None and getattr(user, "is_authenticated", False)
    run = await Run.objects.acreate(id=run_id, flow=flow, message=message or "",
                                    session_id=session_id or "",
                                    started_by=user if authenticated else None)
    await broadcast_run(run)
    return run


async def run_start(
    *, flow: str, message: str | None, session_id: str | None = None,
    config: dict[str, Any] | None = None, user: Any = None,
) -> Run:
    """Start a turn in the server and return at once; the run page follows it live."""
    _check(flow, message, session_id)
    run = await _create_run(uuid.uuid4().hex, flow, message, session_id, user)

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


__all__ = ["FlowNotRegisteredError", "InputError", "run_execute", "run_start", "session_end"]
