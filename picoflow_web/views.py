"""Server-rendered pages: runs list, run page, session page. All need login.

Pages carry their initial data in ``data-*`` attributes and ``json_script`` blocks; the ES
modules under ``static/picoflow_web/js/`` take it from there (live updates over
websockets).
"""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from picoflow_web import __version__
from picoflow_web.engine import get_engine
from picoflow_web.models import Run, StoredSession


@require_safe
@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The runs list, with the form that starts a run."""
    return render(request, "picoflow_web/index.html", {
        "version": __version__,
        "flows": get_engine().get_flow_names(),
        "sessions": list(StoredSession.objects.order_by("-updated")
                         .values("id", "flow", "run_status")[:50]),
    })


@require_safe
@login_required
def run_page(request: HttpRequest, run_id: str) -> HttpResponse:
    """One run: the barrier tree, lanes and the inspector."""
    run = Run.objects.filter(id=run_id).first()
    if run is None:
        raise Http404("No such run.")
    return render(request, "picoflow_web/run.html", {"run": run, "summary": run.summary()})


@require_safe
@login_required
def session_page(request: HttpRequest, session_id: str) -> HttpResponse:
    """One session: its turns, cursor path, state and tokens."""
    session = StoredSession.objects.filter(id=session_id).first()
    if session is None:
        raise Http404("No such session.")
    runs = list(Run.objects.filter(session_id=session_id).order_by("started_at"))
    flow = session.doc.get("flow", {}) if isinstance(session.doc, dict) else {}
    return render(request, "picoflow_web/session.html", {
        "session": session, "doc": session.doc, "runs": runs,
        "step_states": [
            {"name": record.get("name", ""), "json": json.dumps(record.get("state", {}),
                                                                indent=2, sort_keys=True,
                                                                ensure_ascii=False)}
            for record in flow.get("steps", [])
        ],
        "context_json": json.dumps(flow.get("context", {}), indent=2, sort_keys=True,
                                   ensure_ascii=False),
    })


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe (no login: it reveals nothing)."""
    return JsonResponse({"status": "ok"})
