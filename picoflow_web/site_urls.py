"""Routes of the standalone site (``picoflow-web serve``, ``make run``): the app and the
admin. A project of your own includes ``picoflow_web.urls`` next to its own admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("picoflow_web.urls")),
]
