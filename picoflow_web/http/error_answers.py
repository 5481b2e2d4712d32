"""The JSON API's one error shape, and JSON answers for what never reaches a view.

Under the API's paths (``/api/``, ``/ai/``, ``/v1/``) every error is JSON, never HTML:
the handlers below answer what Django refuses before a view, and
:class:`JsonErrorsMiddleware` turns any other error answer there into the error shape
(Django's debug pages with ``DEBUG`` on, a bare 405, a project's own error pages). A
project embedding the app adds that middleware first in its ``MIDDLEWARE``.

``{"type": "error", "message", "code", "error_code"}`` (plus details where they help),
4xx (:func:`picoflow_web.errors.error_body`). ``error_code`` is the stable, specific name
(``too_deep``, ``invalid_text``, ...); ``code`` is what older clients read (``bad_request``
for most bad input). Messages say what was wrong with the request, never how the server
is built: no exception texts, no tracebacks. What the app refuses it raises as an
:class:`~picoflow_web.errors.ApiError`, answered by :func:`answer_error`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views import defaults

from picoflow_web.errors import ApiError, error_body
from picoflow_web.http.bodies import Error, answer

API_PREFIXES = ("/api/", "/ai/", "/v1/")


def error(message: str, status: int, code: str = "bad_request",
          fields: dict[str, str] | None = None, error_code: str | None = None,
          **details: Any) -> HttpResponse:
    """The one error shape (a bad config also says what is wrong with each field)."""
    return answer(Error.model_validate(error_body(message, code, error_code, fields,
                                                  **details)), status)


def answer_error(exc: ApiError) -> HttpResponse:
    """A refusal the app raised, in the one error shape, with its status."""
    return answer(Error.model_validate(exc.body()), exc.status)


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIXES)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: JSON under the API's paths, Django's page elsewhere."""
    if _is_api(request):
        return error(f"No endpoint {request.path!r}.", 404, "not_found")
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler400``: what Django refuses before a view (a body larger than
    ``DATA_UPLOAD_MAX_MEMORY_SIZE``, too many fields) answered in the error shape."""
    from django.core.exceptions import RequestDataTooBig

    if isinstance(exception, RequestDataTooBig):
        return error("Body too large.", 413, "body_too_large")
    if _is_api(request):
        return error("Bad request.", 400, "bad_request")
    # Django's view never reads the exception: None does as well as one.
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: the error shape without internals (the traceback is logged)."""
    if _is_api(request):
        return error("Internal error; it was logged.", 500, "internal_error")
    return defaults.server_error(request)


# What an error answer that is not in the error shape yet becomes, by status (others: the
# status's own phrase).
_SHAPES = {
    400: ("Bad request.", "bad_request"),
    401: ("Authentication required.", "unauthenticated"),
    403: ("Forbidden.", "forbidden"),
    405: ("Method not allowed.", "method_not_allowed"),
    413: ("Body too large.", "body_too_large"),
    429: ("Too many requests.", "too_many_requests"),
}
_KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")


def _is_json(response: HttpResponse) -> bool:
    kind = response.get("Content-Type", "").split(";", 1)[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _declared_too_large(request: HttpRequest) -> bool:
    """The body's declared length is over Django's limit: with DEBUG on, Django answers
    that (``RequestDataTooBig``) with its debug page as a 400."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        return limit is not None and int(request.META.get("CONTENT_LENGTH") or 0) > limit
    except ValueError:
        return False


def as_json_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """``response`` itself, unless it is an error under the API's paths that is not JSON:
    then the error shape for its status (the headers a client acts on, and cookies, kept)."""
    status = response.status_code
    if status < 400 or _is_json(response) or not _is_api(request):
        return response
    if status == 400 and _declared_too_large(request):
        status = 413
    if status >= 500:
        message, code = "Internal error; it was logged.", "internal_error"
    elif status == 404:
        message, code = f"No endpoint {request.path!r}.", "not_found"
    elif status in _SHAPES:
        message, code = _SHAPES[status]
    else:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Refused"
        message, code = f"{phrase}.", phrase.lower().replace(" ", "_").replace("-", "_")
    shaped = error(message, status, code)
    for header in _KEPT_HEADERS:
        if header in response:
            shaped[header] = response[header]
    shaped.cookies = response.cookies
    return shaped


class JsonErrorsMiddleware:
    """Every error answer under ``/api/``, ``/ai/`` and ``/v1/`` in the JSON error shape,
    ``DEBUG`` on or off (:func:`as_json_error`); first in ``MIDDLEWARE``, so that it also
    sees what other middleware answers. Sync and async."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return as_json_error(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        response: Awaitable[HttpResponse] = self.get_response(request)
        return as_json_error(request, await response)


__all__ = ["API_PREFIXES", "JsonErrorsMiddleware", "answer_error", "as_json_error",
           "bad_request", "error", "not_found", "server_error"]
