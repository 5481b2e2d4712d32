"""A project's own root URLconf that includes the app and sets no error handlers of its
own (Django's HTML pages answer its errors): what the app's middleware must turn into
JSON under the API's paths."""

from django.urls import include, path

urlpatterns = [path("", include("picoflow_web.urls"))]
