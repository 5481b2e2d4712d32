"""Server-rendered pages: runs list, run page, compare page, session page, API docs. All
need login.

Pages carry their initial data in ``data-*`` attributes and ``json_script`` blocks; the ES
modules under ``static/picoflow_web/js/`` take it from there (live updates over
websockets).

The views are async so that they read through the same (async) selectors as the API and
the consumers. Templates are rendered in a worker thread: the base template reads
``request.user``, which is a synchronous, lazily loaded database read.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import global_settings, settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render, resolve_url
from django.views.decorators.http import require_safe

from picoflow_web import __version__
from picoflow_web.data import access, selectors
from picoflow_web.execute import services
from picoflow_web.execute.engine import get_engine
from picoflow_web.record import watchdog

SESSION_CHOICES = 50
"""Most recent sessions the start form offers to continue."""


async def _render(request: HttpRequest, template: str, context: dict[str, Any]) -> HttpResponse:
    return await sync_to_async(render)(request, template, context)


async def _grant(request: HttpRequest) -> access.Access:
    user = await request.auser()
    return await access.for_user(user)


@require_safe
@login_required
async def index(request: HttpRequest) -> HttpResponse:
    """The runs list, with the form that starts a run."""
    await watchdog.sweep()  # runs whose executor vanished are not listed as running
    grant = await _grant(request)
    runnable = sorted(p for p in grant.roles if grant.allows(p, "run"))
    return await _render(request, "picoflow_web/index.html", {
        "version": __version__,
        "flows": get_engine().get_flow_names(),
        "sessions": await selectors.session_choices(SESSION_CHOICES,
                                                    projects=grant.readable()),
        # A start form offers a choice only when there is one to make.
        "projects": runnable if len(runnable) > 1 else [],
    })


@require_safe
@login_required
async def run_page(request: HttpRequest, run_id: str) -> HttpResponse:
    """One run: the barrier tree, lanes and the inspector."""
    grant = await _grant(request)
    run = await selectors.run_get(run_id, projects=grant.readable())
    if run is None:
        raise Http404("No such run.")
    resumable = await services.run_resumable(run)
    resume = {
        # project_id is never null: django-stubs types a foreign key with a default as nullable.
        "can_run": grant.allows(run.project_id, "run"),  # type: ignore[arg-type]
        "resumable": None if resumable is None else {"entries": resumable.entries,
                                                     "tokens": resumable.tokens},
        "resumed_by": await services.run_resumed_by(run),
    }
    return await _render(request, "picoflow_web/run.html", {
        "run": run, "summary": run.summary(), "resume": resume})


@require_safe
@login_required
async def compare_page(request: HttpRequest, run_a: str, run_b: str) -> HttpResponse:
    """Two runs side by side: their branches matched by path and key, both timings."""
    readable = (await _grant(request)).readable()
    a = await selectors.run_get(run_a, projects=readable)
    b = await selectors.run_get(run_b, projects=readable)
    if a is None or b is None:
        raise Http404("No such run.")
    return await _render(request, "picoflow_web/compare.html", {"a": a, "b": b})


@require_safe
@login_required
async def session_page(request: HttpRequest, session_id: str) -> HttpResponse:
    """One session: its turns, cursor path, state and tokens."""
    found = await selectors.session_with_runs_get(
        session_id, projects=(await _grant(request)).readable())
    if found is None:
        raise Http404("No such session.")
    session = found.session
    flow = session.doc.get("flow", {}) if isinstance(session.doc, dict) else {}
    return await _render(request, "picoflow_web/session.html", {
        "session": session, "doc": session.doc, "runs": found.runs,
        "step_states": [
            {"name": record.get("name", ""), "json": _pretty(record.get("state", {}))}
            for record in flow.get("steps", [])
        ],
        "context_json": _pretty(flow.get("context", {})),
    })


def _pretty(value: Any) -> str:
    """JSON as the session page shows it: indented, keys sorted, non-ASCII kept."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@require_safe
@login_required
async def api_docs(request: HttpRequest) -> HttpResponse:
    """The HTTP API's documentation: the vendored Swagger UI reading ``/api/openapi.json``."""
    return await _render(request, "picoflow_web/api_docs.html", {"version": __version__})


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe (no login: it reveals nothing)."""
    return JsonResponse({"status": "ok"})


class LoginView(auth_views.LoginView):
    """Django's login page. Without a ``next`` it goes where the project's
    ``LOGIN_REDIRECT_URL`` says, or to the runs list when the project left that at Django's
    default (``/accounts/profile/``, which nothing serves)."""

    template_name = "picoflow_web/login.html"

    def get_default_redirect_url(self) -> str:
        if settings.LOGIN_REDIRECT_URL == global_settings.LOGIN_REDIRECT_URL:
            return resolve_url("index")
        return super().get_default_redirect_url()
