"""The standalone site's routes and two that raise, one page and one under ``/api/``: the
exception's message and the view's locals carry the credentials of the relay URL and of
``DATABASE_URL`` (what a careless view or library might hold when it fails)."""

import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def fail(request: HttpRequest) -> HttpResponse:
    database_url = os.environ.get("DATABASE_URL", "")
    relay = settings.PICOFLOW_RELAY_URL
    raise RuntimeError(f"cannot reach {relay} (database {database_url})")


urlpatterns = [
    path("fail/", fail),
    path("api/fail", fail),
    path("", include("picoflow_web.config.site_urls")),
]

handler400 = "picoflow_web.http.error_answers.bad_request"
handler404 = "picoflow_web.http.error_answers.not_found"
handler500 = "picoflow_web.http.error_answers.server_error"
