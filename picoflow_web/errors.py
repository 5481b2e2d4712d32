"""The web app's errors a client is told about: one root, one body shape.

Every refusal that reaches a client (an HTTP answer, a websocket's ``error`` message) is an
:class:`ApiError`: its status, its ``code`` and ``error_code``, its message and the
details that locate it (``fields``, ``line``, ``expected``...). The families below carry
their status and default code, so raising one says what kind of refusal it is::

    raise NotFound(f"No run {run_id!r}.")
    raise InputError("compact must be 0 or 1.", error_code="bad_parameter")
    raise Conflict(f"Run {run_id} has ended.", code="run_ended")

:func:`error_body` is the one body shape, which the HTTP API
(:func:`picoflow_web.http.error_answers.error`) and the websockets send: ``{"type": "error",
"message", "code", "error_code"}`` plus details. ``error_code`` is the stable, specific
name; ``code`` is what older clients read (``bad_request`` for most bad input). Both are
a contract.

A leaf module: every part of the app may raise these, and it imports none of them.
"""

from __future__ import annotations

from typing import Any


def error_body(message: str, code: str, error_code: str | None = None,
               fields: dict[str, str] | None = None, **details: Any) -> dict[str, Any]:
    """The one error shape: ``error_code`` is ``code`` unless a more specific one is given;
    ``fields`` (what is wrong with each field) only when there are any."""
    body: dict[str, Any] = {"type": "error", "message": message, "code": code,
                            "error_code": error_code or code}
    if fields:
        body["fields"] = fields
    body.update(details)
    return body


class ApiError(Exception):
    """A refused request: ``message`` says what was wrong with it (never how the server is
    built), with its ``status``, ``code`` and ``error_code`` (each defaulting to the
    class's) and ``details`` that go into the body as they are."""

    status: int = 400
    code: str = "bad_request"
    error_code: str | None = None
    """None: the same as ``code``."""

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 error_code: str | None = None, fields: dict[str, str] | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.error_code = error_code or self.error_code or self.code
        self.fields = fields
        self.details = details

    def body(self) -> dict[str, Any]:
        """This error in the one error shape."""
        return error_body(self.message, self.code, self.error_code, self.fields,
                          **self.details)


class InputError(ApiError, ValueError):
    """Bad input (400): a parameter, a body or a config the request cannot have."""


class Forbidden(ApiError):
    """Known to the user but not theirs to do (403): a viewer starting a run, say."""

    status = 403
    code = "forbidden"


class NotFound(ApiError):
    """Unknown, or another project's (404)."""

    status = 404
    code = "not_found"


class Conflict(ApiError):
    """The state of what the request names does not allow it (409): a run that ended."""

    status = 409
    code = "conflict"


class Unavailable(ApiError):
    """A feature this installation lacks (501): an optional extra not installed."""

    status = 501
    code = "unavailable"


__all__ = ["ApiError", "Conflict", "Forbidden", "InputError", "NotFound", "Unavailable",
           "error_body"]
