"""Export and import over HTTP: ``GET /api/runs/<id>/export``,
``GET /api/sessions/<id>/export`` and ``POST /api/import``.

Exports need the ``read`` scope and answer only for runs and sessions of the requester's
readable projects (another project's id is a 404, like an unknown one). They are streamed
(:mod:`picoflow_web.data.exporting`), so a long run is never built in memory as one response.

An import stores runs, so it needs what starting one does: the ``run`` scope and the
operator role in the target project (``?project=``, else the token's, else ``default``).
A browser session has that scope too, so a file can be uploaded from the dashboard.
What is checked and how a file is refused is :mod:`picoflow_web.record.importing`'s; the reply
is :class:`~picoflow_web.http.bodies.ImportReply` (201).
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse

from picoflow_web.data import access, exporting, selectors
from picoflow_web.http.api import api_view
from picoflow_web.http.bodies import ImportedRun, ImportReply, answer
from picoflow_web.http.error_answers import error
from picoflow_web.live import groups, relay
from picoflow_web.record import importing, ingest


def _grant(request: HttpRequest) -> access.Access:
    return request.access  # type: ignore[attr-defined,no-any-return]


def _attachment(ids: list[str], kind: str, ident: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(exporting.alines(ids),
                                     content_type=exporting.CONTENT_TYPE)
    response["Content-Disposition"] = exporting.disposition(kind, ident)
    return response


@api_view("GET")
async def run_export(request: HttpRequest, run_id: str) -> HttpResponseBase:
    """``GET /api/runs/<id>/export``: the run's events as JSONL (an attachment)."""
    run = await selectors.run_get(run_id, projects=_grant(request).readable())
    if run is None:
        return error(f"No run {run_id!r}.", 404, "not_found")
    return _attachment([run.id], "run", run.id)


@api_view("GET")
async def session_export(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """``GET /api/sessions/<id>/export``: the events of the session's runs, in turn order,
    as JSONL (an attachment)."""
    ids = await sync_to_async(exporting.session_runs)(session_id, _grant(request).readable())
    if ids is None:
        return error(f"No session {session_id!r}.", 404, "not_found")
    return _attachment(ids, "session", session_id)


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "on")


@api_view("POST", scope="run")
async def import_events(request: HttpRequest) -> HttpResponse:
    """``POST /api/import[?project=P][&copy=1]``: a JSONL export stored as runs."""
    if request.content_type != exporting.CONTENT_TYPE:
        return error("Send the file as application/x-ndjson: one JSON event per line.", 415,
                     "unsupported_media_type")
    grant = _grant(request)
    project = request.GET.get("project") or grant.token_project or access.DEFAULT_PROJECT
    grant.require(project, "run", f"project {project!r}")
    body = ingest.read_body(request, importing.MAX_IMPORT_BYTES,
                            "export fewer runs at a time")
    user = request.api_user  # type: ignore[attr-defined]
    done = await sync_to_async(importing.import_jsonl)(
        body, project=project, copy=_flag(request.GET.get("copy")), user=user,
        origin={"by": user.get_username()})
    # Runs lists open in browsers show the new runs; nobody follows their events yet.
    await relay.publish([groups.summary_message(s) for s in done.stored.summaries])
    return answer(reply(done, project), 201)


def reply(done: importing.Imported, project: str) -> ImportReply:
    """What an import says it stored (the API's reply, the command's summary)."""
    runs = [ImportedRun(id=run.id, original_id=done.original_ids[run.id],
                        session_id=run.session_id, status=run.status,
                        event_count=run.event_count, origin=run.origin_info())
            for run in done.runs]
    return ImportReply(project=project, copied=done.copied,
                       runs=runs, events=sum(r.event_count for r in runs))


__all__ = ["import_events", "reply", "run_export", "session_export"]
