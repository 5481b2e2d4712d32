"""Routes of the standalone site (``picoflow-web serve``, ``make run``): the app and the
admin. A project of your own includes ``picoflow_web.urls`` next to its own admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("picoflow_web.urls")),
]

# Errors in the JSON shape under /api/, /ai/ and /v1/, pages elsewhere
# (picoflow_web.http.error_answers);
# Django reads these from the root URLconf only.
handler400 = "picoflow_web.http.error_answers.bad_request"
handler404 = "picoflow_web.http.error_answers.not_found"
handler500 = "picoflow_web.http.error_answers.server_error"
