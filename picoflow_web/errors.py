"""The JSON API's one error shape, and JSON answers for what never reaches a view.

``{"type": "error", "message", "code", "error_code"}`` (plus details where they help),
4xx. ``error_code`` is the stable, specific name (``too_deep``, ``invalid_text``, ...);
``code`` is what it was before ``error_code`` existed (``bad_request`` for most bad
input), kept for the clients that read it. Messages say what was wrong with the
request, never how the server is built: no exception texts, no tracebacks.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from picoflow_web.bodies import Error, answer

API_PREFIXES = ("/api/", "/ai/")


def error(message: str, status: int, code: str = "bad_request",
          fields: dict[str, str] | None = None, error_code: str | None = None,
          **details: Any) -> HttpResponse:
    """The one error shape (a bad config also says what is wrong with each field)."""
    return answer(Error(type="error", message=message, code=code,
                        error_code=error_code or code, fields=fields or None, **details),
                  status)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIXES)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: JSON under the API's paths, Django's page elsewhere."""
    if _is_api(request):
        return error(f"No endpoint {request.path!r}.", 404, "not_found")
    return defaults.page_not_found(request, exception)  # type: ignore[arg-type]


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler400``: what Django refuses before a view (a body larger than
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, too many fields) answered in the error shape."""
    from django.core.exceptions import RequestDataTooBig

    if isinstance(exception, RequestDataTooBig):
        return error("Body too large.", 413, "body_too_large")
    if _is_api(request):
        return error("Bad request.", 400, "bad_request")
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: the error shape without internals (the traceback is logged)."""
    if _is_api(request):
        return error("Internal error; it was logged.", 500, "internal_error")
    return defaults.server_error(request)


__all__ = ["bad_request", "error", "not_found", "server_error"]
