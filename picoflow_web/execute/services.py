"""Writes of the web app (``<entity>_<action>``): runs and sessions.

A run's row is created (queued) and announced to the runs list here, and asked to stop;
its task (:mod:`picoflow_web.execute.tasks`) has a worker execute it and record its end
(:mod:`picoflow_web.execute.execution`), its events stored by the recorder while the turn
runs (:mod:`picoflow_web.record.recorder`). Reads are in :mod:`picoflow_web.data.selectors`.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from picoflow_web.config import app_settings
from picoflow_web.data import selectors
from picoflow_web.data.access import DEFAULT_PROJECT, Access
from picoflow_web.data.documents import acting_in
from picoflow_web.data.redact import redact
from picoflow_web.errors import Conflict, InputError, NotFound
from picoflow_web.execute import run_ends
from picoflow_web.execute.engine import get_engine
from picoflow_web.execute.execution import TURN_CANCELLED, run_broadcast, run_finish
from picoflow_web.models import Project, Run
from picoflow_web.record.spans import SOURCE as SPANS_SOURCE
from runtime import ConfigValidationError, FlowInputError, Resumable, RunReply
from runtime.events import ID_PATTERN, id_problem

logger = logging.getLogger("picoflow.web")

MAX_MESSAGE_CHARS = 20_000


async def _project_of(grant: Access | None, session_id: str | None,
                      requested: str | None) -> str:
    """The project a turn runs in: its session's when it continues one (the session must be
    the requester's to continue), else the one the requester asks for or defaults to
    (:meth:`~picoflow_web.data.access.Access.project_for_start`). Without ``grant`` (code of the
    dashboard itself) the requested one, else ``default``."""
    owner = await selectors.session_project(session_id) if session_id else None
    if grant is None:
        if owner is not None and requested and owner != requested:
            raise InputError(f"Session {session_id!r} is not in project {requested!r}.",
                             error_code="project_mismatch")
        return owner or requested or DEFAULT_PROJECT
    if owner is None:
        return grant.project_for_start(requested)
    if not grant.sees(owner):
        raise NotFound(f"No session {session_id!r}.")
    if requested and requested != owner:
        raise InputError(f"Session {session_id!r} is in project {owner!r}, not "
                         f"{requested!r}.", error_code="project_mismatch")
    grant.require(owner, "run", f"session {session_id!r}")
    return owner


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
    check_id(session_id, "session id")
    try:
        return engine.check_input(flow, message, config)
    except ConfigValidationError as exc:
        fields = {e["field"]: e["message"] for e in exc.extra.get("errors", [])}
        raise InputError(str(exc), code=exc.code, fields=fields) from None
    except FlowInputError as exc:
        raise InputError(str(exc), code=exc.code) from None


async def _coordinator_in(run_id: str, project: str) -> None:
    """A child names a coordinator run of its own project: any other id, another
    project's or an unknown one, is not found (404), the same answer for both."""
    if not await Run.objects.filter(id=run_id, project_id=project).aexists():
        raise NotFound(f"No coordinator run {run_id!r} in project {project!r}.")


RUN_ID = ID_PATTERN
"""A run id a client may choose (a coordinator names its children's runs)."""


def check_id(value: Any, what: str) -> None:
    """Refuse (400 ``bad_run_id`` / ``bad_session_id``) an id outside the one definition
    (:data:`runtime.events.ID_PATTERN`); None or ``""`` names none."""
    problem = None if value is None or value == "" else id_problem(value, what)
    if problem is not None:
        raise InputError(problem, error_code=f"bad_{what.replace(' ', '_')}")


async def run_start(
    *, flow: str, message: str | None, session_id: str | None = None,
    config: dict[str, Any] | None = None, user: Any = None, grant: Access | None = None,
    project: str | None = None, run_id: str | None = None,
    coordinator: dict[str, Any] | None = None,
) -> Run:
    """Queue a turn for a worker and return at once; the run page follows it live.

    The run is stored ``queued`` before its task is, so a worker that takes the task finds
    it (and a run whose task could not be queued says so instead of waiting forever).
    ``grant`` is the requester's access: the turn runs in a project it may run in.
    """
    check_id(session_id, "session id")
    check_id(run_id, "run id")
    # Who may run where first: a request not allowed to run learns nothing of the flows.
    in_project = await _project_of(grant, session_id, project)
    if coordinator is not None:
        await _coordinator_in(str(coordinator["run_id"]), in_project)
    config = redact(_check(flow, message, session_id, config))  # never stored with secrets
    if in_project == DEFAULT_PROJECT:  # made on first use (a fresh or flushed database)
        await Project.objects.aget_or_create(name=DEFAULT_PROJECT)
    origin: dict[str, Any] = {"kind": "worker"}
    if coordinator:
        origin["coordinator"] = coordinator
    try:
        run = await Run.objects.acreate(
            id=run_id or uuid.uuid4().hex, flow=flow, message=redact(message or ""),
            session_id=session_id or "", project_id=in_project,
            config=config, status=Run.Status.QUEUED, origin=origin,
            started_by=_starter(user))
    except IntegrityError:
        owner = await Run.objects.filter(id=run_id or "").values_list(
            "project_id", flat=True).afirst()
        if owner != in_project:  # another project's run does not exist here
            raise NotFound(f"Run id {run_id!r} cannot be used in project {in_project!r}; "
                           "a new run needs a new id.") from None
        # A resent request of a coordinator's child: it must never run twice.
        raise Conflict(f"Run {run_id!r} exists already; it is not started again.",
                       code="run_exists") from None
    await _queue(run)
    return run


def _starter(user: Any) -> Any:
    """The user a run is started by (None: the dashboard's own code, no one logged in)."""
    return user if user is not None and getattr(user, "is_authenticated", False) else None


async def _queue(run: Run) -> None:
    """Announce the stored ``queued`` run and queue its task (or end it ``not_queued``)."""
    await run_broadcast(run)
    from picoflow_web.execute.tasks import execute_run  # the task module needs the app registry

    try:
        await execute_run.aenqueue(run.id)
    except Exception as exc:
        logger.exception("Queueing run %s failed", run.id)
        await run_finish(run.id, {
            "success": False, "completed": False, "session_id": run.session_id,
            "message": f"The run could not be queued: {exc}", "content_type": "text/plain",
            "error_code": "not_queued"}, status=Run.Status.FAILED, only_from=Run.Status.QUEUED)


async def run_execute(
    *, flow: str, message: str | None, session_id: str | None = None,
    config: dict[str, Any] | None = None, user: Any = None, grant: Access | None = None,
    project: str | None = None, run_id: str | None = None,
    coordinator: dict[str, Any] | None = None,
) -> tuple[Run, RunReply]:
    """Queue a turn and wait for its end (``POST /ai/run`` answers with the reply); raises
    :class:`RunStillGoing` when it has not ended within ``PICOFLOW_RUN_WAIT``."""
    run = await run_start(flow=flow, message=message, session_id=session_id, config=config,
                          user=user, grant=grant, project=project, run_id=run_id,
                          coordinator=coordinator)
    return await run_wait(run.id)


class RunStillGoing(Exception):
    """The run had not ended when its waiter gave up (``PICOFLOW_RUN_WAIT``)."""

    def __init__(self, run: Run, waited: float) -> None:
        super().__init__(f"Run {run.id} is {run.status} still after {waited:g} s.")
        self.run, self.waited = run, waited


async def run_wait(run_id: str, timeout: float | None = None) -> tuple[Run, RunReply]:
    """Wait until the run ended (whoever executes it); the run and its reply.

    Waits by hearing the run's end (:mod:`picoflow_web.execute.run_ends`), for ``timeout``
    seconds (default ``PICOFLOW_RUN_WAIT``); raises :class:`RunStillGoing` after that.
    """
    limit = float(app_settings.get("RUN_WAIT") if timeout is None else timeout)
    run = await run_ends.wait(run_id, limit)
    if run.status not in Run.ENDED:
        raise RunStillGoing(run, limit)
    return run, reply_of(run)


def reply_of(run: Run) -> RunReply:
    """An ended run's reply; an interrupted run's says why it has none."""
    if run.reply:
        return RunReply.model_validate(run.reply)
    reason = (run.interruption or {}).get("reason") or f"The run ended {run.status}."
    code = "run_interrupted" if run.status == Run.Status.INTERRUPTED else f"run_{run.status}"
    return RunReply(success=False, completed=False, message=reason,
                    session_id=run.session_id, content_type="text/plain", error_code=code)


class RunEnded(Conflict):
    """The run cannot be stopped (409): it already ended (or is not the dashboard's to
    stop)."""


async def run_cancel(run_id: str, grant: Access) -> Run | None:
    """Ask a run to stop (``POST /api/runs/<id>/cancel``); None for an unknown run.

    A queued run ends ``cancelled`` at once and is never executed; a running one is
    stopped by its worker (its lease keeper sees the request), cooperatively: the turn's
    cancel token, with the flow's grace period. A remote run's process learns the request
    from its next ingest or heartbeat answer, or its control long-poll
    (:func:`picoflow_web.record.ingest.stop_request`), and stops its turn the same way; one
    that never does is declared interrupted
    (:func:`picoflow_web.record.interruption.interrupt_silent_runs`). Asking twice is asking
    once.
    """
    by = getattr(grant.user, "get_username", lambda: "")() or "someone"
    request = {"by": by, "at": timezone.now().isoformat()}
    run = await selectors.run_get(run_id, projects=grant.readable())
    if run is None:
        return None
    # project_id is never null: django-stubs types a foreign key with a default as nullable.
    grant.require(run.project_id, "run", f"run {run_id!r}")  # type: ignore[arg-type]
    if run.is_remote and run.origin.get("source") == SPANS_SOURCE:
        # A trace's process exports spans only: nothing would carry the request to it.
        raise RunEnded(f"Run {run_id} is traced from its own process "
                       f"({run.origin_info()['label']}); stop it there.",
                       code="not_cancellable")
    stopped = await Run.objects.filter(id=run_id, status=Run.Status.QUEUED).aupdate(
        status=Run.Status.CANCELLED, cancel_requested=request, finished_at=timezone.now(),
        reply={"success": False, "completed": False, "session_id": run.session_id,
               "message": f"Stopped by {by} before it started.",
               "content_type": "text/plain", "error_code": TURN_CANCELLED})
    if not stopped:
        asked = await Run.objects.filter(id=run_id, status=Run.Status.RUNNING,
                                         cancel_requested__isnull=True).aupdate(
            cancel_requested=request)
        run = await Run.objects.aget(id=run_id)
        if not asked and run.status != Run.Status.RUNNING:
            raise RunEnded(f"Run {run_id} has ended ({run.status}).", code="run_ended")
    run = await Run.objects.aget(id=run_id)
    await run_broadcast(run)
    return run


RESUMABLE_STATUSES = (Run.Status.INTERRUPTED, Run.Status.FAILED, Run.Status.CANCELLED)
_RESUMPTIONS = uuid.UUID("6d1f4c52-2f0e-4a8e-9d7b-5b1f3e0c9a41")
"""The namespace of resumption run ids (:func:`run_resume`)."""
"""A run that ended without finishing: its turn may have left a branch ledger."""


class NotResumable(Conflict):
    """The run cannot be resumed (409 ``not_resumable``); the message says why."""

    code = "not_resumable"


async def run_resumable(run: Run) -> Resumable | None:
    """What resuming ``run`` would run again and save, or None: only an interrupted, failed
    or stopped run whose session holds a ledgered turn with it as the turn's latest run
    (a resumed run's own resumption resumes the resumed run, not the first). A run of
    another process (shipped or imported) kept its ledger in that process's store."""
    if run.status not in RESUMABLE_STATUSES or not run.session_id or not run.in_worker:
        return None
    # project_id is never null: django-stubs types a foreign key with a default as nullable.
    with acting_in(run.project_id):  # type: ignore[arg-type]
        found = await get_engine().resumable(run.session_id)
    return found if found is not None and found.run_id == run.id else None


async def run_resumed_by(run: Run) -> str | None:
    """The newest run that resumes ``run`` (its origin's ``resumes``), or None."""
    if run.status not in RESUMABLE_STATUSES or not run.session_id:
        return None
    # A resumption continues the run's session: the indexed column narrows the JSON lookup.
    return await Run.objects.filter(session_id=run.session_id, origin__resumes=run.id
                                    ).values_list("id", flat=True).afirst()


async def run_resume(run_id: str, grant: Access) -> Run | None:
    """Queue a new run that resumes ``run_id``'s turn (``POST /api/runs/<id>/resume``);
    None for an unknown run (or another project's).

    The new run has the run's flow, message, session, config and project, and an origin
    naming the run it resumes (``resumes``); its worker calls ``FlowEngine.resume``, which
    reuses the branches the turn's ledgered barriers fulfilled. Refused (409
    ``not_resumable``) unless :func:`run_resumable` names the run, and while another run
    that resumes it has not ended.
    """
    run = await selectors.run_get(run_id, projects=grant.readable())
    if run is None:
        return None
    grant.require(run.project_id, "run", f"run {run_id!r}")  # type: ignore[arg-type]
    if run.status not in RESUMABLE_STATUSES:
        raise NotResumable(f"Run {run_id} is {run.status}: only an interrupted, failed or "
                           "stopped run can be resumed.")
    pending = await Run.objects.filter(
        session_id=run.session_id, origin__resumes=run_id,
        status__in=(Run.Status.QUEUED, Run.Status.RUNNING)).values_list("id", flat=True).afirst()
    if pending is not None:
        raise NotResumable(f"Run {run_id} is being resumed already, by run {pending}.",
                           resumed_by=pending)
    made = await Run.objects.filter(session_id=run.session_id, origin__resumes=run_id).acount()
    if await run_resumable(run) is None:
        raise NotResumable(await _why_not_resumable(run))
    # The resumption's id follows from the run and how many resumptions it had: a request
    # that checked the same state in the same moment makes the same id, and the database
    # refuses the second (the checks above cannot: both pass them).
    resumption = uuid.uuid5(_RESUMPTIONS, f"{run.id}:{made + 1}").hex
    try:
        resumed = await Run.objects.acreate(
            id=resumption, flow=run.flow, message=run.message, session_id=run.session_id,
            project_id=run.project_id, config=run.config, status=Run.Status.QUEUED,
            origin={"kind": "worker", "resumes": run.id}, started_by=_starter(grant.user))
    except IntegrityError:
        raise NotResumable(f"Run {run_id} is being resumed already, by run {resumption}.",
                           resumed_by=resumption) from None
    await _queue(resumed)
    return resumed


async def _why_not_resumable(run: Run) -> str:
    """Why an ended run of :data:`RESUMABLE_STATUSES` has nothing to resume."""
    if not run.in_worker:
        return (f"Run {run.id} did not run in this dashboard's workers: its branch ledger, "
                "if any, is in the session store of the process that ran it "
                "(FlowEngine.resume there).")
    if run.session_id:
        with acting_in(run.project_id):  # type: ignore[arg-type]
            found = await get_engine().resumable(run.session_id)
        if found is not None:
            return (f"Run {run.id} is not the latest run of its turn: resume run "
                    f"{found.run_id} instead.")
    return (f"Run {run.id} left no branch ledger to resume: its flow ledgers no barrier, "
            "its turn forked none before it ended, or a later turn of its session is over.")


async def session_end(session_id: str, grant: Access) -> bool:
    """Delete a session document (``POST /ai/end``); another project's is not found."""
    owner = await selectors.session_project(session_id)
    if owner is None or not grant.sees(owner):
        return False
    grant.require(owner, "run", f"session {session_id!r}")
    with acting_in(owner):
        return await get_engine().delete_session(session_id)


__all__ = [
    "TURN_CANCELLED",
    "InputError",
    "NotResumable",
    "RunEnded",
    "RunStillGoing",
    "reply_of",
    "run_broadcast",
    "run_cancel",
    "run_execute",
    "run_finish",
    "run_resumable",
    "run_resume",
    "run_resumed_by",
    "run_start",
    "run_wait",
    "session_end",
]
