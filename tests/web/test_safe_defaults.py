"""Production-safe by default: with no variables set, ``picoflow-web serve`` runs with
``DEBUG`` off (no debug page, JSON errors under the API's paths, login over plain HTTP on
loopback) and keeps its data private (a 0700 folder, 0600 files); with
``PICOFLOW_DEBUG=1`` the debug page shows no password of ``DATABASE_URL``, of a
``PICOFLOW_*_URL`` or in a view's locals, and neither does the server's log."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import stat
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.livedaphne import build_env, live_daphne, run_manage
from tests.packaging.installed import REPO_ROOT, background, free_port, outside_env, wait_healthy
from tests.webhelpers import PostgresServer

FAULTY = "tests.web.faulty_settings"
DB_SECRET = "db-Pa55-7f3e"
RELAY_SECRET = "relay-Pa55-91ac"
DEBUG_PAGE_MARKS = ("Traceback", "DEBUG = True", "Request Method", "Using the URLconf")


def fetch(opener: urllib.request.OpenerDirector, url: str,
          data: bytes | None = None) -> tuple[int, str, str, bytes]:
    """(status, final URL, content type, body) for any status."""
    try:
        with opener.open(url, data=data, timeout=30) as response:
            return response.status, response.url, response.headers["Content-Type"], \
                response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, url, exc.headers["Content-Type"], exc.read()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def assert_json_error(answer: tuple[int, str, str, bytes], status: int, code: str) -> None:
    got, _, content_type, body = answer
    assert (got, content_type) == (status, "application/json"), body[:300]
    parsed = json.loads(body)
    assert parsed["type"] == "error" and parsed["error_code"] == code, parsed


def test_serve_with_no_variables_shows_no_debug_page_and_keeps_its_data_private(
    tmp_path: Path,
) -> None:
    data = tmp_path / "fresh" / "data"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # Nothing of PICOFLOW_* is set (outside_env drops it all): the defaults alone.
    env = outside_env(tmp_path, {"PYTHONPATH": str(REPO_ROOT),
                                 "DJANGO_SETTINGS_MODULE": FAULTY})
    log = tmp_path / "serve.log"
    with background([sys.executable, "-m", "picoflow_web", "serve", "--port", str(port),
                     "--workers", "0", "--data-dir", str(data)],
                    env=env, cwd=tmp_path, log_path=log) as process:
        wait_healthy(base, process, log)
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))

        status, _, _, body = fetch(opener, base + "/fail/")
        assert status == 500
        assert not [m for m in DEBUG_PAGE_MARKS if m.encode() in body], body[:500]
        assert b"cannot reach" not in body
        status, _, _, body = fetch(opener, base + "/no-such-page/")
        assert status == 404
        assert not [m for m in DEBUG_PAGE_MARKS if m.encode() in body], body[:500]
        assert_json_error(fetch(opener, base + "/api/no-such-endpoint"), 404, "not_found")
        assert_json_error(fetch(opener, base + "/api/fail"), 500, "internal_error")

        # Logging in works over plain HTTP on loopback: the cookies are not Secure-only.
        status, _, _, body = fetch(opener, base + "/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', body)
        assert status == 200 and token is not None
        form = urllib.parse.urlencode({
            "username": "admin", "password": (data / "admin_password").read_text().strip(),
            "csrfmiddlewaretoken": token.group(1).decode()}).encode()
        status, final, _, body = fetch(opener, base + "/login/", data=form)
        assert (status, urllib.parse.urlsplit(final).path) == (200, "/"), body[:300]
        assert b'id="pf-start-form"' in body

        assert mode(data) == 0o700
        private = ["secret_key", "admin_password", "picoflow.sqlite3",
                   "picoflow.sqlite3-wal", "picoflow.sqlite3-shm"]
        modes = {name: oct(mode(data / name)) for name in private if (data / name).exists()}
        assert {"secret_key", "admin_password", "picoflow.sqlite3"} <= set(modes)
        assert set(modes.values()) == {oct(0o600)}, modes
    output = log.read_text(errors="replace")
    assert "debug page on" not in output


def test_the_debug_page_and_the_log_show_no_password(
        tmp_path: Path, postgres: PostgresServer) -> None:
    url = postgres.create_database()
    assert url.startswith("postgres://picoflow@")
    secret_url = url.replace("picoflow@", f"picoflow:{DB_SECRET}@", 1)
    env = {"DJANGO_SETTINGS_MODULE": FAULTY, "DATABASE_URL": secret_url,
           "PICOFLOW_DEBUG": "1",
           "PICOFLOW_RELAY_URL": f"http://relay:{RELAY_SECRET}@127.0.0.1:9"}
    with live_daphne(env, data_dir=tmp_path / "data", workers=0) as server:
        status, _, body = server.get("/fail/")
        api_status, api_headers, api_body = server.get("/api/fail")
        missing_status, missing_headers, missing_body = server.get(
            "/api/no-such-endpoint")
        log = server.log()
    page = body.decode(errors="replace")
    assert status == 500 and "Traceback" in page, page[:300]  # the debug page, on purpose
    for secret in (DB_SECRET, RELAY_SECRET):
        assert secret not in page
        assert secret not in log
    assert "cannot reach" in page and "picoflow:********@" in page
    assert "RuntimeError" in log  # the failure was logged, its credentials masked
    assert (api_status, api_headers["Content-Type"]) == (500, "application/json"), api_body
    assert json.loads(api_body)["error_code"] == "internal_error"
    assert (missing_status, missing_headers["Content-Type"]) == (404, "application/json")
    assert json.loads(missing_body)["error_code"] == "not_found"


def test_debug_is_off_unless_asked_for(tmp_path: Path) -> None:
    script = "from django.conf import settings; print(settings.DEBUG)"
    default = run_manage("shell", "-c", script,
                         env=build_env(tmp_path, {"PICOFLOW_DEBUG": None}))
    assert default.returncode == 0, default.stderr
    assert default.stdout.strip().splitlines()[-1] == "False"
    asked = run_manage("shell", "-c", script, env=build_env(tmp_path, {"PICOFLOW_DEBUG": "1"}))
    assert asked.stdout.strip().splitlines()[-1] == "True"


def test_serve_says_when_the_debug_page_is_on_and_when_http_is_redirected() -> None:
    from django.test import override_settings

    from picoflow_web.management.commands.serve import banner

    with override_settings(DEBUG=False, SECURE_SSL_REDIRECT=False):
        assert banner("127.0.0.1", 8000, 2).splitlines() == [
            "PicoFlow Web on http://127.0.0.1:8000/ with 2 worker(s) (Ctrl-C stops them all)"]
    with override_settings(DEBUG=True, SECURE_SSL_REDIRECT=False):
        assert "debug page on (PICOFLOW_DEBUG=1)" in banner("127.0.0.1", 8000, 2)
    with override_settings(DEBUG=False, SECURE_SSL_REDIRECT=True):
        assert "plain HTTP is redirected to https://" in banner("0.0.0.0", 8000, 2)


def test_with_debug_off_static_files_are_plain_until_collected_then_hashed(
    tmp_path: Path,
) -> None:
    """Nothing collected (a checkout's tests and live servers): the source files at their
    plain names. Once ``collectstatic`` has written into the data folder (``serve`` does):
    the hashed, compressed copies."""
    data = tmp_path / "data"
    env: dict[str, str | None] = {"PICOFLOW_DEBUG": None}
    css = re.compile(rb'href="(/static/picoflow_web/css/app(\.[0-9a-f]{12})?\.css)"')
    served = []
    for collect in (False, True):
        if collect:
            result = run_manage("collectstatic", "--noinput", env=build_env(data, env))
            assert result.returncode == 0, result.stderr
        with live_daphne(env, data_dir=data, workers=0) as server:
            status, _, page = server.get("/login/")
            found = css.search(page)
            assert status == 200 and found is not None, page[:500]
            got, _, body = server.get(found.group(1).decode())
            assert got == 200 and b"--" in body
            served.append(found.group(2))
    assert served[0] is None and served[1] is not None
    assert (data / "staticfiles" / "staticfiles.json").is_file()
