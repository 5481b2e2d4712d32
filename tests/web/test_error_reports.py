"""What an error report may show: credentials inside URLs masked (settings, request
headers, a failing view's locals, the exception's message), settings named like secrets
hidden, and the same in every log line (URLs and ``Bearer`` tokens)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.views.debug import get_default_exception_reporter_filter

from picoflow_web.config.masking import MaskCredentials, mask_credentials

pytestmark = pytest.mark.django_db

RELAY_SECRET = "relay-Pa55-91ac"
DB_SECRET = "db-Pa55-7f3e"
HEADER_SECRET = "hdr-Pa55-20b1"


@pytest.mark.parametrize(("text", "masked"), [
    ("postgres://pf:s3cret@db.internal:5432/flows?sslmode=require",
     "postgres://pf:********@db.internal:5432/flows?sslmode=require"),
    ("redis://:p%40ss@cache:6379/0", "redis://:********@cache:6379/0"),
    ("postgres://pf:pw@/flows?host=/run/pg", "postgres://pf:********@/flows?host=/run/pg"),
    ("a=rediss://u:x@h/1, b=amqp://guest:guest@rabbit//",
     "a=rediss://u:********@h/1, b=amqp://guest:********@rabbit//"),
    ("'DATABASE_URL': 'postgres://pf:pw@h/db'", "'DATABASE_URL': 'postgres://pf:********@h/db'"),
    ("Authorization: Bearer pf_abc.DEF-123", "Authorization: Bearer ********"),
    ("authorization: bearer pf_abc", "authorization: bearer ********"),
])
def test_credentials_inside_urls_and_bearer_tokens_are_masked(text: str, masked: str) -> None:
    assert mask_credentials(text) == masked


@pytest.mark.parametrize("text", [
    "postgres://pf@db.internal/flows", "http://127.0.0.1:8000/api/runs",
    "http://host:8000/a@b", "see https://example.com/x?y=z", "max_tokens=3 bearer",
])
def test_text_without_credentials_is_left_alone(text: str) -> None:
    assert mask_credentials(text) == text


SECRET_SETTINGS = {
    "PICOFLOW_RELAY_URL": f"http://relay:{RELAY_SECRET}@127.0.0.1:9",
    "CHANNEL_LAYERS": {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer",
                                   "CONFIG": {"hosts": [f"redis://:{RELAY_SECRET}@r:6379"]}}},
    "SENTRY_DSN": "https://public@o1.ingest.example/1",
    "AWS_PRIVATE_THING": "x-private", "MY_CREDENTIALS": "x-cred", "X_BEARER": "x-bearer",
    "OAUTH_CLIENT": "x-auth", "UPLOAD_SIGNATURE": "x-sig", "SOME_PASSWD": "x-passwd",
    "REMEMBER_COOKIE": "x-cookie", "ACCESS_TOKEN": "x-token", "SIGNING_KEY": "x-key",
}


def test_the_settings_an_error_report_lists_hide_secrets() -> None:
    with override_settings(**SECRET_SETTINGS):
        safe = get_default_exception_reporter_filter().get_safe_settings()
        for name, value in SECRET_SETTINGS.items():
            assert RELAY_SECRET not in str(safe[name])
            if isinstance(value, str) and value.startswith("x-"):
                assert safe[name] != value, name
    assert "relay:********@127.0.0.1" in safe["PICOFLOW_RELAY_URL"]
    assert safe["CHANNEL_LAYERS"]["default"]["CONFIG"]["hosts"] == ["redis://:********@r:6379"]
    # Uppercase-looking module names of the settings module are listed too: none is left.
    assert not [name for name in safe if name.startswith("_")]
    assert safe["DEBUG"] is settings.DEBUG  # what is not secret stays readable


def test_the_debug_page_shows_no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", f"postgres://pf:{DB_SECRET}@db.internal/flows")
    client = Client(raise_request_exception=False)
    with override_settings(DEBUG=True, ROOT_URLCONF="tests.web.faulty_urls",
                           PICOFLOW_RELAY_URL=f"http://relay:{RELAY_SECRET}@127.0.0.1:9"):
        response = client.get("/fail/", HTTP_X_UPSTREAM=f"redis://:{HEADER_SECRET}@cache/0")
        text = client.get("/fail/", HTTP_ACCEPT="text/plain").content.decode()
    page = response.content.decode()
    assert response.status_code == 500 and "Traceback" in page  # the debug page
    for body in (page, text):
        for secret in (DB_SECRET, RELAY_SECRET, HEADER_SECRET):
            assert secret not in body
    assert "pf:********@db.internal" in page and "redis://:********@cache/0" in page


def record(msg: str, *args: Any, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("picoflow", logging.ERROR, __file__, 1, msg, args, exc_info)


def test_the_log_filter_masks_messages_arguments_and_tracebacks() -> None:
    try:
        raise ConnectionError(f"cannot reach redis://:{RELAY_SECRET}@cache/0")
    except ConnectionError as caught:
        exc = caught
    formatter = logging.Formatter("%(message)s")
    lines = [record("to %s with %r", f"postgres://pf:{DB_SECRET}@h/db", {"url": "x"}),
             record(f"sent Authorization: Bearer {HEADER_SECRET}"),
             record("%(url)s", {"url": f"http://u:{DB_SECRET}@h"}),
             record("relay failed", exc=exc)]
    for line in lines:
        assert MaskCredentials().filter(line)
        out = formatter.format(line)
        for secret in (DB_SECRET, RELAY_SECRET, HEADER_SECRET):
            assert secret not in out
    assert formatter.format(lines[0]) == "to postgres://pf:********@h/db with {'url': 'x'}"
    assert "ConnectionError: cannot reach redis://:********@cache/0" in formatter.format(lines[3])


def test_the_console_handler_masks() -> None:
    handler = next(h for h in logging.getLogger().handlers if h.name == "console")
    assert any(isinstance(f, MaskCredentials) for f in handler.filters)


def test_a_failing_frames_locals_are_shown_without_secrets() -> None:
    settings_dict = {"NAME": "flows", "PASSWORD": DB_SECRET, "OPTIONS": {"dsn": "x"}}
    loop: list[Any] = [f"redis://:{RELAY_SECRET}@cache/0"]
    loop.append(loop)
    try:
        raise RuntimeError("fails")
    except RuntimeError as exc:
        frame = exc.__traceback__.tb_frame  # type: ignore[union-attr]
    shown = dict(get_default_exception_reporter_filter().get_traceback_frame_variables(
        None, frame))
    text = repr(shown)
    assert DB_SECRET not in text and RELAY_SECRET not in text
    assert settings_dict["PASSWORD"] == DB_SECRET  # what runs is not changed, only shown
    assert "'NAME': 'flows'" in text and "redis://:********@cache/0" in text
