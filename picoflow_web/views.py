from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from picoflow_web import __version__


@require_safe
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "picoflow_web/index.html", {"version": __version__})


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})
