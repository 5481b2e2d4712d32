"""Error reports and log lines that show no password, token or key.

* :func:`mask_credentials`: the password of a URL (``postgres://pf:********@db/flows``)
  and a ``Bearer`` token (``Bearer ********``) masked in any text.
* :class:`SafeExceptionReporterFilter` (``DEFAULT_EXCEPTION_REPORTER_FILTER``): Django's
  filter for error reports (the debug page, mails to ``ADMINS``) hiding more setting
  names (``*SECRET*``, ``*PASSW*``, ``*TOKEN*``, ``*KEY*``, ``*CREDENTIAL*``, ``*COOKIE*``,
  ``*AUTH*``, ``*PRIVATE*``, ``*DSN*``, ...) and masking URL credentials in settings,
  request headers and a failing frame's locals.
* :class:`ExceptionReporter` (``DEFAULT_EXCEPTION_REPORTER``): also masks them in what the
  filter does not see, such as the exception's own message.
* :class:`MaskCredentials`: a :mod:`logging` filter doing the same to every record it
  passes (message, arguments, traceback); the standalone site attaches it to its console
  handler.

A project embedding the app can use all four in its own settings (README).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, QueryDict
from django.template.defaultfilters import pprint
from django.utils.safestring import SafeString, mark_safe
from django.views import debug

MASK = "********"

# scheme://user:password@ — the password as RFC 3986 allows it (no "/", "?", "@", space).
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s'\"<>]*:)[^/?@\s'\"<>]+(?=@)")
# "Bearer <token>" as in an Authorization header (a lone word "bearer" is left alone).
_BEARER = re.compile(r"(?P<head>\b[Bb]earer\s+)[A-Za-z0-9._~+/=-]+")

HIDDEN_SETTINGS = re.compile(
    r"API|TOKEN|KEY|SECRET|PASS|SIGNATURE|COOKIE|CREDENTIAL|BEARER|AUTH|PRIVATE|DSN|SESSION",
    flags=re.IGNORECASE)
"""Setting names (and request headers, dict keys) whose values an error report hides."""


def mask_credentials(text: str) -> str:
    """``text`` with the passwords of its URLs and its bearer tokens replaced by ``*``."""
    if "@" in text:
        text = _URL_PASSWORD.sub(rf"\g<head>{MASK}", text)
    if "earer" in text:
        text = _BEARER.sub(rf"\g<head>{MASK}", text)
    return text


_LOCALS_DEPTH = 8


class _Shown:
    """A value shown by its masked rendering (error reports ``pprint`` what they show)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


class SafeExceptionReporterFilter(debug.SafeExceptionReporterFilter):
    """Django's filter, hiding more names and masking credentials inside URLs."""

    hidden_settings = HIDDEN_SETTINGS

    def cleanse_setting(self, key: int | str, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        return mask_credentials(cleansed) if isinstance(cleansed, str) else cleansed

    def get_safe_request_meta(self, request: HttpRequest) -> dict[str, Any]:
        return {name: mask_credentials(value) if isinstance(value, str) else value
                for name, value in super().get_safe_request_meta(request).items()}

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> Any:
        shown = []
        for name, value in super().get_traceback_frame_variables(request, tb_frame):
            value = self._cleanse_local(name, value, 0)
            if not isinstance(value, str):
                text = pprint(value)
                masked = mask_credentials(text)
                if masked != text:
                    value = _Shown(masked)
            shown.append((name, value))
        return shown

    def _cleanse_local(self, key: Any, value: Any, depth: int) -> Any:
        """Like :meth:`cleanse_setting` (a database backend's frame holds its settings,
        ``PASSWORD`` and all), for a value of any shape: nesting is followed a few levels
        only, so a structure that contains itself ends too."""
        if isinstance(key, str) and self.hidden_settings.search(key):
            return self.cleansed_substitute
        if isinstance(value, str):
            return mask_credentials(value)
        if depth >= _LOCALS_DEPTH:
            return value
        if isinstance(value, dict):
            return {k: self._cleanse_local(k, v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            items = [self._cleanse_local("", v, depth + 1) for v in value]
            return items if isinstance(value, list) else tuple(items)
        return value


class ExceptionReporter(debug.ExceptionReporter):
    """Django's reporter, its page and text masked as a whole: the exception's message and
    anything else a filter does not reach show no URL password or bearer token."""

    def get_traceback_data(self) -> dict[str, Any]:
        # The report lists the request's query: a query Django refused to parse (too many
        # fields) would raise again here, and the refusal would escape as Daphne's 500.
        if self.request is not None:
            try:
                self.request.GET  # noqa: B018 (parsed here, or refused)
            except SuspiciousOperation:
                self.request.GET = QueryDict()
        return super().get_traceback_data()

    # Still Django's rendered page and text: masking only swaps credentials for ``*``.
    def get_traceback_html(self) -> SafeString:
        return mark_safe(mask_credentials(super().get_traceback_html()))

    def get_traceback_text(self) -> SafeString:
        return mark_safe(mask_credentials(super().get_traceback_text()))


class MaskCredentials(logging.Filter):
    """Masks URL passwords and bearer tokens in a record's message, arguments and
    traceback (the record is rewritten: every handler after this one sees it masked)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports it, as it would have
            return True
        masked = mask_credentials(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_credentials(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_credentials(record.stack_info)
        return True


__all__ = ["HIDDEN_SETTINGS", "MASK", "ExceptionReporter", "MaskCredentials",
           "SafeExceptionReporterFilter", "mask_credentials"]
